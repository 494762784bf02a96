-- Undo 014: the word index keyed by lexeme alone again.
CREATE INDEX piece_tsv_idx ON pgmem.piece USING gin (tsv);
DROP INDEX pgmem.piece_scope_words_idx;
DROP FUNCTION pgmem.scope_words(bigint, text, tsvector);
