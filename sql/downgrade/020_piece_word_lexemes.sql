-- Undo 020: each piece's words as a stripped tsvector again, with 014's index expression
-- (pgmem.scope_words) and 0025's rule for new pieces (pgmem.piece_tsv and the trigger function
-- writing it, so writes go on). Writers wait from the start, as in 020.
LOCK TABLE pgmem.piece IN SHARE ROW EXCLUSIVE MODE;
CREATE FUNCTION pgmem.scope_words(scope_no bigint, kind text, tsv tsvector)
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
RETURN ARRAY(SELECT scope_no::text || left(kind, 1) || '/' || l FROM unnest(tsvector_to_array(tsv)) AS l);
COMMENT ON FUNCTION pgmem.scope_words(bigint, text, tsvector) IS
'The word index''s keys of a piece (piece_scope_words_idx): each lexeme of its tsv as <scope_no><first letter of kind>/<lexeme>, e.g. 17m/zeppelin, so a word search reads only one scope''s pieces of one kind. The index''s expression: never redefined (sql/incremental/014_scope_words.sql).';
DROP INDEX pgmem.piece_word_words_idx;
ALTER TABLE pgmem.piece_word RENAME COLUMN lexemes TO tsv;
ALTER TABLE pgmem.piece_word ALTER COLUMN tsv TYPE tsvector USING array_to_tsvector(string_to_array(tsv, ' '));
COMMENT ON COLUMN pgmem.piece_word.tsv IS
'The lexemes (english configuration) of the piece''s label and body, without positions (pgmem.piece_tsv).';
DROP FUNCTION pgmem.scope_lexemes(bigint, text, text);
CREATE INDEX piece_word_words_idx ON pgmem.piece_word USING gin (pgmem.scope_words(scope_no, kind, tsv));
COMMENT ON INDEX pgmem.piece_word_words_idx IS
'Word index keyed by scope, kind and lexeme (pgmem.scope_words): the postings the word side reads (pgmem._word_postings).';
CREATE OR REPLACE FUNCTION pgmem.piece_tsv(label text, body text)
RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
RETURN strip(to_tsvector('english'::regconfig, label || ' ' || body));
CREATE OR REPLACE FUNCTION pgmem._piece_words()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    INSERT INTO pgmem.piece_word (scope_id, piece_id, scope_no, kind, thread_id, tsv)
    VALUES (NEW.scope_id, NEW.piece_id, NEW.scope_no, NEW.kind, NEW.thread_id, pgmem.piece_tsv(NEW.label, NEW.body));
    RETURN NULL;
END
$$;
-- 0027's trigger: once a row (0037 made it once a statement, from a transition table).
CREATE OR REPLACE TRIGGER piece_words_on_insert AFTER INSERT ON pgmem.piece
    FOR EACH ROW EXECUTE FUNCTION pgmem._piece_words();
DROP FUNCTION IF EXISTS pgmem.piece_lexemes(text, text);
