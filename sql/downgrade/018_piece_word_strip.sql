-- Undo 018: the words with their positions again, recomputed from each piece's label and body
-- (the rule of 0024, to_tsvector without strip). Writers wait from the start, as in 018.
LOCK TABLE pgmem.piece IN SHARE ROW EXCLUSIVE MODE;
CREATE OR REPLACE FUNCTION pgmem.piece_tsv(label text, body text)
RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
RETURN to_tsvector('english'::regconfig, label || ' ' || body);
-- Every scope's rows: a login member of pgmem_owner sees them while pgmem.maintenance is on.
SELECT pg_catalog.set_config('pgmem.maintenance', 'on', true);
UPDATE pgmem.piece_word w SET tsv = pgmem.piece_tsv(p.label, p.body)
  FROM pgmem.piece p WHERE p.scope_id = w.scope_id AND p.piece_id = w.piece_id;
SELECT pg_catalog.set_config('pgmem.maintenance', '', true);
COMMENT ON COLUMN pgmem.piece_word.tsv IS 'Full-text vector (english configuration) of the piece''s label and body.';
