-- 002: hardening (issue 12). Run once, after 001.
--
-- 1. Model keys are integers allocated by pgmem._model_key without a sequence (max + 1 under a
--    lock): a rolled-back registration burns nothing, and 2^31 keys cannot be exhausted by one
--    tenant (a smallint identity could, with 33,000 calls in a rolled-back transaction).
-- 2. Every scope gets a surrogate number, scope_no, copied onto its piece and fact rows (by a
--    trigger, sql/idempotent/005_scope.sql), so the per-scope partial ANN indexes are keyed
--    on the number (WHERE scope_no = 17) and the catalog no longer shows scope names.
-- 3. Facts are idempotent by content: content_hash (sha256 of thread, turn, section and body)
--    is unique per scope; add_facts skips a fact already stored. Duplicates stored before this
--    revision are removed, the oldest kept.
--
-- Rows are read and rewritten here whatever the migrating role: FORCE ROW LEVEL SECURITY would
-- hide every row from pgmem_owner, so it is lifted for this transaction and put back at the end.

CREATE TEMPORARY TABLE pgmem_002_forced ON COMMIT DROP AS
    SELECT c.oid::regclass AS tbl FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p') AND c.relforcerowsecurity;
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT tbl FROM pgmem_002_forced LOOP
        EXECUTE format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', r.tbl);
    END LOOP;
END
$$;

-- 1. Model keys.
ALTER TABLE pgmem.embedding_model ALTER COLUMN model_key DROP IDENTITY IF EXISTS;
ALTER TABLE pgmem.scope ALTER COLUMN piece_model_key TYPE integer, ALTER COLUMN fact_model_key TYPE integer;
ALTER TABLE pgmem.turn ALTER COLUMN model_key TYPE integer;
ALTER TABLE pgmem.embedding_model ALTER COLUMN model_key TYPE integer;
COMMENT ON COLUMN pgmem.embedding_model.model_key IS 'Key stored on every vector row: max + 1 when the model is first registered (pgmem._model_key), no sequence.';

-- 2. Scope numbers.
ALTER TABLE pgmem.scope ADD COLUMN scope_no bigint GENERATED ALWAYS AS IDENTITY;
COMMENT ON COLUMN pgmem.scope.scope_no IS 'Surrogate number of the scope, copied onto its piece and fact rows: per-scope partial indexes are keyed on it, so index names and definitions in the catalog do not show scope names.';

-- One lookup while each table is rewritten once (model_key's new type rewrites it anyway).
CREATE FUNCTION pg_temp.pgmem_002_scope_no(s text) RETURNS bigint
LANGUAGE sql STABLE AS $$ SELECT scope_no FROM pgmem.scope WHERE scope_id = s $$;

ALTER TABLE pgmem.piece ADD COLUMN scope_no bigint;
ALTER TABLE pgmem.piece ALTER COLUMN model_key TYPE integer,
    ALTER COLUMN scope_no TYPE bigint USING pg_temp.pgmem_002_scope_no(scope_id),
    ALTER COLUMN scope_no SET NOT NULL;
COMMENT ON COLUMN pgmem.piece.scope_no IS 'The scope''s number (pgmem.scope.scope_no), set on insert: the key of the per-scope partial ANN indexes.';

-- 3. Fact content keys.
ALTER TABLE pgmem.fact ADD COLUMN scope_no bigint, ADD COLUMN content_hash bytea;
ALTER TABLE pgmem.fact ALTER COLUMN model_key TYPE integer,
    ALTER COLUMN scope_no TYPE bigint USING pg_temp.pgmem_002_scope_no(scope_id),
    ALTER COLUMN scope_no SET NOT NULL,
    -- The same expression as pgmem._fact_hash (sql/idempotent/020_ingest.sql).
    ALTER COLUMN content_hash TYPE bytea USING
        pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.jsonb_build_array(thread_id, turn_index, section, body)::text, 'UTF8'));
DELETE FROM pgmem.fact f
 USING pgmem.fact older
 WHERE older.scope_id = f.scope_id AND older.content_hash = f.content_hash AND older.fact_id < f.fact_id;
ALTER TABLE pgmem.fact ALTER COLUMN content_hash SET NOT NULL,
    ADD CONSTRAINT fact_content_key UNIQUE (scope_id, content_hash);
COMMENT ON COLUMN pgmem.fact.scope_no IS 'The scope''s number (pgmem.scope.scope_no), set on insert: the key of the per-scope partial ANN indexes.';
COMMENT ON COLUMN pgmem.fact.content_hash IS 'sha256 of (thread, turn, section, body) as JSON (pgmem._fact_hash): one fact per content in a scope, so adding the same fact again stores nothing.';

DROP FUNCTION pg_temp.pgmem_002_scope_no(text);

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT tbl FROM pgmem_002_forced LOOP
        EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', r.tbl);
    END LOOP;
END
$$;
DROP TABLE pgmem_002_forced;
