-- Roles, ownership and privileges. Re-runnable, applied last (after every other definition),
-- so every function and table that exists is covered by the state this file leaves.
--
--   pgmem_owner   owns the schema and everything in it; migrations run as it (or as a member).
--                 Not a superuser, not BYPASSRLS: FORCE ROW LEVEL SECURITY filters it too, so
--                 the SECURITY DEFINER functions below stay confined to the caller's scope.
--   pgmem_app     what an application logs in as (through a LOGIN member). It reads under
--                 row-level security and writes only by calling pgmem functions: no INSERT,
--                 UPDATE or DELETE on any table, owns nothing, cannot bypass RLS.
--   pgmem_reader  read-only, for debugging in psql: SELECT on the tables (still filtered by
--                 scope: SET pgmem.scope = '...') and EXECUTE on the non-volatile functions.
--
-- All three are NOLOGIN group roles; `pgmem roles create` (docs/security.md) creates them and
-- LOGIN members for a DBA. When they are missing and the migrating user may create roles,
-- this file creates them.

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT v.name FROM (VALUES ('pgmem_owner'), ('pgmem_app'), ('pgmem_reader')) AS v(name)
              WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = v.name)
    LOOP
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOREPLICATION', r.name);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role % does not exist and % may not create roles', r.name, current_user
                USING ERRCODE = '42501',
                      HINT = 'Have a DBA run `pgmem roles create` (or the SQL in docs/security.md) once, then migrate again.';
        WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created meanwhile by another database's migration (050_security.sql says more)
        END;
    END LOOP;
    FOR r IN SELECT rolname FROM pg_catalog.pg_roles
              WHERE rolname IN ('pgmem_owner', 'pgmem_app', 'pgmem_reader') AND (rolsuper OR rolbypassrls)
    LOOP
        RAISE EXCEPTION 'role % is a superuser or has BYPASSRLS: row-level security would not apply to it', r.rolname
            USING ERRCODE = '42501', HINT = format('ALTER ROLE %I NOSUPERUSER NOBYPASSRLS', r.rolname);
    END LOOP;
END
$$;

-- A planted function in pgvector's schema would be found by every pgmem function (it is on
-- their search_path, after pg_catalog and pgmem), so nobody but its owner may create there.
-- Being found is enough: an overload of an exact type (public.unnest(integer[])) is preferred over
-- pg_catalog's polymorphic one (unnest(anyarray)), and inside a SECURITY DEFINER function it runs
-- as pgmem_owner, which may turn row-level security off. So no role the application or the
-- reader logs in as (a member of pgmem_app or pgmem_reader, LOGIN members included, unless it is a
-- member of pgmem_owner too) may create in pgvector's schema or in pgmem, and no function or
-- operator such a role owns may be there already (created before CREATE was revoked), nor
-- anything in pgmem. Checked before the block below hands pgmem's objects to pgmem_owner. Until
-- 0060 only PUBLIC and the two group roles were checked: a LOGIN member of pgmem_app granted
-- CREATE on public (an application keeping its own tables there) ran code as pgmem_owner.
DO $$
DECLARE
    r record;
