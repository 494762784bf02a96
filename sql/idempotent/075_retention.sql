-- Retention: per-scope settings (how long turns and recall-log rows are kept) and the one
-- maintenance call that applies them to every scope. Re-runnable.
--
-- A scope's setting is written by its application, inside its scope like every write
-- (pgmem.set_retention, SECURITY DEFINER: pgmem_app may not write tables), and read back with
-- pgmem.get_retention. A DBA schedules pgmem.apply_retention() (docs/operations.md: pg_cron or
-- cron + psql). It removes expired turns as pgmem.forget_turn does (pgmem._forget_turn_rows, the
-- path of an explicit forget), so their pieces, the facts tied to them and the recall-log rows
-- that returned them go too (those in one read of the scope's log, pgmem._forget_logs);
-- then it trims each scope's recall log to its age and row bounds.

-- apply_retention must see every scope's setting: like index maintenance (060_indexes.sql), a
-- login member of pgmem_owner sees them while pgmem.maintenance is on (050_security.sql has the
-- reasoning). SELECT only: the removals themselves run inside each scope in turn.
DROP POLICY IF EXISTS maintenance_read ON pgmem.retention;
CREATE POLICY maintenance_read ON pgmem.retention AS PERMISSIVE FOR SELECT TO pgmem_owner
    USING ((SELECT pg_catalog.current_setting('pgmem.maintenance', true) = 'on'
                   AND pg_catalog.pg_has_role(SESSION_USER, 'pgmem_owner', 'USAGE')));
COMMENT ON POLICY maintenance_read ON pgmem.retention IS
    'pgmem.apply_retention (which sets pgmem.maintenance) reads every scope''s retention setting when the login is a member of pgmem_owner; SELECT only.';

-- The store's records of deleted keys (0101): apply_retention removes every scope's records older
-- than 30 days, and must find them in every scope.
DROP POLICY IF EXISTS maintenance_read ON pgmem.store_tombstone;
CREATE POLICY maintenance_read ON pgmem.store_tombstone AS PERMISSIVE FOR SELECT TO pgmem_owner
    USING ((SELECT pg_catalog.current_setting('pgmem.maintenance', true) = 'on'
                   AND pg_catalog.pg_has_role(SESSION_USER, 'pgmem_owner', 'USAGE')));
COMMENT ON POLICY maintenance_read ON pgmem.store_tombstone IS
    'pgmem.apply_retention (which sets pgmem.maintenance) finds the scopes holding records older than 30 days when the login is a member of pgmem_owner; SELECT only.';

CREATE OR REPLACE FUNCTION pgmem.set_retention(
    scope text,
    keep_days integer DEFAULT NULL,
    keep_turns integer DEFAULT NULL,
    log_keep_days integer DEFAULT NULL,
    log_keep_rows integer DEFAULT NULL
) RETURNS pgmem.retention
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r pgmem.retention;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'set_retention: scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(set_retention.scope), true);
    PERFORM pgmem._check_scope_name(set_retention.scope, 'set_retention');
    IF keep_days < 1 OR keep_days > 36500 OR log_keep_days < 1 OR log_keep_days > 36500 THEN
        RAISE EXCEPTION 'set_retention: keep_days and log_keep_days must be between 1 and 36500 (or NULL), got % and %',
            keep_days, log_keep_days USING ERRCODE = '22023', HINT = 'NULL means no age limit.';
    END IF;
    IF keep_turns < 1 OR keep_turns > 1000000000 OR log_keep_rows < 1 OR log_keep_rows > 1000000000 THEN
        RAISE EXCEPTION 'set_retention: keep_turns and log_keep_rows must be between 1 and 1000000000 (or NULL), got % and %',
            keep_turns, log_keep_rows USING ERRCODE = '22023', HINT = 'NULL means no count limit.';
    END IF;
    IF num_nonnulls(keep_days, keep_turns, log_keep_days, log_keep_rows) = 0 THEN
        -- The scope row first (the lock order), when there is one: the retention row alone was
        -- held while forget_scope, having locked the scope row, waited for it (its delete of the
        -- scope row cascades to it), and a write into the scope after this in the transaction
        -- waited for forget_scope: a deadlock (0083, tests/test_set_retention_lock_order.py).
        PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = set_retention.scope FOR KEY SHARE;
        DELETE FROM pgmem.retention rt WHERE rt.scope_id = set_retention.scope;
        RETURN r;  -- all NULL: the scope keeps everything
    END IF;
    -- A setting may come before the scope's first turn: the scope row is created here then. Insert
    -- first, then lock (0040): a scope being forgotten (forget_scope holds its row FOR UPDATE and
    -- deletes it last) is waited for and created again, so the setting lands after the forget
    -- instead of failing on the foreign key (23503).
    LOOP
        INSERT INTO pgmem.scope AS s (scope_id) VALUES (set_retention.scope) ON CONFLICT (scope_id) DO NOTHING;
        PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = set_retention.scope FOR KEY SHARE;
        EXIT WHEN FOUND;
    END LOOP;
    INSERT INTO pgmem.retention AS rt (scope_id, keep_days, keep_turns, log_keep_days, log_keep_rows)
    VALUES (set_retention.scope, set_retention.keep_days, set_retention.keep_turns,
            set_retention.log_keep_days, set_retention.log_keep_rows)
    ON CONFLICT (scope_id) DO UPDATE
       SET keep_days = EXCLUDED.keep_days, keep_turns = EXCLUDED.keep_turns, log_keep_days = EXCLUDED.log_keep_days,
           log_keep_rows = EXCLUDED.log_keep_rows, updated_at = now()
    RETURNING rt.* INTO r;
    RETURN r;
END
$$;
COMMENT ON FUNCTION pgmem.set_retention(text, integer, integer, integer, integer) IS
'Set the retention of the transaction''s scope (42501 for any other scope), replacing the previous setting whole: keep_days (turns whose turn_time, or ingested_at when turn_time is NULL, is older go), keep_turns (only the last keep_turns turns of each thread stay), log_keep_days and log_keep_rows (bounds on the scope''s recall log). A turn goes when it breaks either turn bound. All NULL removes the setting (the scope keeps everything; the row returned is all NULL). Applied by pgmem.apply_retention(), which a DBA schedules. Returns the stored setting.';

CREATE OR REPLACE FUNCTION pgmem.get_retention(scope text)
RETURNS SETOF pgmem.retention
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pgmem.check_scope(get_retention.scope);
    RETURN QUERY SELECT rt.* FROM pgmem.retention rt WHERE rt.scope_id = get_retention.scope;
END
$$;
COMMENT ON FUNCTION pgmem.get_retention(text) IS
'The retention setting of the transaction''s scope (no row: the scope keeps everything), with when it was last applied.';

-- A LangGraph store item is its thread's turn 0, aged by its last put (the item's updated_at,
-- 0089): its turn is timed at the item's created_at, which a put again keeps (an unchanged one
-- does not even write the turn), so keep_days removed an item put again yesterday when it had
-- been created longer ago (tests/test_retention.py).
CREATE OR REPLACE FUNCTION pgmem._expired_turns(scope text, keep_days integer, keep_turns integer)
RETURNS TABLE (thread_id text, turn_index integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT x.thread_id, x.turn_index FROM (
        SELECT tu.thread_id, tu.turn_index,
               coalesce((SELECT i.updated_at FROM pgmem.store_item i
                          WHERE tu.turn_index = 0 AND i.scope_id = tu.scope_id AND i.thread_id = tu.thread_id),
                        tu.turn_time, tu.ingested_at) AS at,
               row_number() OVER (PARTITION BY tu.thread_id ORDER BY tu.turn_index DESC) AS newest
          FROM pgmem.turn tu WHERE tu.scope_id = _expired_turns.scope) x
     WHERE (_expired_turns.keep_days IS NOT NULL AND x.at < now() - make_interval(days => _expired_turns.keep_days))
        OR (_expired_turns.keep_turns IS NOT NULL AND x.newest > _expired_turns.keep_turns)
$$;
COMMENT ON FUNCTION pgmem._expired_turns(text, integer, integer) IS
'Internal to pgmem.apply_retention: the turns of a scope that break its turn bounds (older than keep_days by turn_time, or ingested_at without one, or for a LangGraph store item''s turn, its thread''s turn 0, by the item''s last put, updated_at: 0089; or past the last keep_turns of their thread).';

-- The facts keep_days removes beside the turns (0117): those whose turn is not stored, stored
-- more than keep_days ago, and not about a stored document.
CREATE OR REPLACE FUNCTION pgmem._unturned_facts(scope text, keep_days integer)
RETURNS TABLE (fact_id bigint, thread_id text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT f.fact_id, f.thread_id FROM pgmem.fact f
     WHERE f.scope_id = _unturned_facts.scope
       AND f.created_at < now() - make_interval(days => _unturned_facts.keep_days)
       AND NOT EXISTS (SELECT 1 FROM pgmem.turn t
                        WHERE t.scope_id = f.scope_id AND t.thread_id = f.thread_id AND t.turn_index = f.turn_index)
       -- A document's facts name it as their section: its id, or id#anchor.
       AND NOT EXISTS (SELECT 1 FROM generate_series(1, cardinality(string_to_array(f.section, '#'))) AS g(i)
                         JOIN pgmem.document d
                           ON d.scope_id = f.scope_id
                          AND d.document_id = array_to_string((string_to_array(f.section, '#'))[1:g.i], '#'))
$$;
COMMENT ON FUNCTION pgmem._unturned_facts(text, integer) IS
'Internal to apply_retention: the scope''s facts whose turn is not stored (tied to a thread only, to no thread, or to a turn index the thread does not hold) that were stored more than keep_days days ago, except the facts about a document of the scope (a section that is a stored document''s id, or id#anchor): what keep_days removes beside the turns (0117).';

CREATE OR REPLACE FUNCTION pgmem.apply_retention()
RETURNS TABLE (scope_id text, turns integer, pieces integer, facts integer, threads integer, recall_logs integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    prior_maintenance text := current_setting('pgmem.maintenance', true);
    prior_scope text := current_setting('pgmem.scope', true);
    settings pgmem.retention[];
    s pgmem.retention;
    f record;
    doomed text[];
    gone_threads text[];
    gone_turns integer[];
    gone_pieces bigint[];
    gone_facts bigint[];
    -- The threads whose last turn went: the recalls filtered to them go too.
    emptied text[];
    n_logs integer;
    done integer;
    -- The scope's store items without a turn (rt60) not put within keep_days, and one of them.
    stale text[];
    item text;
    -- The scopes holding records of deleted store keys older than 30 days (0101).
    aged text[];
    -- The scope's facts whose turn is not stored, older than keep_days (0117), and the threads
    -- their delete left with nothing.
    old_facts bigint[] := '{}';
    fact_threads text[];
    n_aged integer;
BEGIN
    -- Every scope's setting must be visible, or scopes would silently keep what they should not:
    -- a superuser or BYPASSRLS role sees them, and so does a login member of pgmem_owner (the
    -- maintenance policy above); anyone else is refused.
    IF pg_catalog.row_security_active('pgmem.retention'::regclass)
       AND NOT (pg_catalog.pg_has_role(session_user, 'pgmem_owner', 'USAGE')
                AND pg_catalog.pg_has_role(current_user, 'pgmem_owner', 'USAGE')) THEN
        RAISE EXCEPTION 'retention must see every scope, and % (as %) sees only its own under row-level security',
            session_user, current_user
            USING ERRCODE = '42501',
                  HINT = 'Run SELECT * FROM pgmem.apply_retention() as the role that migrates pgmem (a login member of pgmem_owner, without SET ROLE) or as a superuser; no pgmem.scope is needed (docs/operations.md).';
    END IF;
    -- Its forgets' rule (0113), after the check above (the helper is internal: the owner's).
    PERFORM pgmem._forget_read_committed('apply_retention');
    PERFORM set_config('pgmem.maintenance', 'on', true);
    -- Scopes in bytewise order (COLLATE "C", 0077), as the store's batches and sweep_expired_items
    -- go through them, whatever the database's collation.
    settings := ARRAY(SELECT rt FROM pgmem.retention rt ORDER BY rt.scope_id COLLATE "C");
    PERFORM set_config('pgmem.maintenance', coalesce(prior_maintenance, ''), true);
    RAISE NOTICE 'apply_retention: % scopes have a retention setting', cardinality(settings);
    FOREACH s IN ARRAY settings LOOP
        -- Each scope is handled inside its own scope, as its application would forget.
        PERFORM set_config('pgmem.scope', s.scope_id, true);
        -- The scope row first, FOR KEY SHARE (0054): a forget_scope in flight is waited for.
        PERFORM 1 FROM pgmem.scope sc WHERE sc.scope_id = s.scope_id FOR KEY SHARE;
        -- The setting as it is now, not as it was when the run began (rt70): a setting removed
        -- or loosened while retention worked on the scopes before this one (or the scope
        -- forgotten, taking its setting, and written again) was applied all the same, and the
        -- turns the scope kept from then on were removed.
        SELECT rt.* INTO s FROM pgmem.retention rt WHERE rt.scope_id = s.scope_id;
        CONTINUE WHEN NOT FOUND;
        scope_id := s.scope_id; turns := 0; pieces := 0; facts := 0; threads := 0; recall_logs := 0;
        done := 0; emptied := '{}';
        IF s.keep_days IS NOT NULL OR s.keep_turns IS NOT NULL THEN
            -- Lock order (docs/architecture.md), for all the scope's expiring threads at once: their
            -- store items, then the threads, each FOR UPDATE and sorted by key, before any turn goes.
            -- Locking each thread as its turns came up held the recall-log rows deleted for the
            -- threads before it while it waited for the next thread: a forget of that thread, which
            -- deletes a log row naming both, then waited for retention (a deadlock). A writer that
            -- came first finishes first, and the expired turns are listed again under the locks.
            -- (The scope row is held FOR KEY SHARE from above.)
            doomed := ARRAY(SELECT DISTINCT e.thread_id FROM pgmem._expired_turns(s.scope_id, s.keep_days, s.keep_turns) e ORDER BY 1);
            -- A fact whose turn is not stored (tied to a thread only, to no thread, or to a turn
            -- that never came) is aged by when it was stored (0117): until then only a turn's
            -- facts went, and these outlived every keep_days. Their threads are locked with the
            -- turns' (thread, then its facts). A fact about a stored document stays with it, as
            -- documents are not aged.
            IF s.keep_days IS NOT NULL THEN
                doomed := ARRAY(SELECT DISTINCT u.t FROM unnest(doomed || ARRAY(
                                    SELECT fa.thread_id FROM pgmem._unturned_facts(s.scope_id, s.keep_days) fa
                                     WHERE fa.thread_id IS NOT NULL)) AS u(t) ORDER BY 1);
            END IF;
            -- A LangGraph store item without a turn (a plain key-value item, put with
            -- index=False, or one a store with its own embed indexes with field vectors) is aged
            -- by its last put as an indexed item is (rt60): keep_days removed the indexed items
            -- only, and these, their values and field vectors, outlived every keep_days.
            stale := CASE WHEN s.keep_days IS NULL THEN '{}'::text[] ELSE ARRAY(
                         SELECT i.item_key FROM pgmem.store_item i
                          WHERE i.scope_id = s.scope_id AND i.thread_id IS NULL
                            AND i.updated_at < now() - make_interval(days => s.keep_days)) END;
            -- Items by key, bytewise (0070), as the store's batches and expire_items lock them:
            -- sorted by thread, an item with a long key (thread item-sha256:<hex>) came in
            -- another order, and retention and a batch putting two such items again deadlocked.
            -- The items without a turn in the same pass (the same order).
            PERFORM 1 FROM pgmem.store_item i
             WHERE i.scope_id = s.scope_id AND (i.thread_id = ANY (doomed) OR i.item_key = ANY (stale))
             ORDER BY i.item_key COLLATE "C" FOR UPDATE;
            -- Read again under the locks: a put committed while this waited moved its clock.
            stale := ARRAY(SELECT i.item_key FROM pgmem.store_item i
                            WHERE i.scope_id = s.scope_id AND i.item_key = ANY (stale) AND i.thread_id IS NULL
                              AND i.updated_at < now() - make_interval(days => s.keep_days)
                            ORDER BY i.item_key COLLATE "C");
            PERFORM 1 FROM pgmem.thread th WHERE th.scope_id = s.scope_id AND th.thread_id = ANY (doomed)
              ORDER BY th.thread_id FOR UPDATE;
            SELECT coalesce(array_agg(e.thread_id ORDER BY e.thread_id, e.turn_index), '{}'),
                   coalesce(array_agg(e.turn_index ORDER BY e.thread_id, e.turn_index), '{}')
              INTO gone_threads, gone_turns
              FROM pgmem._expired_turns(s.scope_id, s.keep_days, s.keep_turns) e WHERE e.thread_id = ANY (doomed);
            -- Each turn's rows go as forget_turn removes them, and the recall-log rows that returned
            -- any of them in one read of the log at the end (pgmem._forget_logs): forget_turn
            -- read the whole log for each turn (turns times log rows: 2,000 turns and 3,200 rows,
            -- 42 s). The ids it needs are read first; the thread locks keep them as they are.
            gone_pieces := ARRAY(SELECT p.piece_id FROM unnest(gone_threads, gone_turns) AS g(thread_id, turn_index)
                                   JOIN pgmem.piece p ON p.scope_id = s.scope_id AND p.kind = 'memory'
                                    AND p.thread_id = g.thread_id AND p.turn_index = g.turn_index);
            gone_facts := ARRAY(SELECT fa.fact_id FROM unnest(gone_threads, gone_turns) AS g(thread_id, turn_index)
                                  JOIN pgmem.fact fa ON fa.scope_id = s.scope_id
                                   AND fa.thread_id = g.thread_id AND fa.turn_index = g.turn_index);
            FOR k IN 1 .. cardinality(gone_threads) LOOP
                SELECT * INTO f FROM pgmem._forget_turn_rows(s.scope_id, gone_threads[k], gone_turns[k]);
                IF f.threads > 0 THEN
                    emptied := emptied || gone_threads[k];
                END IF;
                turns := turns + f.turns; pieces := pieces + cardinality(f.piece_ids);
                facts := facts + cardinality(f.fact_ids); threads := threads + f.threads;
                done := done + 1;
                IF done % 1000 = 0 THEN
                    RAISE NOTICE 'apply_retention: scope %: % turns removed so far', s.scope_id, done;
                END IF;
            END LOOP;
            -- The facts whose turn is not stored, read again under the thread locks (a turn stored
            -- meanwhile keeps its facts), as forget_fact removes them: a thread left with nothing
            -- goes, and takes the recalls filtered to it.
            IF s.keep_days IS NOT NULL THEN
                WITH d AS (
                    DELETE FROM pgmem.fact fa
                     WHERE fa.scope_id = s.scope_id
                       AND fa.fact_id IN (SELECT o.fact_id FROM pgmem._unturned_facts(s.scope_id, s.keep_days) o
                                           WHERE o.thread_id IS NULL OR o.thread_id = ANY (doomed))
                    RETURNING fa.fact_id, fa.thread_id)
                SELECT coalesce(array_agg(d.fact_id), '{}'),
                       coalesce(array_agg(DISTINCT d.thread_id) FILTER (WHERE d.thread_id IS NOT NULL), '{}')
                  INTO old_facts, fact_threads FROM d;
                IF cardinality(fact_threads) > 0 THEN
                    threads := threads + pgmem._drop_empty_threads(s.scope_id, fact_threads);
                    emptied := emptied || ARRAY(SELECT u.t FROM unnest(fact_threads) AS u(t)
                                                 WHERE NOT EXISTS (SELECT 1 FROM pgmem.thread th
                                                                    WHERE th.scope_id = s.scope_id AND th.thread_id = u.t));
                END IF;
                facts := facts + cardinality(old_facts);
                gone_facts := gone_facts || old_facts;
            END IF;
            -- The items without a turn, as expire_items removes an item (their field vectors go
            -- with them), remembered as deleted (pgmem.store_tombstone: an import of an older
            -- copy does not bring them back); a namespace left without items leaves the
            -- store's directories. No recall-log row returned them (they have no piece).
            FOREACH item IN ARRAY stale LOOP
                PERFORM pgmem._delete_item_rows(s.scope_id, item);
            END LOOP;
            IF cardinality(stale) > 0 THEN
                PERFORM pgmem._note_deleted_items(s.scope_id, stale);
                PERFORM pgmem._drop_empty_namespace(s.scope_id, stale[cardinality(stale)]);
                RAISE NOTICE 'apply_retention: scope %: % store items without a turn removed', s.scope_id, cardinality(stale);
            END IF;
            IF cardinality(gone_threads) > 0 OR cardinality(old_facts) > 0 THEN
                -- A thread that went with its last turn takes the recalls filtered to it too (a
                -- NULL turn index is the whole thread), as forget_thread does.
                recall_logs := recall_logs
                    + pgmem._forget_logs(s.scope_id, gone_threads || emptied,
                                         gone_turns || array_fill(NULL::integer, ARRAY[cardinality(emptied)]),
                                         gone_pieces, gone_facts);
            END IF;
        END IF;
        IF s.log_keep_days IS NOT NULL OR s.log_keep_rows IS NOT NULL THEN
            PERFORM pg_advisory_xact_lock(pgmem._recall_log_lock(s.scope_id));
            DELETE FROM pgmem.recall_log l
             WHERE l.scope_id = s.scope_id
               AND ((s.log_keep_days IS NOT NULL AND l.created_at < now() - make_interval(days => s.log_keep_days))
                    OR (s.log_keep_rows IS NOT NULL AND l.recall_id IN (
                            SELECT k.recall_id FROM pgmem.recall_log k WHERE k.scope_id = s.scope_id
                             ORDER BY k.created_at DESC, k.recall_id DESC OFFSET s.log_keep_rows)));
            GET DIAGNOSTICS n_logs = ROW_COUNT;
            recall_logs := recall_logs + n_logs;
        END IF;
        -- When it was applied, unless the application holds the setting's row (a set_retention in
        -- flight, which locks it after the scope row): waiting for it here, with the scope's
        -- threads held, deadlocked with that transaction's next write of one of them (rt70).
        UPDATE pgmem.retention rt SET applied_at = now() WHERE rt.scope_id = (
            SELECT k.scope_id FROM pgmem.retention k WHERE k.scope_id = s.scope_id FOR NO KEY UPDATE SKIP LOCKED);
        RAISE NOTICE 'apply_retention: scope %: % turns, % pieces, % facts, % threads, % recall-log rows removed',
            s.scope_id, turns, pieces, facts, threads, recall_logs;
        RETURN NEXT;
    END LOOP;
    -- The store's records of deleted keys (pgmem.store_tombstone) and of forgotten scopes
    -- (pgmem.forgotten_scope) are kept 30 days (docs/security.md), but only the next record of
    -- the same scope (a delete, an expiry) or the next forget_scope pruned them: a namespace
    -- whose last delete was long ago, or a database where no scope was forgotten since, kept
    -- them for ever (0101). Every scope's, with or without a retention setting, each inside its
    -- scope in bytewise order; a record another transaction holds is skipped, never waited for.
    PERFORM set_config('pgmem.maintenance', 'on', true);
    aged := ARRAY(SELECT DISTINCT t.scope_id FROM pgmem.store_tombstone t
                   WHERE t.deleted_at < now() - interval '30 days' ORDER BY 1);
    PERFORM set_config('pgmem.maintenance', coalesce(prior_maintenance, ''), true);
    FOREACH item IN ARRAY ARRAY(SELECT a FROM unnest(aged) AS a ORDER BY a COLLATE "C") LOOP
        PERFORM set_config('pgmem.scope', item, true);
        PERFORM pgmem._prune_tombstones(item);
    END LOOP;
    DELETE FROM pgmem.forgotten_scope f WHERE f.scope_hash IN (
        SELECT o.scope_hash FROM pgmem.forgotten_scope o
         WHERE o.forgotten_at < now() - interval '30 days' FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS n_aged = ROW_COUNT;
    IF cardinality(aged) > 0 OR n_aged > 0 THEN
        RAISE NOTICE 'apply_retention: records of deleted store keys older than 30 days removed in % scopes, of forgotten scopes: %',
            cardinality(aged), n_aged;
    END IF;
    PERFORM set_config('pgmem.scope', coalesce(prior_scope, ''), true);
END
$$;
COMMENT ON FUNCTION pgmem.apply_retention() IS
'Apply every scope''s retention setting (pgmem.set_retention), for a DBA to schedule (pg_cron or cron + psql, docs/operations.md). Run as a login member of pgmem_owner (the migrating role) or a superuser; anyone who sees only one scope under row-level security is refused (42501). In each scope: turns beyond the age bound (turn_time, or ingested_at when turn_time is NULL; a LangGraph store item''s turn by the item''s last put) or beyond the last keep_turns of their thread are removed as pgmem.forget_turn removes them (pieces, facts tied to the turn, recall-log rows that returned them, read once a scope, and threads left empty go too), the facts whose turn is not stored (tied to a thread only or to no turn; not those about a stored document) stored more than keep_days ago (since 0117, as forget_fact removes them), and the LangGraph store items without a turn (plain key-value items, items with field vectors) not put within keep_days as expire_items removes an item (since 0096, reported in a NOTICE), then the recall log is trimmed to log_keep_days and log_keep_rows. Then (since 0101) every scope''s records of deleted store keys (pgmem.store_tombstone) and the records of forgotten scopes (pgmem.forgotten_scope) older than 30 days go, whatever the retention settings. Each scope''s setting is read when its turn comes, under its scope row (since 0107: a setting removed or changed meanwhile counts; a scope without one then is passed over), and its applied_at is not written while a set_retention of the scope is in flight. One row per scope with a setting: turns, pieces, facts, threads and recall-log rows removed; NOTICEs report progress. One transaction: a failure removes nothing. READ COMMITTED only (25000 under REPEATABLE READ or SERIALIZABLE, whose snapshot predates the wait for the writers of what it forgets, 0113).';
