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
