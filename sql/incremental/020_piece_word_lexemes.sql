-- 020: each piece's words as one text of lexemes separated by spaces (issue 26). A stripped
-- tsvector keeps a 4-byte entry beside every lexeme, and nothing reads a tsvector operator here:
-- the word index's keys (pgmem.scope_lexemes), the sample's counts and a thread's words all
-- unnest the lexemes. The same lexemes, so the same pieces are found and scored. On 50,000
-- pieces of the 100k bench store a piece's words took 524 bytes as a tsvector and 346 as text
-- (docs/scaling.md). The english parser never puts a space inside a lexeme (its tokens are
-- words, numbers, hosts, paths and the like; tags, which may hold one, it drops).
-- No piece may be written meanwhile, so that every row is converted when this commits (a writer
-- that planned its trigger's insert before would write a tsvector): writers wait from the
-- start. The index on the old column's expression goes first, then the column's new type
-- rewrites pgmem.piece_word (ACCESS EXCLUSIVE on it: the word side of recall waits too), then
-- the word index is built on the new expression. The new rule for new pieces
-- (pgmem.piece_lexemes, sql/idempotent/020_ingest.sql) is applied in this same transaction.
LOCK TABLE pgmem.piece IN SHARE ROW EXCLUSIVE MODE;

-- The word index's expression over the text of lexemes: frozen with the index, as 014's
-- pgmem.scope_words was (a changed definition would disagree with the built index).
CREATE FUNCTION pgmem.scope_lexemes(scope_no bigint, kind text, lexemes text)
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
RETURN ARRAY(SELECT scope_no::text || left(kind, 1) || '/' || l FROM unnest(string_to_array(lexemes, ' ')) AS l);
COMMENT ON FUNCTION pgmem.scope_lexemes(bigint, text, text) IS
'The word index''s keys of a piece (piece_word_words_idx): each of its lexemes as <scope_no><first letter of kind>/<lexeme>, e.g. 17m/zeppelin, so a word search reads only one scope''s pieces of one kind. The index''s expression: never redefined (sql/incremental/020_piece_word_lexemes.sql).';

DROP INDEX pgmem.piece_word_words_idx;
ALTER TABLE pgmem.piece_word ALTER COLUMN tsv TYPE text USING array_to_string(tsvector_to_array(tsv), ' ');
ALTER TABLE pgmem.piece_word RENAME COLUMN tsv TO lexemes;
COMMENT ON COLUMN pgmem.piece_word.lexemes IS
'The lexemes (english configuration) of the piece''s label and body, sorted, separated by a space (pgmem.piece_lexemes).';
DROP FUNCTION pgmem.scope_words(bigint, text, tsvector);

CREATE INDEX piece_word_words_idx ON pgmem.piece_word USING gin (pgmem.scope_lexemes(scope_no, kind, lexemes));
COMMENT ON INDEX pgmem.piece_word_words_idx IS
'Word index keyed by scope, kind and lexeme (pgmem.scope_lexemes): the postings the word side reads (pgmem._word_postings).';
