-- Recall index strategy. Re-runnable.
--
-- Small scopes are searched exactly: a covering B-tree on (scope_id, kind, thread_id)
-- INCLUDE (piece_id, embedding) keeps a scope's vectors together in the index's leaf pages, so an
-- exact scan of a 2,000-piece scope is an index-only scan over a few hundred adjacent pages
-- instead of one heap page per piece. Large scopes get their own partial ANN index
-- (HNSW by default, inner product on the unit vectors) WHERE scope_no = <n> AND kind = 'memory', keyed
-- on the scope's surrogate number (pgmem.scope.scope_no) so that index names and definitions,
-- which every role can read in pg_indexes, do not show scope names (often e-mail addresses):
-- the index holds exactly the rows the query may return, so nothing is filtered after the index
-- scan and a scope-filtered query never comes back short. There is no table-wide ANN index:
-- with one, the planner may pick it for a small scope and filter afterwards (pgvector README,
-- "Filtering"). docs/scaling.md has the measurements behind this file.
--
-- Index builds on a live table should run CONCURRENTLY, which cannot happen inside a function:
-- pgmem.scope_index_plan() returns the statements (run them from psql with \gexec, or from
-- `pgmem bench`), pgmem.index_large_scopes() runs them in the current transaction (it blocks
-- writes to the table while it builds; fine for a maintenance window or a fresh load).
--
-- The write tail (docs/scaling.md, "Writes into indexed scopes"): a scope's piece index holds
-- the pieces up to a piece_id fixed when it was built (WHERE ... AND piece_id <= <through>).
-- Pieces written later fail the predicate, so put_turn never inserts into the graph (an HNSW
-- insert with ef_construction = 400 costs tens of milliseconds in a large graph); they are the
-- scope's tail, which pgmem._memory_candidates searches exactly beside the index. The plan
-- folds a tail that reached max_tail by building the index again with a new <through>, beside
-- the old one, which serves until the swap. piece_id is an identity, so later pieces always have
-- higher ids.

-- A covering index only fits while the vector fits a B-tree tuple (about 2,700 bytes: 384-d
-- and 512-d float vectors do, 1,536-d do not; 1,024-d halfvec facts do). Wider installs keep the
-- plain scope index.
DO $$
BEGIN
    IF pgmem.column_dims('piece.embedding') * 4 + 64 <= 2600 THEN
        CREATE INDEX IF NOT EXISTS piece_scope_cover_idx ON pgmem.piece (scope_id, kind, thread_id)
            INCLUDE (piece_id, embedding);
        COMMENT ON INDEX pgmem.piece_scope_cover_idx IS
            'Exact recall in small scopes: an index-only scan over the scope''s vectors, stored together.';
    END IF;
    -- The fact plane is halfvec (2 bytes a dimension): 1,024-d fits.
    IF pgmem.column_dims('fact.embedding') * 2 + 64 <= 2600 THEN
        CREATE INDEX IF NOT EXISTS fact_scope_cover_idx ON pgmem.fact (scope_id, thread_id)
            INCLUDE (fact_id, embedding);
        COMMENT ON INDEX pgmem.fact_scope_cover_idx IS
            'Exact fact recall in small scopes: an index-only scan over the scope''s fact vectors.';
    END IF;
END
$$;

-- Until 0003 the name was <plane>_ann_<md5(scope) prefix> and the predicate scope_id = '<scope>':
-- scope_index_plan replaces such indexes (create the new one, then drop the old).
DROP FUNCTION IF EXISTS pgmem._scope_index_name(text, text);
CREATE OR REPLACE FUNCTION pgmem._scope_index_name(plane text, scope_no bigint)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT plane || '_ann_s' || scope_no
$$;
COMMENT ON FUNCTION pgmem._scope_index_name(text, bigint) IS
'Name of the partial ANN index of one scope on one plane (piece or fact): <plane>_ann_s<scope_no>, from the scope''s surrogate number (no scope name in the catalog).';

