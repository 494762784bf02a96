-- Undo 017: the words back in pgmem.piece (a generated column: the table is rewritten) with the
-- word index on it; pgmem.piece_word goes, with the trigger that wrote it.
DROP TRIGGER IF EXISTS piece_words_on_insert ON pgmem.piece;
DROP FUNCTION IF EXISTS pgmem._piece_words();
DROP FUNCTION IF EXISTS pgmem.piece_tsv(text, text);
ALTER TABLE pgmem.piece ADD COLUMN tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, label || ' ' || body)) STORED;
COMMENT ON COLUMN pgmem.piece.tsv IS 'Full-text vector (english configuration) for word search.';
CREATE INDEX piece_scope_words_idx ON pgmem.piece USING gin (pgmem.scope_words(scope_no, kind, tsv));
COMMENT ON INDEX pgmem.piece_scope_words_idx IS
'Word index keyed by scope, kind and lexeme (pgmem.scope_words): the postings the word side reads (pgmem._word_postings).';
DROP TABLE pgmem.piece_word;
