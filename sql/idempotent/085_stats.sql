-- Monitoring: one row per scope with what it holds, the health of its ANN indexes and how often
-- it was recalled lately (docs/operations.md, "Monitoring"). Re-runnable.
--
-- Who sees what follows index maintenance and retention (060_indexes.sql, 075_retention.sql):
-- the application login sees the transaction's scope only (row-level security); a login member
-- of pgmem_owner, without SET ROLE, sees every scope while pgmem.maintenance is on, which stats()
-- sets for its own duration; a superuser sees everything. The maintenance_read policies below
-- extend the ones 050_security.sql puts on piece and fact to the other tables stats() counts,
-- with the same condition, SELECT only: an app session never meets it (its session_user is not a
-- member of pgmem_owner, even inside the SECURITY DEFINER write functions).
--
-- The recall log has no duration column (log_recall records what was asked and found, not how
-- long it took), so there are no latency percentiles here: recent recall counts instead, and
-- the latencies come from pg_stat_statements (docs/operations.md).

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['scope', 'thread', 'turn', 'document', 'store_item', 'recall_log'] LOOP
        EXECUTE format('DROP POLICY IF EXISTS maintenance_read ON pgmem.%I', t);
        EXECUTE format($p$CREATE POLICY maintenance_read ON pgmem.%I AS PERMISSIVE FOR SELECT TO pgmem_owner
                          USING ((SELECT pg_catalog.current_setting('pgmem.maintenance', true) = 'on'
                                         AND pg_catalog.pg_has_role(SESSION_USER, 'pgmem_owner', 'USAGE')))$p$, t);
        EXECUTE format('COMMENT ON POLICY maintenance_read ON pgmem.%I IS %L', t,
            'pgmem.stats (which sets pgmem.maintenance) counts every scope''s rows when the login is a member of pgmem_owner; SELECT only.');
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION pgmem.stats(scope text DEFAULT NULL)
RETURNS TABLE (
    scope_id text,
    threads bigint,
    turns bigint,
    memory_pieces bigint,
    document_pieces bigint,
    facts bigint,
    documents bigint,
    store_items bigint,
    piece_index text,
    piece_index_state text,
    piece_index_bytes bigint,
    fact_index text,
    fact_index_state text,
    fact_index_bytes bigint,
    recalls_last_hour bigint,
    recalls_last_day bigint,
    last_recall_at timestamptz
)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    prior text := current_setting('pgmem.maintenance', true);
    every_scope boolean := pg_catalog.row_security_active('pgmem.scope'::regclass)
        AND pg_catalog.pg_has_role(session_user, 'pgmem_owner', 'USAGE')
        AND pg_catalog.pg_has_role(current_user, 'pgmem_owner', 'USAGE');
    n integer;
BEGIN
    -- The owner login names any scope (or none); anyone else only the transaction's own.
    IF stats.scope IS NOT NULL AND NOT every_scope THEN
        PERFORM pgmem.check_scope(stats.scope);
    END IF;
    IF every_scope THEN
        PERFORM set_config('pgmem.maintenance', 'on', true);
    END IF;
    RETURN QUERY
    WITH s AS (
        SELECT sc.scope_id, sc.scope_no FROM pgmem.scope sc
         WHERE stats.scope IS NULL OR sc.scope_id = stats.scope
    ), idx AS (
        SELECT c.relname::text AS name, c.oid,
               -- Building: another login's session holds the table SHARE UPDATE EXCLUSIVE, as a
               -- CREATE INDEX CONCURRENTLY does to its end (0110: ready but not yet valid, while it
               -- validates, read 'invalid'; a build that failed before it was ready read
               -- 'building'). A DBA's VACUUM or ANALYZE of the table reads the same while it runs;
               -- autovacuum, which has no login, does not. Invalid: a build that failed.
               CASE WHEN i.indisvalid AND i.indisready THEN 'valid'
                    WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_locks t
                                  JOIN pg_catalog.pg_stat_activity a ON a.pid = t.pid
                                 WHERE t.locktype = 'relation' AND t.relation = i.indrelid AND t.granted
                                   AND t.mode = 'ShareUpdateExclusiveLock' AND t.pid <> pg_catalog.pg_backend_pid()
                                   AND a.usesysid IS NOT NULL) THEN 'building'
                    ELSE 'invalid' END AS state
          FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_index i ON i.indexrelid = c.oid
         WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'i'
    )
    SELECT s.scope_id,
           (SELECT count(*) FROM pgmem.thread th WHERE th.scope_id = s.scope_id),
           (SELECT count(*) FROM pgmem.turn tu WHERE tu.scope_id = s.scope_id),
           (SELECT count(*) FROM pgmem.piece p WHERE p.scope_id = s.scope_id AND p.kind = 'memory'),
           (SELECT count(*) FROM pgmem.piece p WHERE p.scope_id = s.scope_id AND p.kind = 'document'),
           (SELECT count(*) FROM pgmem.fact f WHERE f.scope_id = s.scope_id),
           (SELECT count(*) FROM pgmem.document d WHERE d.scope_id = s.scope_id),
           (SELECT count(*) FROM pgmem.store_item si WHERE si.scope_id = s.scope_id),
           pi.name, coalesce(pi.state, 'none'), pg_catalog.pg_relation_size(pi.oid),
           fi.name, coalesce(fi.state, 'none'), pg_catalog.pg_relation_size(fi.oid),
           (SELECT count(*) FROM pgmem.recall_log l WHERE l.scope_id = s.scope_id AND l.created_at > now() - interval '1 hour'),
           (SELECT count(*) FROM pgmem.recall_log l WHERE l.scope_id = s.scope_id AND l.created_at > now() - interval '1 day'),
           (SELECT max(l.created_at) FROM pgmem.recall_log l WHERE l.scope_id = s.scope_id)
      FROM s
      LEFT JOIN idx pi ON pi.name = pgmem._scope_index_name('piece', s.scope_no)
      LEFT JOIN idx fi ON fi.name = pgmem._scope_index_name('fact', s.scope_no)
     ORDER BY s.scope_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF every_scope THEN
        PERFORM set_config('pgmem.maintenance', coalesce(prior, ''), true);
    END IF;
    IF n = 0 AND stats.scope IS NULL AND nullif(current_setting('pgmem.scope', true), '') IS NULL
       AND pg_catalog.row_security_active('pgmem.scope'::regclass) AND NOT every_scope THEN
        RAISE NOTICE 'stats: no pgmem.scope is set and % sees no scope under row-level security', session_user
            USING HINT = 'SET LOCAL pgmem.scope = ''<scope>'' for one scope, or run it as the migrating login (a member of pgmem_owner) for every scope.';
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.stats(text) IS
'Monitoring, one row per scope (or only `scope`): threads, turns, memory and document pieces, facts, documents, LangGraph store items; the scope''s partial ANN index on each plane (name, state none/valid/invalid/building, bytes; none: searched exactly, see pgmem.scope_index_plan); recall-log rows of the last hour and day and the newest (only recalls that asked to be logged; the log records no durations: latencies are in pg_stat_statements, docs/operations.md). The application login sees its transaction''s scope only; a login member of pgmem_owner (without SET ROLE) sees every scope; so does a superuser. Counts read every row of the scope: a few seconds on millions of rows.';