CREATE OR REPLACE FUNCTION pgmem.scope_ann_index(plane text, scope text)
RETURNS regclass
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT i.indexrelid::regclass
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_index i ON i.indexrelid = c.oid
     WHERE c.relnamespace = 'pgmem'::regnamespace
       AND c.relname = pgmem._scope_index_name(plane, pgmem.scope_no(scope))
       AND i.indisvalid AND i.indisready
$$;
COMMENT ON FUNCTION pgmem.scope_ann_index(text, text) IS
'The valid partial ANN index of a scope on a plane (piece or fact), or NULL when the scope is searched exactly (or is not visible: under row-level security, only the transaction''s scope is).';

CREATE OR REPLACE FUNCTION pgmem.ann_index_through(index regclass)
RETURNS bigint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT (pg_catalog.regexp_match(pg_catalog.pg_get_expr(i.indpred, i.indrelid), 'piece_id <= ''?([0-9]+)'))[1]::bigint
      FROM pg_catalog.pg_index i
     WHERE i.indexrelid = ann_index_through.index
$$;
COMMENT ON FUNCTION pgmem.ann_index_through(regclass) IS
'The highest piece_id a scope''s piece ANN index holds (its predicate''s piece_id <= n): pieces of the scope with a higher id are its write tail, searched exactly beside the index. NULL for an index built without a tail (scope_index_plan(tail => false)), which every write goes into.';

