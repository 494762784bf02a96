-- Row-level security per scope. Re-runnable: applied after every revision, before the grants.
--
-- Every pgmem table that carries scope_id gets ENABLE and FORCE ROW LEVEL SECURITY (FORCE so
-- that the owner, and so every SECURITY DEFINER function, is filtered too; pgmem.piece_word
-- is not forced, below) and one policy:
-- a row is visible and writable only when its scope_id equals the transaction-local setting
-- pgmem.scope. pgmem.db.scoped() sets it with set_config('pgmem.scope', scope, true), the
-- function form of SET LOCAL, so a pooled connection never carries a scope into the next
-- transaction. With no scope set, current_setting(..., true) is NULL (or '' after a reset):
-- no scope_id equals either, so nothing is visible and nothing can be written.
--
-- The tables are found in the catalog, not listed: a table added later with a scope_id
-- column is covered by the next upgrade, and tests/test_security_rls.py fails if one is not.
--
-- Reference tables without scope_id (embedding_model, vector_column, alembic_version) hold no
-- tenant data (model names and installed dimensions); they stay unfiltered, readable by the
-- app and reader roles, and writable only through pgmem._model_key, which the app reaches
-- only through bind_scope_model inside its scope (see 900_grants.sql).
--
-- Superusers and BYPASSRLS roles are never filtered: the roles pgmem uses are neither
-- (900_grants.sql refuses to install otherwise).

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT c.oid::regclass AS tbl, c.relname::text AS name
          FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'scope_id' AND NOT a.attisdropped
         WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind IN ('r', 'p')
         ORDER BY c.relname
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', r.tbl);
        -- One exception, pgmem.piece_word (the words of the pieces): forced, its policy would
        -- be applied before the word index's condition, whose operator (arraycontains) is not
        -- leakproof, so the index could never be used under row-level security (every word read
        -- the scope's every piece). Its owner, pgmem_owner, reads it through one function,
        -- pgmem._word_postings (SECURITY DEFINER), which checks its scope and reads only that
        -- scope's keys; its rows are written by the insert of their piece (trigger
        -- piece_words_on_insert), which pgmem.piece's forced policy checked. Every other role is
        -- filtered by the policy below.
        IF r.name = 'piece_word' THEN
            EXECUTE format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', r.tbl);
        ELSE
            EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', r.tbl);
        END IF;
        EXECUTE format('DROP POLICY IF EXISTS scope_isolation ON %s', r.tbl);
        -- Written inline (not as a function call) so the planner sees a stable expression it
        -- can compare against the scope_id index once per scan.
        EXECUTE format($p$CREATE POLICY scope_isolation ON %s AS PERMISSIVE FOR ALL TO PUBLIC
                          USING (scope_id = pg_catalog.current_setting('pgmem.scope', true))
                          WITH CHECK (scope_id = pg_catalog.current_setting('pgmem.scope', true))$p$, r.tbl);
        EXECUTE format($c$COMMENT ON POLICY scope_isolation ON %s IS %L$c$, r.tbl,
            'Rows are visible and writable only inside their scope: scope_id = current_setting(''pgmem.scope'') '
            || '(set transaction-locally by pgmem.db.scoped or SET LOCAL pgmem.scope).');
    END LOOP;
END
$$;

-- Index maintenance (pgmem.scope_index_plan) must count every scope's rows: a plan that sees one
-- scope drops every other scope's index. pgmem_owner is filtered by FORCE like everyone else,
-- so piece and fact get a second, SELECT-only policy for it, true only when both hold:
--   * pgmem.maintenance = 'on', which scope_index_plan sets for its own duration (set_config);
--   * the session's login is a member of pgmem_owner. An app session cannot meet this, even
--     inside the SECURITY DEFINER write functions (which run as pgmem_owner): session_user
--     stays the app's login, and only a superuser can change it. So SET pgmem.maintenance
--     widens nothing for the app, and its queries never carry this policy (TO pgmem_owner).
-- Writes stay confined to the scope: the policy is FOR SELECT, the scope policy still checks
-- every INSERT, UPDATE and DELETE. A DBA who is a member of pgmem_owner could disable RLS on
-- the tables anyway: this grants the owner nothing it could not already take.
DO $$
BEGIN
    -- 900_grants.sql creates and checks the roles; the policy needs pgmem_owner already.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgmem_owner') THEN
        BEGIN
            CREATE ROLE pgmem_owner NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOREPLICATION;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role pgmem_owner does not exist and % may not create roles', current_user
                USING ERRCODE = '42501',
                      HINT = 'Have a DBA run `pgmem roles create` (or the SQL in docs/security.md) once, then migrate again.';
        WHEN duplicate_object OR unique_violation THEN
            -- Created meanwhile by the migration of another database of the server (roles are
            -- the server's): this CREATE waited for its commit. Until 0099 the run failed (23505).
            NULL;
        END;
    END IF;
END
$$;
-- The same policy on each table maintenance reads across scopes, with what reads it.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM (VALUES
        ('piece', 'Index maintenance (pgmem.scope_index_plan, which sets pgmem.maintenance) counts every scope''s rows'),
        ('fact', 'Index maintenance (pgmem.scope_index_plan, which sets pgmem.maintenance) counts every scope''s rows'),
        ('word_fold_head', 'Index maintenance (pgmem.scope_index_plan, which sets pgmem.maintenance) checks every scope''s folded postings (pgmem._word_fold)'),
        ('piece_word', 'Index maintenance (pgmem.scope_index_plan, which sets pgmem.maintenance) counts the tail of every scope''s folded postings'),
        ('scope', 'Maintenance over every scope (pgmem.maintenance_scopes, for pgmem reembed --all) lists the scopes')
    ) AS t(tbl, reader)
    LOOP
        EXECUTE format('DROP POLICY IF EXISTS maintenance_read ON pgmem.%I', r.tbl);
        EXECUTE format($p$CREATE POLICY maintenance_read ON pgmem.%I AS PERMISSIVE FOR SELECT TO pgmem_owner
                          USING ((SELECT pg_catalog.current_setting('pgmem.maintenance', true) = 'on'
                                         AND pg_catalog.pg_has_role(SESSION_USER, 'pgmem_owner', 'USAGE')))$p$, r.tbl);
        EXECUTE format('COMMENT ON POLICY maintenance_read ON pgmem.%I IS %L', r.tbl,
                       r.reader || ' when the login is a member of pgmem_owner; SELECT only.');
    END LOOP;
END
$$;