BEGIN
    IF pg_catalog.has_schema_privilege('public', '@VECTOR_SCHEMA@', 'CREATE')
       OR pg_catalog.has_schema_privilege('pgmem_app', '@VECTOR_SCHEMA@', 'CREATE')
       OR pg_catalog.has_schema_privilege('pgmem_reader', '@VECTOR_SCHEMA@', 'CREATE') THEN
        RAISE EXCEPTION 'PUBLIC, pgmem_app or pgmem_reader may CREATE in schema @VECTOR_SCHEMA@, which every pgmem function searches'
            USING ERRCODE = '42501',
                  HINT = 'REVOKE CREATE ON SCHEMA @VECTOR_SCHEMA@ FROM PUBLIC (the PostgreSQL 15+ default), or install pgvector into a schema of its own (PGMEM_VECTOR_SCHEMA).';
    END IF;
    FOR r IN
        SELECT ro.rolname, n.nspname
          FROM pg_catalog.pg_roles ro
         CROSS JOIN pg_catalog.pg_namespace n
         WHERE n.nspname IN ('@VECTOR_SCHEMA@', 'pgmem') AND NOT ro.rolsuper
           AND (pg_catalog.pg_has_role(ro.oid, 'pgmem_app', 'MEMBER') OR pg_catalog.pg_has_role(ro.oid, 'pgmem_reader', 'MEMBER'))
           AND NOT pg_catalog.pg_has_role(ro.oid, 'pgmem_owner', 'MEMBER')
           AND pg_catalog.has_schema_privilege(ro.oid, n.oid, 'CREATE')
         ORDER BY 1, 2
    LOOP
        RAISE EXCEPTION 'role % (a member of pgmem_app or pgmem_reader) may CREATE in schema %, which every pgmem function searches',
            r.rolname, r.nspname
            USING ERRCODE = '42501',
                  HINT = format('A function it creates there can run as pgmem_owner inside the SECURITY DEFINER functions. REVOKE CREATE ON SCHEMA %I FROM %I (and from the roles it is a member of; an owner of the schema may always create), or install pgvector into a schema of its own (PGMEM_VECTOR_SCHEMA).',
                                r.nspname, r.rolname);
    END LOOP;
    FOR r IN
        SELECT x.what, x.nsp, x.owner FROM (
            SELECT p.oid::regprocedure::text AS what, p.pronamespace AS nsp, p.proowner AS owner FROM pg_catalog.pg_proc p
            UNION ALL
            SELECT o.oid::regoperator::text, o.oprnamespace, o.oprowner FROM pg_catalog.pg_operator o
            UNION ALL
            SELECT c.oid::regclass::text, c.relnamespace, c.relowner FROM pg_catalog.pg_class c
             WHERE c.relnamespace = 'pgmem'::regnamespace
            UNION ALL
            SELECT t.oid::regtype::text, t.typnamespace, t.typowner FROM pg_catalog.pg_type t
             WHERE t.typnamespace = 'pgmem'::regnamespace) x
          JOIN pg_catalog.pg_roles ro ON ro.oid = x.owner
         WHERE x.nsp IN ('@VECTOR_SCHEMA@'::regnamespace, 'pgmem'::regnamespace) AND NOT ro.rolsuper
           AND (pg_catalog.pg_has_role(ro.oid, 'pgmem_app', 'MEMBER') OR pg_catalog.pg_has_role(ro.oid, 'pgmem_reader', 'MEMBER'))
           AND NOT pg_catalog.pg_has_role(ro.oid, 'pgmem_owner', 'MEMBER')
         ORDER BY 1
    LOOP
        RAISE EXCEPTION '% in schema %, which every pgmem function searches, belongs to %, a member of pgmem_app or pgmem_reader',
            r.what, r.nsp::regnamespace, r.owner::regrole
            USING ERRCODE = '42501',
                  HINT = 'A pgmem function may call it instead of a built-in one, as pgmem_owner. Check what it does and drop it (or give it to a trusted role).';
    END LOOP;
END
$$;

-- Everything in the schema belongs to pgmem_owner (migrating as a superuser, objects would
-- otherwise belong to it, and a superuser-owned SECURITY DEFINER function ignores RLS).
DO $$
DECLARE
    owner oid := 'pgmem_owner'::regrole;
    r record;
BEGIN
    IF (SELECT nspowner FROM pg_catalog.pg_namespace WHERE nspname = 'pgmem') <> owner THEN
        ALTER SCHEMA pgmem OWNER TO pgmem_owner;
    END IF;
    FOR r IN SELECT c.oid::regclass AS obj,
                    CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                                   WHEN 'S' THEN 'SEQUENCE' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END AS what
               FROM pg_catalog.pg_class c
              WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relowner <> owner
                AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
                -- identity and serial sequences follow their table
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                                 WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i'))
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO pgmem_owner', r.what, r.obj);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proowner <> owner
    LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO pgmem_owner', r.fn);
    END LOOP;
    FOR r IN SELECT t.oid::regtype AS typ FROM pg_catalog.pg_type t
              WHERE t.typnamespace = 'pgmem'::regnamespace AND t.typowner <> owner
                AND t.typelem = 0 AND t.typtype IN ('c', 'd', 'e', 'r')
                AND (t.typrelid = 0 OR (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid) = 'c')
    LOOP
        EXECUTE format('ALTER TYPE %s OWNER TO pgmem_owner', r.typ);
    END LOOP;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE EXCEPTION 'cannot hand the pgmem schema to pgmem_owner as %', current_user
        USING ERRCODE = '42501',
              HINT = 'Migrate as pgmem_owner or a member of it (GRANT pgmem_owner TO <migrating user>).';
