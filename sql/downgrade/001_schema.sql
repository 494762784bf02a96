-- Undo 001: drop every pgmem object except alembic's version table (alembic still
-- needs it to record the downgrade). pgvector itself is left installed.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT p.oid::regprocedure AS f FROM pg_proc p
              WHERE p.pronamespace = 'pgmem'::regnamespace LOOP
        EXECUTE format('DROP FUNCTION %s CASCADE', r.f);
    END LOOP;
    FOR r IN SELECT c.relname FROM pg_class c
              WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')
                AND c.relname <> 'alembic_version' LOOP
        EXECUTE format('DROP TABLE IF EXISTS pgmem.%I CASCADE', r.relname);
    END LOOP;
    FOR r IN SELECT t.typname FROM pg_type t
              WHERE t.typnamespace = 'pgmem'::regnamespace AND t.typtype = 'c'
                AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.typrelid AND c.relkind <> 'c') LOOP
        EXECUTE format('DROP TYPE IF EXISTS pgmem.%I CASCADE', r.typname);
    END LOOP;
END
$$;
