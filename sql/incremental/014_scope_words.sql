-- 014: the word index keyed by scope (issue 26). The word side of hybrid recall and document
-- search reads each distinctive word's pieces through a GIN index. Keyed by the lexeme alone
-- (piece_tsv_idx), it returned every scope's pieces holding the word and the heap was read to
-- drop the other tenants' rows: on a 2,000-piece scope of a 100,000-piece table, 8 to 10 times
-- the rows kept (docs/scaling.md). Keyed by scope number, kind and lexeme, a query reads only
-- its own scope's postings. The old index has no other reader and is dropped (one GIN index
-- a write, as before).
--
-- pgmem.scope_words is the index's expression, so it lives here, frozen with the index, not in
-- ../idempotent/: a changed definition would silently disagree with the index built from the
-- old one (a fix is a new function and a new index, in a new file).
CREATE FUNCTION pgmem.scope_words(scope_no bigint, kind text, tsv tsvector)
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
RETURN ARRAY(SELECT scope_no::text || left(kind, 1) || '/' || l FROM unnest(tsvector_to_array(tsv)) AS l);
COMMENT ON FUNCTION pgmem.scope_words(bigint, text, tsvector) IS
'The word index''s keys of a piece (piece_scope_words_idx): each lexeme of its tsv as <scope_no><first letter of kind>/<lexeme>, e.g. 17m/zeppelin, so a word search reads only one scope''s pieces of one kind. The index''s expression: never redefined (sql/incremental/014_scope_words.sql).';

CREATE INDEX piece_scope_words_idx ON pgmem.piece USING gin (pgmem.scope_words(scope_no, kind, tsv));
COMMENT ON INDEX pgmem.piece_scope_words_idx IS
'Word index keyed by scope, kind and lexeme (pgmem.scope_words): the postings the word side reads (pgmem._word_postings).';
DROP INDEX pgmem.piece_tsv_idx;