END
$$;

-- Writes go through these functions only. Each runs as pgmem_owner (which owns the tables)
-- because pgmem_app has no INSERT/UPDATE/DELETE; row-level security still applies inside
-- (FORCE), so a definer function writes only into the scope of the caller's pgmem.scope.
-- The reason is appended to the function's COMMENT, so \df+ shows it.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT p.oid::regprocedure AS fn, d.reason, pg_catalog.obj_description(p.oid, 'pg_proc') AS cmt
          FROM (VALUES
                ('open_scope', 'creates the caller''s scope row (no model bound); pgmem_app may not write tables.'),
                ('bind_scope_model', 'creates the caller''s scope row and records its model; pgmem_app may not write tables.'),
                ('put_turn', 'writes the turn, thread and pieces atomically; pgmem_app may not write tables.'),
                ('put_turns', 'writes many turns of the caller''s scope with their threads and pieces in one transaction; pgmem_app may not write tables.'),
                ('pending_turns', 'checks the scope (pgmem.check_scope: the transaction''s pgmem.scope) before reading the caller''s turns for a rebuild; row-level security still confines it to pgmem.scope.'),
                ('reblend', 'rewrites piece vectors of the caller''s scope; pgmem_app may not write tables.'),
                ('add_facts', 'writes facts of the caller''s scope; pgmem_app may not write tables.'),
                ('log_recall', 'appends to recall_log of the caller''s scope; pgmem_app may not write tables.'),
                ('put_document', 'writes the document, its chunks and unit pieces atomically; pgmem_app may not write tables.'),
                ('remove_document', 'deletes a document of the caller''s scope; pgmem_app may not write tables.'),
                ('reblend_documents', 'rewrites document unit vectors of the caller''s scope; pgmem_app may not write tables.'),
                ('put_item', 'writes a LangGraph store item of the caller''s scope and the namespace directory; pgmem_app may not write tables.'),
                ('note_store_namespace', 'lists the namespace of a LangGraph store item of the caller''s scope in the transaction''s directory; pgmem_app may not write tables.'),
                ('put_item_vectors', 'writes the field vectors of a LangGraph store item of the caller''s scope; pgmem_app may not write tables.'),
                ('refresh_items', 'moves the expiry of LangGraph store items of the caller''s scope on a read; pgmem_app may not write tables.'),
                ('expire_items', 'deletes the expired LangGraph store items of the caller''s scope as delete_item does; pgmem_app may not write tables.'),
                ('delete_item', 'deletes a LangGraph store item of the caller''s scope, its turn and its directory entry; pgmem_app may not write tables.'),
                ('_forget_item_logs_at_commit', 'a trigger at the commit of a transaction that called delete_item: deletes the recall-log rows of the items it deleted, in their scope; pgmem_app may not write tables.'),
                ('forget_turn', 'deletes a turn, its pieces, facts and recall-log rows in the caller''s scope; pgmem_app may not write tables.'),
                ('forget_thread', 'deletes a thread with its turns, pieces, facts, store items and recall-log rows in the caller''s scope; pgmem_app may not write tables.'),
                ('forget_fact', 'deletes a fact and its recall-log rows in the caller''s scope; pgmem_app may not write tables.'),
                ('forget_document', 'deletes a document, its chunks, units, facts and recall-log rows in the caller''s scope; pgmem_app may not write tables.'),
                ('forget_scope', 'deletes every row of the caller''s scope, the scope row included; pgmem_app may not write tables.'),
                ('stage_vectors', 'writes the new model''s vectors of the caller''s scope beside the serving ones; pgmem_app may not write tables.'),
                ('reembed_flip', 'swaps a scope''s staged vectors in and records its new model, in one transaction; pgmem_app may not write tables.'),
                ('set_retention', 'writes the retention setting (and, before its first turn, the scope row) of the caller''s scope; pgmem_app may not write tables.')
               ) AS d(name, reason)
          JOIN pg_catalog.pg_proc p ON p.proname = d.name AND p.pronamespace = 'pgmem'::regnamespace
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER', r.fn);
        IF r.cmt IS NULL OR position('SECURITY DEFINER:' IN r.cmt) = 0 THEN
            EXECUTE format('COMMENT ON FUNCTION %s IS %L', r.fn,
                           coalesce(r.cmt || ' ', '') || 'SECURITY DEFINER: ' || r.reason);
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON SCHEMA pgmem FROM PUBLIC;
GRANT USAGE ON SCHEMA pgmem TO pgmem_app, pgmem_reader;