-- The HNSW search width of the recall functions when neither their ef_search argument nor the
-- pgmem.ef_search setting gives one. Measured on the 1m bench store (docs/scaling.md, "Search
-- width and graph quality"), 8-part messages, graphs built with m = 24, ef_construction = 400:
-- 64 gives recall@5 >= 0.99 against exact search on every scope measured, 16,000 to 160,000
-- rows (0.991-0.998 on the largest), and each step wider costs every part of every message
-- (80 on the largest scope: the same 0.998, about 2 ms more for 8 parts, median of five sweeps).
CREATE OR REPLACE FUNCTION pgmem.default_ef_search()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT 64
$$;
COMMENT ON FUNCTION pgmem.default_ef_search() IS
'Default hnsw.ef_search of the recall functions on a scope''s HNSW index: 64 (recall >= 0.99 measured from 16,000 to 160,000 rows on graphs built with ef_construction = 400, docs/scaling.md). The pgmem.ef_search setting and the ef_search argument of the recall functions override it.';

-- The index maintenance lock (0110): one maintenance run at a time per database. Two runs side
-- by side (pg_cron's index_large_scopes beside a DBA's \gexec, or a night run still going when
-- the next starts) each planned against the other's half-done work: the second plan dropped as
-- invalid the index the first was building concurrently, and two rebuilds of one scope
-- interleaved so that one's "drop the old index" dropped the index the other had just renamed
-- into its place, leaving the scope with none. scope_index_plan takes the lock (session level)
-- before it reads anything when it has statements to return and returns last a statement that
-- releases it (pgmem._end_index_maintenance()); index_large_scopes takes it for its transaction.
-- A run that finds it taken stops with 55P03, naming the session that holds it.
CREATE OR REPLACE FUNCTION pgmem._begin_index_maintenance(session_level boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    holder text;
    got boolean;
BEGIN
    IF session_level THEN
        got := pg_catalog.pg_try_advisory_lock(1885826405, 60);
    ELSE
        got := pg_catalog.pg_try_advisory_xact_lock(1885826405, 60);
    END IF;
    IF got THEN
        RETURN;
    END IF;
    SELECT string_agg(l.pid::text, ', ') INTO holder
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
       AND l.classid = 1885826405 AND l.objid = 60 AND l.objsubid = 2;
    RAISE EXCEPTION 'index maintenance is already running in another session (pid %)', coalesce(holder, '?')
        USING ERRCODE = '55P03',
              HINT = 'Run it again once that run has finished: two runs side by side would drop each other''s indexes. A session that only read a plan holds the lock until it runs the plan''s last statement (SELECT pgmem._end_index_maintenance()) or disconnects (docs/scaling.md, "What a DBA should set").';
END
$$;
COMMENT ON FUNCTION pgmem._begin_index_maintenance(boolean) IS
'Take the index maintenance lock (an advisory lock, one per database) at session level (scope_index_plan, for \gexec) or for the transaction, without waiting: 55P03 naming the session that holds it when another run is in progress (0110).';

CREATE OR REPLACE FUNCTION pgmem._end_index_maintenance()
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    -- Every session-level hold of this session (a plan read twice took it twice).
    WHILE pg_catalog.pg_advisory_unlock(1885826405, 60) LOOP
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem._end_index_maintenance() IS
'Release this session''s index maintenance lock (every session-level hold of it): the last statement of a pgmem.scope_index_plan that has statements (0110). A transaction-level hold (index_large_scopes) ends with its transaction.';

-- Before the write tail (tail, max_tail): dropped so a call cannot build indexes without it by accident.
DROP FUNCTION IF EXISTS pgmem.scope_index_plan(integer, text, boolean, integer, integer);
DROP FUNCTION IF EXISTS pgmem.index_large_scopes(integer, text, integer, integer);

CREATE OR REPLACE FUNCTION pgmem.scope_index_plan(
    min_pieces integer DEFAULT 5000,
    method text DEFAULT 'hnsw',
    concurrent boolean DEFAULT true,
    m integer DEFAULT 24,
    ef_construction integer DEFAULT 400,
    tail boolean DEFAULT true,
    max_tail integer DEFAULT 2000
) RETURNS TABLE (scope_id text, plane text, row_count bigint, action text, ddl text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    conc text := CASE WHEN concurrent THEN 'CONCURRENTLY ' ELSE '' END;
    prior text := current_setting('pgmem.maintenance', true);
    -- index_large_scopes holds the maintenance lock for its transaction and applies the plan itself.
    applied boolean := coalesce(current_setting('pgmem.index_maintenance', true), '') = 'transaction'
        AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                     WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.granted
                       AND l.classid = 1885826405 AND l.objid = 60 AND l.objsubid = 2);
    any_rows boolean;
BEGIN
    -- The plan drops the index of every scope it does not see: it must see them all. A superuser
    -- or BYPASSRLS role does; so does a login member of pgmem_owner (the maintenance policy);
    -- anyone else sees one scope at most, and is refused rather than given a plan that drops
    -- every other scope's index.
    IF pg_catalog.row_security_active('pgmem.piece'::regclass)
       AND NOT (pg_catalog.pg_has_role(session_user, 'pgmem_owner', 'USAGE')
                AND pg_catalog.pg_has_role(current_user, 'pgmem_owner', 'USAGE')) THEN
        RAISE EXCEPTION 'index maintenance must see every scope, and % (as %) sees only its own under row-level security',
            session_user, current_user
            USING ERRCODE = '42501',
                  HINT = 'Run it as the role that migrates pgmem (a login member of pgmem_owner, without SET ROLE) or as a superuser; no pgmem.scope is needed (docs/scaling.md, "Index maintenance").';
    END IF;
    IF min_pieces IS NULL OR min_pieces < 100 THEN
        RAISE EXCEPTION 'min_pieces must be at least 100, got %', min_pieces USING ERRCODE = '22023',
            HINT = 'Below a few thousand rows an exact scan is as fast as an index and always exact.';
    END IF;
    IF method IS NULL OR method NOT IN ('hnsw', 'ivfflat') THEN
        RAISE EXCEPTION 'method must be hnsw or ivfflat, got %', method USING ERRCODE = '22023';
    END IF;
    IF m IS NULL OR m NOT BETWEEN 2 AND 100 OR ef_construction IS NULL OR ef_construction NOT BETWEEN 4 AND 1000 THEN
        RAISE EXCEPTION 'm must be 2..100 and ef_construction 4..1000, got % and %', m, ef_construction
            USING ERRCODE = '22023';
    END IF;
    IF tail IS NULL OR max_tail IS NULL OR max_tail < 1 THEN
        RAISE EXCEPTION 'tail must not be NULL and max_tail must be at least 1, got % and %', tail, max_tail
            USING ERRCODE = '22023', HINT = 'max_tail is the tail (pieces written since the index was built) at which the plan folds it in.';
    END IF;
    -- Read by the maintenance policy (050_security.sql): while it is on, and only for a login that
    -- is a member of pgmem_owner, every scope's rows are visible. Set here rather than in a SET
    -- clause (a non-superuser may not attach a custom setting to a function), and put back
    -- below: RETURN QUERY has read everything by then.
    -- The maintenance lock before anything is read (0110; VOLATILE, so every statement below
    -- reads what committed before the lock was granted): a run in progress stops this one, 55P03.
    IF NOT applied THEN
        PERFORM pgmem._begin_index_maintenance(true);
    END IF;
    PERFORM set_config('pgmem.maintenance', 'on', true);
    BEGIN
    RETURN QUERY
    WITH kinds AS MATERIALIZED (
        SELECT p.scope_id, p.scope_no, p.kind, count(*) AS n, max(p.piece_id) AS last_id
          FROM pgmem.piece p GROUP BY p.scope_id, p.scope_no, p.kind
    ), counts AS (
        SELECT 'piece'::text AS plane, k.scope_id, k.scope_no, k.n, k.last_id FROM kinds k WHERE k.kind = 'memory'
        UNION ALL
        SELECT 'fact', f.scope_id, f.scope_no, count(*), NULL FROM pgmem.fact f GROUP BY f.scope_id, f.scope_no
    ), existing AS (
        SELECT CASE WHEN c.relname LIKE 'piece\_ann\_%' THEN 'piece' ELSE 'fact' END AS plane, c.relname::text AS name,
               am.amname::text AS am, i.indisvalid AS valid,
               -- HNSW build parameters as stored (pgvector's defaults when built without WITH)
               coalesce((SELECT split_part(o, '=', 2)::integer FROM unnest(c.reloptions) o WHERE o LIKE 'm=%'), 16) AS built_m,
               coalesce((SELECT split_part(o, '=', 2)::integer FROM unnest(c.reloptions) o
                          WHERE o LIKE 'ef\_construction=%'), 64) AS built_efc,
               pgmem.ann_index_through(c.oid::regclass) AS through,
               -- Another session's CREATE INDEX CONCURRENTLY of it in progress (a DBA's by hand:
               -- runs of this plan take turns, 0110); as pgmem.stats reads 'building'.
               NOT i.indisvalid AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks t
                                             JOIN pg_catalog.pg_stat_activity a ON a.pid = t.pid
                                            WHERE t.locktype = 'relation' AND t.relation = i.indrelid AND t.granted
                                              AND t.mode = 'ShareUpdateExclusiveLock' AND t.pid <> pg_catalog.pg_backend_pid()
                                              AND a.usesysid IS NOT NULL) AS busy
          FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_am am ON am.oid = c.relam
          JOIN pg_catalog.pg_index i ON i.indexrelid = c.oid
         WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'i'
           AND (c.relname LIKE 'piece\_ann\_%' OR c.relname LIKE 'fact\_ann\_%')
    ), wanted AS (
        SELECT k.plane, k.scope_id, k.scope_no, k.n, pgmem._scope_index_name(k.plane, k.scope_no) AS name,
               -- everything after the index name: the same for a new index and for a rebuild
               format('ON pgmem.%I USING %s (embedding @VECTOR_SCHEMA@.%I) %s WHERE scope_no = %s%s',
                      k.plane, method,
                      -- vector_ip_ops or halfvec_ip_ops, after the column's type
                      (SELECT t.typname || '_ip_ops' FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                        WHERE a.attrelid = format('pgmem.%I', k.plane)::regclass AND a.attname = 'embedding'),
                      CASE method WHEN 'hnsw' THEN format('WITH (m = %s, ef_construction = %s)', m, ef_construction)
                                  ELSE format('WITH (lists = %s)', greatest(10, (sqrt(k.n))::integer)) END,
                      k.scope_no, CASE WHEN k.plane = 'fact' THEN ''
                                       WHEN tail THEN format(' AND kind = ''memory'' AND piece_id <= %s', k.last_id)
                                       ELSE ' AND kind = ''memory''' END) AS spec
          FROM counts k WHERE k.n >= min_pieces
    ), plan AS (
        -- Scopes that reached the threshold and have no index yet. One with a valid `_rebuild`
        -- twin only (a run stopped between a rebuild's drop and its rename: recall looks the
        -- index up by its name and searched the scope exactly) has the twin renamed (0112): it
        -- was built again from nothing, and the twin dropped below. A twin built with other
        -- parameters is rebuilt by the next plan.
        SELECT w.scope_id, w.plane, w.n, 'create' AS action, 0 AS step,
               CASE WHEN EXISTS (SELECT 1 FROM existing r WHERE r.name = w.name || '_rebuild' AND r.valid AND NOT r.busy)
                    THEN format('ALTER INDEX IF EXISTS pgmem.%I RENAME TO %I', w.name || '_rebuild', w.name)
                    ELSE format('CREATE INDEX %sIF NOT EXISTS %I %s', conc, w.name, w.spec) END AS ddl
          FROM wanted w
         WHERE NOT EXISTS (SELECT 1 FROM existing e WHERE e.name = w.name)
        UNION ALL
        -- Indexes of scopes that shrank below half the threshold (hysteresis), or were deleted, or
        -- are left invalid by a failed concurrent build: dropped, so the scope is searched exactly
        -- (not an index another session is building: 0110).
        -- Indexes named and keyed the way they were before 0003 (<plane>_ann_<md5 prefix>, WHERE
        -- scope_id = '<scope>') match no scope either: dropped after the new index is built
        -- ('create' sorts first), so a large scope always has one.
        SELECT k.scope_id, e.plane, coalesce(k.n, 0), 'drop', 0,
               format('DROP INDEX %sIF EXISTS pgmem.%I', conc, e.name)
          FROM existing e
          LEFT JOIN counts k ON k.plane = e.plane AND pgmem._scope_index_name(k.plane, k.scope_no) = e.name
         WHERE (k.n IS NULL OR k.n < min_pieces / 2 OR NOT e.valid) AND NOT e.busy
        UNION ALL
        -- Valid indexes built with another method or other HNSW parameters than asked for, or
        -- with a tail when none is asked for (or the other way round): rebuilt; piece indexes
        -- whose tail reached max_tail: folded, i.e. rebuilt holding the pieces written so far.
        -- Either way built again beside the old one, which serves recall until it is swapped out.
        SELECT w.scope_id, w.plane, w.n, r.action, r.step, r.ddl
          FROM wanted w
          JOIN existing e ON e.name = w.name AND e.valid
         CROSS JOIN LATERAL (
                SELECT CASE WHEN e.am <> method OR (method = 'hnsw' AND (e.built_m <> m OR e.built_efc <> ef_construction))
                                 OR (w.plane = 'piece' AND tail <> (e.through IS NOT NULL)) THEN 'rebuild'
                            WHEN w.plane = 'piece' AND tail
                                 AND (SELECT count(*) FROM (
                                          SELECT 1 FROM pgmem.piece p
                                           WHERE p.scope_id = w.scope_id AND p.piece_id > e.through AND p.kind = 'memory'
                                           LIMIT max_tail) t) >= max_tail THEN 'fold' END AS action) a
         CROSS JOIN LATERAL (VALUES
                (1, format('CREATE INDEX %sIF NOT EXISTS %I %s', conc, w.name || '_rebuild', w.spec)),
                (2, format('DROP INDEX %sIF EXISTS pgmem.%I', conc, w.name)),
                (3, format('ALTER INDEX IF EXISTS pgmem.%I RENAME TO %I', w.name || '_rebuild', w.name))) AS r0(step, ddl)
         CROSS JOIN LATERAL (SELECT a.action, r0.step, r0.ddl) r
         WHERE a.action IS NOT NULL
        UNION ALL
        -- The folded postings (pgmem.word_fold) and the sample (in the fold's head) of every
        -- scope's pieces of each kind, when there are more than 1,000 and the fold is missing or
        -- stale or its tail reached half of what the word side reads directly: folded again; the
        -- fold of a smaller set: removed.
        SELECT k.scope_id, 'words', k.n, 'postings', 0,
               format('SELECT pgmem.refresh_word_fold(%L, %L)', k.scope_id, k.kind)
          FROM kinds k
          LEFT JOIN LATERAL (SELECT f.tail, f.max_tail FROM pgmem._word_fold(k.scope_id, k.kind) f) f ON true
         WHERE CASE WHEN k.n > 1000 THEN f.tail IS NULL OR 2 * f.tail >= f.max_tail
                    ELSE EXISTS (SELECT 1 FROM pgmem.word_fold_head h WHERE h.scope_id = k.scope_id AND h.kind = k.kind) END
    )
    SELECT p.scope_id, p.plane, p.n, p.action, p.ddl FROM plan p
     ORDER BY p.action, p.n DESC, p.scope_id, p.step;
    any_rows := FOUND;
    EXCEPTION WHEN OTHERS THEN
        -- A session-level lock outlives a rollback: give it back before the error leaves.
        IF NOT applied THEN
            PERFORM pgmem._end_index_maintenance();
        END IF;
        RAISE;
    END;
    PERFORM set_config('pgmem.maintenance', coalesce(prior, ''), true);
    IF NOT applied THEN
        IF any_rows THEN
            -- The last statement gives the lock back, after the plan's own.
            RETURN QUERY SELECT NULL::text, 'lock'::text, NULL::bigint, 'unlock'::text,
                                'SELECT pgmem._end_index_maintenance()'::text;
        ELSE
            PERFORM pgmem._end_index_maintenance();  -- nothing to do: nothing held
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.scope_index_plan(integer, text, boolean, integer, integer, boolean, integer) IS
'Index maintenance for every scope (run as a login member of pgmem_owner or a superuser; anyone who sees fewer scopes under row-level security is refused, 42501). The index changes the recall strategy needs: a partial ANN index on scope_no (hnsw with m = 24, ef_construction = 400 by default, or ivfflat; inner product) for every scope with at least min_pieces memory pieces (or facts), DROP for indexes of scopes that fell below min_pieces/2 (or were left invalid by a failed build; not an index another session is building, 0110), a rebuild (create beside, drop, rename) for indexes built with another method or other m / ef_construction (a valid `_rebuild` left by a run stopped before its rename is renamed, 0112), and a replacement for indexes keyed on the scope name (before 0003). tail (default true): a piece index holds the pieces up to the highest piece_id at build time (piece_id <= n); pieces written later are the scope''s write tail, never inserted into the graph and searched exactly by the recall functions; a fold (the same three statements) builds it again once the tail holds max_tail (default 2,000) pieces. tail => false builds indexes every write goes into (and rebuilds tail indexes that way). And the word side''s folded postings and sample (plane words, action postings: a call of pgmem.refresh_word_fold) of every scope''s memory pieces or document units when there are more than 1,000 and the fold is missing, stale or with a tail of half what the word side reads directly, and for a fold of a set of 1,000 or fewer. Returns the DDL in order; run it from psql with \gexec (CONCURRENTLY by default). One run at a time (0110): a plan with statements takes the index maintenance lock (an advisory lock, session level) before it reads anything and returns last a statement that releases it (plane lock, action unlock: SELECT pgmem._end_index_maintenance()); while another session holds it (a plan not yet run to its end, or index_large_scopes) it stops with 55P03. A plan with nothing to do takes nothing.';

CREATE OR REPLACE FUNCTION pgmem.index_large_scopes(
    min_pieces integer DEFAULT 5000,
    method text DEFAULT 'hnsw',
    m integer DEFAULT 24,
    ef_construction integer DEFAULT 400,
    tail boolean DEFAULT true,
    max_tail integer DEFAULT 2000
) RETURNS TABLE (scope_id text, plane text, row_count bigint, action text, ddl text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    -- Lock order (0106): pgmem.piece in SHARE mode first (after the maintenance lock, above)
    -- when the plan refreshes a word fold. A
    -- fold waits for the scope's writers in flight, which hold the scope row from before their
    -- first piece; once a build here held the table (a CREATE INDEX on piece, or on fact for an
    -- add_facts), such a writer waited for this transaction at its insert while the fold waited
    -- for it: a deadlock (40P01). Held from the start, the lock has waited for every writer with
    -- a piece in flight, and refresh_word_fold needs no wait (those still to insert take later ids).
    -- The maintenance lock (0110) first: one run at a time, 55P03 when another is in progress.
    -- The plan then neither takes it again nor returns the statement that releases it. Taken
    -- here without pgmem._begin_index_maintenance (which only the maintenance login may run), so
    -- that whoever may not run maintenance hears it from the plan (42501), which ends the
    -- transaction and the lock with it.
    IF NOT pg_catalog.pg_try_advisory_xact_lock(1885826405, 60) THEN
        RAISE EXCEPTION 'index maintenance is already running in another session (pid %)',
            (SELECT string_agg(l.pid::text, ', ') FROM pg_catalog.pg_locks l
              WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
                AND l.classid = 1885826405 AND l.objid = 60 AND l.objsubid = 2
                AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database()))
            USING ERRCODE = '55P03',
                  HINT = 'Run it again once that run has finished: two runs side by side would drop each other''s indexes (docs/scaling.md, "What a DBA should set").';
    END IF;
    PERFORM set_config('pgmem.index_maintenance', 'transaction', true);
    IF EXISTS (SELECT 1 FROM pgmem.scope_index_plan(min_pieces, method, false, m, ef_construction, tail, max_tail) p
                WHERE p.action = 'postings') THEN
        LOCK TABLE pgmem.piece IN SHARE MODE;
    END IF;
    FOR r IN SELECT * FROM pgmem.scope_index_plan(min_pieces, method, false, m, ef_construction, tail, max_tail) LOOP
        EXECUTE r.ddl;
        scope_id := r.scope_id; plane := r.plane; row_count := r.row_count; action := r.action; ddl := r.ddl;
        RETURN NEXT;
    END LOOP;
    PERFORM set_config('pgmem.index_maintenance', '', true);
    -- A plan this session read before (and holds the lock for, at session level) is superseded.
    PERFORM pgmem._end_index_maintenance();
END
$$;
COMMENT ON FUNCTION pgmem.index_large_scopes(integer, text, integer, integer, boolean, integer) IS
'Apply pgmem.scope_index_plan in this transaction (not concurrently: writes to the table wait for the builds; with a word fold to refresh, writes of pieces wait from the start, 0106). Holds the index maintenance lock to the end of the transaction, taken first: 55P03 at once while another run (a plan not yet run to its end, or another index_large_scopes) holds it (0110); gives back the hold of a plan this session read before. For a live system prefer SELECT ddl FROM pgmem.scope_index_plan(...) \gexec. Set maintenance_work_mem so one scope''s graph fits (docs/scaling.md).';
