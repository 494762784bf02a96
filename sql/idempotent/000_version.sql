-- What is installed, for a DBA in psql. Re-runnable: rewritten by every migration run, so it
-- names the package version that last applied the SQL.

CREATE OR REPLACE FUNCTION pgmem.version()
RETURNS TABLE (package_version text, schema_revision text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT '@PGMEM_VERSION@'::text, (SELECT v.version_num::text FROM pgmem.alembic_version v LIMIT 1)
$$;
COMMENT ON FUNCTION pgmem.version() IS
'The pgmem package version that last applied the SQL (pgmem migrate), and the alembic revision the schema is at.';

CREATE OR REPLACE FUNCTION pgmem._definitions()
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT '@PGMEM_DEFINITIONS@'::text
$$;
COMMENT ON FUNCTION pgmem._definitions() IS
'The sha256 of the re-runnable files (sql/idempotent, before their placeholders are filled) of the package that last applied the SQL. pgmem migrate, with the schema at its head, applies its own files again when this or pgmem.version()''s package_version is not its own: a package installed at the same revision, as in a rollback (docs/operations.md, "Rolling back").';