REVOKE ALL ON ALL TABLES IN SCHEMA pgmem FROM PUBLIC, pgmem_app, pgmem_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA pgmem TO pgmem_app, pgmem_reader;
-- Except the forgotten scopes (hashes of every tenant's forgotten scopes, 0051): only the
-- definer functions read it.
REVOKE SELECT ON pgmem.forgotten_scope FROM pgmem_app, pgmem_reader;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgmem FROM PUBLIC, pgmem_app, pgmem_reader;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pgmem FROM PUBLIC, pgmem_app, pgmem_reader;

-- Functions whose names start with `_` are internal: neither pgmem_app nor pgmem_reader may call
-- them (the public functions that use them are SECURITY DEFINER and run as the owner), except the
-- helpers in `callable` below. Those are on the read path of the SECURITY INVOKER recall
-- functions, so the caller must be able to run them. The recall functions stay invoker, not
-- definer, so that pgmem_reader (which runs no definer code but _word_postings) can recall in psql and a
-- superuser keeps reading any scope; in exchange each of these helpers is safe to call directly:
--   _memory_candidates, _fact_candidates, _window_candidates  check their own arguments (pgmem.check_recall_args:
--       at most 64 vectors of the plane's dimension, k <= 1000, ef_search <= 1000), the caps
--       of memory_recall and fact_recall, so a direct call reaches nothing those do not;
--   _scope_index_name  a pure function of its arguments (an index name), read by
--       scope_ann_index on the recall path;
--   _lexeme  a pure function of its argument (a one-word tsquery, quoted and escaped), for a
--       caller who searches one lexeme of pgmem.message_words itself (to_tsvector('english', body) @@ pgmem._lexeme(w));
--   _word_postings  the word side's rule (message_words, word_candidates): it checks its scope
--       (pgmem.check_scope, so row-level security and the transaction's scope hold) and its
--       arguments, and returns only what message_words and word_candidates show. It is the one
--       SECURITY DEFINER function pgmem_reader runs (granted below): read-only (STABLE), it reads
--       pgmem.piece_word through its word index, which row-level security would keep from being
--       used (050_security.sql), so without it the reader's hybrid recall reads every piece of
--       the scope for every word;
--   _recall_setting_names, _recall_settings, _apply_recall_settings  the recall settings a
--       logged recall records and its replays run under (0057): a constant list, the caller's
--       own session settings read, and those settings set local to the caller's transaction
--       (what SET LOCAL does), for those names only;
--   _check_logged_model  the replays' model check (0116): reads the scope's model, under
--       row-level security, and raises or returns nothing.
DO $$
DECLARE
    callable text[] := ARRAY['_memory_candidates', '_fact_candidates', '_window_candidates', '_scope_index_name', '_lexeme', '_word_postings',
                             '_recall_setting_names', '_recall_settings', '_apply_recall_settings', '_check_logged_model'];
    r record;
BEGIN
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pgmem'::regnamespace
                AND (p.proname NOT LIKE '\_%' OR p.proname = ANY (callable))
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO pgmem_app', r.fn);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pgmem'::regnamespace AND p.provolatile IN ('i', 's') AND NOT p.prosecdef
                AND (p.proname NOT LIKE '\_%' OR p.proname = ANY (callable))
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO pgmem_reader', r.fn);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proname = '_word_postings'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO pgmem_reader', r.fn);
    END LOOP;
    -- The rules this file promises; a later definition that breaks one fails the migration.
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pgmem'::regnamespace
                AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c(setting) WHERE c.setting LIKE 'search_path=%')
    LOOP
        RAISE EXCEPTION 'function % does not pin search_path', r.fn USING ERRCODE = '42501',
            HINT = 'Add SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp to its definition.';
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pgmem'::regnamespace AND p.prosecdef
                AND (pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')
                     OR position('SECURITY DEFINER:' IN coalesce(pg_catalog.obj_description(p.oid, 'pg_proc'), '')) = 0)
    LOOP
        RAISE EXCEPTION 'SECURITY DEFINER function % is executable by PUBLIC or has no written reason', r.fn
            USING ERRCODE = '42501';
    END LOOP;
END
$$;
