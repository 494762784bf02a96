-- Undo 002. The functions in sql/idempotent are those of this checkout, which read the
-- columns removed here: after downgrading to 0002, apply the idempotent set of a checkout
-- at 0002 (git checkout <0002 release> && pgmem migrate re-applies it).
DROP TRIGGER IF EXISTS scope_no_on_insert ON pgmem.piece;
DROP TRIGGER IF EXISTS scope_no_on_insert ON pgmem.fact;
DROP FUNCTION IF EXISTS pgmem._set_scope_no();

-- Per-scope partial indexes on scope_no go with the column.
ALTER TABLE pgmem.fact DROP CONSTRAINT IF EXISTS fact_content_key,
    DROP COLUMN IF EXISTS content_hash, DROP COLUMN IF EXISTS scope_no;
ALTER TABLE pgmem.piece DROP COLUMN IF EXISTS scope_no;
ALTER TABLE pgmem.scope DROP COLUMN IF EXISTS scope_no;

-- Model keys back to a smallint identity (fails if a key above 32767 was handed out).
ALTER TABLE pgmem.fact ALTER COLUMN model_key TYPE smallint;
ALTER TABLE pgmem.piece ALTER COLUMN model_key TYPE smallint;
ALTER TABLE pgmem.turn ALTER COLUMN model_key TYPE smallint;
ALTER TABLE pgmem.scope ALTER COLUMN piece_model_key TYPE smallint, ALTER COLUMN fact_model_key TYPE smallint;
ALTER TABLE pgmem.embedding_model ALTER COLUMN model_key TYPE smallint;
ALTER TABLE pgmem.embedding_model ALTER COLUMN model_key ADD GENERATED ALWAYS AS IDENTITY;
SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence('pgmem.embedding_model', 'model_key'),
                         (SELECT coalesce(max(model_key), 0) + 1 FROM pgmem.embedding_model), false);
COMMENT ON COLUMN pgmem.embedding_model.model_key IS 'Short key stored on every vector row.';
