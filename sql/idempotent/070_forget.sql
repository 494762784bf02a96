-- Forgetting: a turn, a thread, a whole scope, a fact, a document. Re-runnable.
--
-- Each forget function runs inside the transaction's scope (pgmem._write_scope: 42501 for any
-- other scope) and removes what it names together with everything derived from it: the
-- pieces (their vectors and text), the facts tied to it, and the recall-log rows whose
-- stored results or thread filter point at it, since those hold copies of the forgotten text
-- (docs/security.md says what remains outside the tables: WAL, backups, dead tuples).
-- Forgetting what is not there removes nothing and is not an error, so every call can be
-- repeated. Each returns one row of counts (pgmem.forget_counts columns, below).
-- SECURITY DEFINER (900_grants.sql): pgmem_app has no DELETE on any table.

-- The advisory lock of a scope's recall-log deletes (0039): every statement that deletes a
-- scope's recall-log rows holds it to the end of its transaction, so no two transactions delete
-- them at once. One row can name several threads (a recall's hits), and a transaction deleting in
-- several statements (apply_retention, a forget per turn; expire_items, one per item) held the rows
-- of its first statements while a forget of another thread, having deleted one row its next
-- statement needed, waited for them: a deadlock (docs/architecture.md, "Lock order").
CREATE OR REPLACE FUNCTION pgmem._recall_log_lock(scope text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT (x'70676d6c'::bigint << 32) | (hashtext(scope)::bigint & x'ffffffff'::bigint)
$$;
COMMENT ON FUNCTION pgmem._recall_log_lock(text) IS
'The advisory lock of a scope''s recall-log deletes: every delete of the scope''s recall_log rows (pgmem._forget_logs, apply_retention''s trim, forget_scope) holds it exclusively to the end of its transaction, after its other row locks.';

-- Forgets run READ COMMITTED only (0113). A forget waits for the writers of what it forgets (the
-- lock order), then deletes what they wrote; under REPEATABLE READ or SERIALIZABLE (a database or
-- login whose default_transaction_isolation says so) its snapshot predates that wait, so what a
-- writer committed meanwhile was not seen: a fact it tied to the forgotten turn outlived
-- forget_turn (also under SERIALIZABLE, when the writer ran READ COMMITTED, which SSI does not
-- watch). Refused before anything changes, as reembed_flip is (0106).
CREATE OR REPLACE FUNCTION pgmem._forget_read_committed(caller text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION '% must run in a READ COMMITTED transaction, not %', caller,
            upper(current_setting('transaction_isolation'))
            USING ERRCODE = '25000',
                  HINT = 'Forget at the default isolation level (BEGIN ISOLATION LEVEL READ COMMITTED, or SET default_transaction_isolation = ''read committed'' for the login): a forget must see what the writers it waits for committed.';
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._forget_read_committed(text) IS
'Internal to the forget functions and apply_retention (0113): raise 25000 naming the caller unless the transaction is READ COMMITTED (under REPEATABLE READ or SERIALIZABLE a forget''s snapshot predates its wait for the writers of what it forgets, whose rows then outlived it).';

-- Recall-log rows of the scope that reference what is being forgotten: a hit (any object at
-- any depth of `results`) naming one of the piece or fact ids, a (thread, turn) pair, a whole
-- thread, or the document; or, for a whole thread, a recall filtered to that thread. Every
-- forget's last step, for one turn or many (apply_retention forgets a scope's expired turns and
-- reads the log once, not once a turn: 2,000 turns and 3,200 log rows took 42 s, 0043). Each set
-- is hashed, so the cost is the log's size plus the sets'.
DROP FUNCTION IF EXISTS pgmem._forget_logs(text, text, integer, bigint[], bigint[], text);
DROP FUNCTION IF EXISTS pgmem._forget_turns_logs(text, text[], integer[], bigint[], bigint[]);
CREATE OR REPLACE FUNCTION pgmem._forget_logs(
    scope text,
    threads text[] DEFAULT '{}',
    turn_indexes integer[] DEFAULT '{}',
    piece_ids bigint[] DEFAULT '{}',
    fact_ids bigint[] DEFAULT '{}',
    document_id text DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    -- threads[i] with turn_indexes[i] NULL (or missing) is the whole thread.
    whole text[] := ARRAY(SELECT u.t FROM unnest(coalesce(threads, '{}'), coalesce(turn_indexes, '{}')) AS u(t, n)
                           WHERE u.t IS NOT NULL AND u.n IS NULL);
    n integer;
BEGIN
    -- The last step of every forget (the lock order): the scope's recall-log lock first.
    PERFORM pg_advisory_xact_lock(pgmem._recall_log_lock(_forget_logs.scope));
    DELETE FROM pgmem.recall_log l
     WHERE l.scope_id = _forget_logs.scope
       AND (l.thread_id IN (SELECT unnest(whole))
            OR EXISTS (
                SELECT 1 FROM jsonb_path_query(l.results, 'strict $.**') AS o(v)
                 WHERE jsonb_typeof(o.v) = 'object'
                   AND ((o.v -> 'piece_id') IN (SELECT to_jsonb(u.i) FROM unnest(_forget_logs.piece_ids) AS u(i))
                        -- A fact-plane hit names its fact as fact_id, or as piece_id when it is
                        -- logged as Python's fact_recall returns it (Hit.piece_id, 0114): that
                        -- log row kept a forgotten fact's body.
                        OR (l.plane = 'fact'
                            AND coalesce(o.v -> 'fact_id', o.v -> 'piece_id')
                                IN (SELECT to_jsonb(u.i) FROM unnest(_forget_logs.fact_ids) AS u(i)))
                        OR (o.v ->> 'thread_id') IN (SELECT unnest(whole))
                        OR (o.v ->> 'thread_id', o.v -> 'turn_index') IN (
                               SELECT u.t, to_jsonb(u.n)
                                 FROM unnest(_forget_logs.threads, _forget_logs.turn_indexes) AS u(t, n)
                                WHERE u.n IS NOT NULL)
                        OR (_forget_logs.document_id IS NOT NULL
                            AND (o.v ->> 'document_id') = _forget_logs.document_id))));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION pgmem._forget_logs(text, text[], integer[], bigint[], bigint[], text) IS
'Internal to the forget functions and apply_retention: delete the scope''s recall_log rows whose results (any object at any depth) name one of piece_ids, fact_ids (fact plane: a hit''s fact_id, or its piece_id when it has none, as Python''s fact_recall names a fact, 0114), a (thread, turn_index) pair of threads and turn_indexes, a whole thread (a thread whose turn index is NULL: and the recalls filtered to it) or the document_id, in one read of the log, under the scope''s recall-log lock (pgmem._recall_log_lock). Returns the rows deleted.';

-- The advisory lock of a scope's store directory entries (0039): every put_item holds it shared
-- to its commit; a delete of the scope's last item takes it exclusively, without waiting.
CREATE OR REPLACE FUNCTION pgmem._store_directory_lock(scope text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT (x'70676d64'::bigint << 32) | (hashtext(scope)::bigint & x'ffffffff'::bigint)
$$;
COMMENT ON FUNCTION pgmem._store_directory_lock(text) IS
'The advisory lock of a scope''s LangGraph store directory entries: put_item holds it shared to its commit; pgmem._drop_empty_namespace takes it exclusively if it can at once.';

-- A store key's lock (0051): delete_item and a conditional put_item (an import) hold it from
-- before the item row to their commit. A delete of a key that a conditional put is inserting
-- right now would not see the new row, and that put, having looked for a tombstone before the
-- delete wrote one, would not see it: the lock runs them one after the other. Other puts never
-- take it.
CREATE OR REPLACE FUNCTION pgmem._store_key_lock(scope text, item_key text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT (x'70676d6b'::bigint << 32) | (hashtext(scope || '/' || item_key)::bigint & x'ffffffff'::bigint)
$$;
COMMENT ON FUNCTION pgmem._store_key_lock(text, text) IS
'The advisory lock of one LangGraph store key: delete_item and a conditional put_item (unless_newer_than) hold it exclusively from before the item row to the end of their transaction.';

-- A scope's records of deleted store items (pgmem.store_tombstone) older than 30 days go, those
-- another transaction holds being skipped (never waited for, so this adds no wait to the lock
-- order). The delete runs only when the index says there is one to remove: run every time it cost
-- 15 us of a delete_item's 73 (server side), the check 6. Every writer of records calls it: until
-- 0093 only delete_item's did, and a store whose items only expired (expire_items writes records
-- since 0092) kept every record for ever.
CREATE OR REPLACE FUNCTION pgmem._prune_tombstones(scope text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF EXISTS (SELECT 1 FROM pgmem.store_tombstone o
                WHERE o.scope_id = _prune_tombstones.scope AND o.deleted_at < now() - interval '30 days') THEN
        DELETE FROM pgmem.store_tombstone t
         WHERE (t.scope_id, t.key_hash) IN (
               SELECT o.scope_id, o.key_hash FROM pgmem.store_tombstone o
                WHERE o.scope_id = _prune_tombstones.scope AND o.deleted_at < now() - interval '30 days'
                  FOR UPDATE SKIP LOCKED);
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._prune_tombstones(text) IS
'Internal to the writers of pgmem.store_tombstone (delete_item and the forgets of an item''s thread through _note_deleted_items, expire_items): remove the scope''s records older than 30 days, skipping those another transaction holds (0093).';

-- Deleted store items are remembered (pgmem.store_tombstone, 0051): the sha256 of each key and
-- the time, so that an import's conditional put of an older copy skips them. Kept 30 days
-- (pgmem._prune_tombstones).
CREATE OR REPLACE FUNCTION pgmem._note_deleted_items(scope text, item_keys text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO pgmem.store_tombstone AS t (scope_id, key_hash, deleted_at)
    SELECT DISTINCT _note_deleted_items.scope, sha256(convert_to(k.key, 'UTF8')), now()
      FROM unnest(item_keys) AS k(key)
     WHERE k.key IS NOT NULL
     ORDER BY 2
    ON CONFLICT (scope_id, key_hash) DO UPDATE SET deleted_at = excluded.deleted_at;
    PERFORM pgmem._prune_tombstones(_note_deleted_items.scope);
END
$$;
COMMENT ON FUNCTION pgmem._note_deleted_items(text, text[]) IS
'Internal to delete_item and the forgets of an item''s thread: record the keys as deleted now in pgmem.store_tombstone (their sha256), and remove the scope''s records older than 30 days.';

-- A namespace leaves the LangGraph store's directories (pgmem.store_namespace) with its scope's
-- last item (0039). An item a put_item is writing right now is not visible here, and that put found
-- the directory row already there and wrote none: deleting the row would hide its item from every
-- listing, search and sweep. Every put_item holds the scope's directory lock shared to its commit,
-- so the row goes only when this takes it exclusively at once (pg_try_advisory_xact_lock: it never
-- waits, so it adds no wait to the lock order) and no item is left, read after that with a fresh
-- snapshot (READ COMMITTED; under a stricter isolation the row stays). A put that comes later
-- waits for the lock and writes the row again. A row left here (a put was in flight, and rolled
-- back; or two transactions deleted the last two items at once, each still seeing the other's)
-- goes with the next delete or expire_items that finds the namespace empty, or with
-- pgmem.sweep_expired_items, which since 0084 calls this (near NULL) in every scope whose
-- entries outlived its items.
-- Whether the scope holds an item is looked up from a key just deleted (near) first (0080): the
-- items this transaction deleted stay in the key index until it commits, and a probe from the
-- scope's first key stepped over every one of them, so each delete of a transaction deleting many
-- items cost all the deletes before it (with 0079: 8,000 deletes a transaction 3.48-3.55 ms a
-- delete at 0078, 0.93-1.12 now; docs/bench/delete-ab-0080.txt). From near, the next key is
-- mostly one not deleted yet; only when none follows does the look start from the first key.
-- Unless the transaction's previous delete in the scope was of a later key (review rt47): deleting
-- in descending key order, every key after near is one this transaction deleted, and the look from
-- near stepped over all of them before the look from the first key found an item at once (6,000
-- deletes a transaction in descending key order: 0.85 ms a delete without the hint, 0.54 with it,
-- 0.71-0.86 at 0078; docs/bench/delete-ab-0080-order.txt); the last key deleted, per transaction
-- and scope, is kept in
-- pgmem.store_deleted_near, a hint only (whatever it holds, the look from the first key decides).
DROP FUNCTION IF EXISTS pgmem._drop_empty_namespace(text);
CREATE OR REPLACE FUNCTION pgmem._drop_empty_namespace(scope text, near text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
-- The looks walk the key index from where they start and stop at the first item: a plan made
-- when the table was small scanned the whole table for the one from near (a delete in a
-- transaction of 500 took 1.81 times as long as at 0078), and a bitmap scan reads every key after it.
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    head text := 'pgmem ' || pg_current_xact_id()::text || E'\n' || to_jsonb(_drop_empty_namespace.scope)::text || E'\t';
    last text := current_setting('pgmem.store_deleted_near', true);
    from_near boolean := near IS NOT NULL
                         AND NOT (starts_with(coalesce(last, ''), head) AND substr(last, length(head) + 1) > near);
BEGIN
    IF near IS NOT NULL THEN
        PERFORM set_config('pgmem.store_deleted_near', head || near, true);
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed'
       OR (from_near AND EXISTS (SELECT 1 FROM pgmem.store_item i
                                  WHERE i.scope_id = _drop_empty_namespace.scope AND i.item_key > near))
       OR EXISTS (SELECT 1 FROM pgmem.store_item i WHERE i.scope_id = _drop_empty_namespace.scope) THEN
        RETURN false;
    END IF;
    IF NOT pg_try_advisory_xact_lock(pgmem._store_directory_lock(_drop_empty_namespace.scope))
       OR EXISTS (SELECT 1 FROM pgmem.store_item i WHERE i.scope_id = _drop_empty_namespace.scope) THEN
        RETURN false;
    END IF;
    DELETE FROM pgmem.store_namespace ns WHERE ns.scope_name = _drop_empty_namespace.scope;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION pgmem._drop_empty_namespace(text, text) IS
'Internal to delete_item, the forget functions, expire_items and sweep_expired_items (a scope listed with no item, 0084): delete the scope''s LangGraph store directory entries when it holds no item and no put_item is in flight in it (the scope''s directory lock, pgmem._store_directory_lock, taken exclusively without waiting; an item being put now keeps its namespace listed). near: a key just deleted, where the look for an item left starts (NULL, or when the transaction''s previous delete in the scope, kept in pgmem.store_deleted_near, was of a later key: from the first key). Returns whether entries went.';

-- The LangGraph store's items whose searchable turn is in the thread being forgotten: the item
-- row holds the same text (its value), so it goes too, and the namespace leaves the store's
-- directories with the scope's last item (as pgmem.delete_item does). Called after the items
-- were locked (pgmem._lock_thread), before the thread's rows are deleted.
CREATE OR REPLACE FUNCTION pgmem._forget_items(scope text, thread text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer;
    keys text[];
BEGIN
    WITH gone AS (
        DELETE FROM pgmem.store_item i WHERE i.scope_id = _forget_items.scope AND i.thread_id = _forget_items.thread
        RETURNING i.item_key)
    SELECT array_agg(g.item_key) INTO keys FROM gone g;
    n := coalesce(cardinality(keys), 0);
    IF n > 0 THEN
        -- Remembered as delete_item remembers them, so an import does not write them again.
        PERFORM pgmem._note_deleted_items(_forget_items.scope, keys);
        PERFORM pgmem._drop_empty_namespace(_forget_items.scope, keys[cardinality(keys)]);
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION pgmem._forget_items(text, text) IS
'Internal to the forget functions: delete the scope''s LangGraph store items whose searchable turn is in the thread, remember them as deleted (pgmem._note_deleted_items), and delete the scope''s store directory entries once no item is left (pgmem._drop_empty_namespace). Returns the items deleted.';

-- The scope row of a forget, FOR KEY SHARE as its writers hold it (0054), a row another
-- transaction is inserting waited for (0082; part of pgmem._lock_thread until 0083, when
-- forget_document and forget_fact came to need it too): a SELECT ... FOR KEY SHARE does not see
-- an uncommitted row, so the row is inserted when it is not found (ON CONFLICT waits for the other insert) and, when this
-- transaction made it (there was none), deleted at once; its index entry still makes a writer
-- creating the scope wait for this transaction. A row another forget deleted while this waited
-- is looked for again. (A name the table cannot hold names no scope: no wait.)
CREATE OR REPLACE FUNCTION pgmem._lock_scope(scope text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    made boolean;
BEGIN
    LOOP
        PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = _lock_scope.scope FOR KEY SHARE;
        IF FOUND THEN
            RETURN true;
        END IF;
        IF coalesce(char_length(_lock_scope.scope) NOT BETWEEN 1 AND 200, true) THEN
            RETURN false;
        END IF;
        made := NULL;
        INSERT INTO pgmem.scope AS s (scope_id) VALUES (_lock_scope.scope) ON CONFLICT (scope_id) DO NOTHING
        RETURNING true INTO made;
        IF made THEN
            DELETE FROM pgmem.scope s WHERE s.scope_id = _lock_scope.scope;
            RETURN false;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem._lock_scope(text) IS
'Internal to the forget functions and delete_item (0085): hold the scope row FOR KEY SHARE and return true; when there is none, insert it (which waits for a writer inserting it), delete it again and return false (0082, 0083).';

-- The one lock order of every writer (docs/architecture.md): scope, then store item or
-- document, then thread, then turn, then pieces and facts, then recall-log rows. A forget of a
-- thread or turn takes the thread's store items and its thread row FOR UPDATE before it deletes
-- anything, so a put_turn of the thread (KEY SHARE on the thread) and a put_item of its item
-- (FOR UPDATE on the item) either finish first, and are forgotten, or wait and land after it.
CREATE OR REPLACE FUNCTION pgmem._lock_thread(scope text, thread text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    made boolean;
BEGIN
    -- The scope row first, FOR KEY SHARE as its writers hold it (0054): forget_scope, which locks
    -- it FOR UPDATE and then deletes the scope's pieces, threads and items, is waited for, or
    -- waits for this. Without it a forget of a thread held rows forget_scope went on to delete,
    -- and a put of the scope in the same transaction then waited for forget_scope (a deadlock).
    -- A row another transaction is inserting (the scope's: pgmem._lock_scope, since 0083), or a
    -- thread row below, is not seen by a SELECT ... FOR UPDATE: the forget locked nothing,
    -- deleted the writer's rows once it committed (a later statement's snapshot), and met
    -- another forget of the thread, which had locked the committed row, halfway (a deadlock,
    -- 0082). Each row is therefore inserted first when it is not found (ON CONFLICT waits for
    -- the other insert) and, when this transaction made it (there was none), deleted at once:
    -- its index entry still makes a writer of the thread wait for this transaction, as a lock on
    -- the row would. A row deleted by another forget while this waited is looked for again. (A
    -- name the tables cannot hold, or NULL, names nothing: no wait.)
    IF NOT pgmem._lock_scope(_lock_thread.scope) THEN
        RETURN;  -- no scope: nothing of it to lock
    END IF;
    LOOP
        -- The items again after each wait for a writer's insert of the thread row (0083): an item
        -- that writer put, unseen before the wait, was locked only by the delete that came after
        -- the thread row, and a store batch holding the item, then writing a turn of the thread,
        -- met the forget halfway (a deadlock; tests/test_forget_thread_lock_order.py).
        PERFORM 1 FROM pgmem.store_item i WHERE i.scope_id = _lock_thread.scope AND i.thread_id = _lock_thread.thread
            FOR UPDATE;
        PERFORM 1 FROM pgmem.thread th WHERE th.scope_id = _lock_thread.scope AND th.thread_id = _lock_thread.thread
            FOR UPDATE;
        EXIT WHEN FOUND OR coalesce(char_length(_lock_thread.thread) NOT BETWEEN 1 AND 200, true);
        made := NULL;
        INSERT INTO pgmem.thread AS th (scope_id, thread_id) VALUES (_lock_thread.scope, _lock_thread.thread)
        ON CONFLICT (scope_id, thread_id) DO NOTHING
        RETURNING true INTO made;
        IF made THEN
            DELETE FROM pgmem.thread th WHERE th.scope_id = _lock_thread.scope AND th.thread_id = _lock_thread.thread;
            RETURN;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem._lock_thread(text, text) IS
'Internal to the forget functions: lock the scope row FOR KEY SHARE, then a thread''s store items, then its thread row, FOR UPDATE (the documented lock order), so concurrent writers of the thread finish first or wait for the forget, and a forget_scope waits for it or it for the forget_scope. A scope or thread row not found is inserted first, which waits for a writer inserting it, and deleted again when there was none (0082).';

-- Threads left with no turn and no fact go with the last of them (their names are the caller's
-- data); forget_fact and forget_document left the row add_facts had created (0052). The caller
-- holds the threads FOR UPDATE (pgmem._lock_thread or in key order), so no writer of one is in flight.
CREATE OR REPLACE FUNCTION pgmem._drop_empty_threads(scope text, threads text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer;
BEGIN
    DELETE FROM pgmem.thread th
     WHERE th.scope_id = _drop_empty_threads.scope AND th.thread_id = ANY (_drop_empty_threads.threads)
       AND NOT EXISTS (SELECT 1 FROM pgmem.turn t WHERE t.scope_id = th.scope_id AND t.thread_id = th.thread_id)
       AND NOT EXISTS (SELECT 1 FROM pgmem.fact f WHERE f.scope_id = th.scope_id AND f.thread_id = th.thread_id);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION pgmem._drop_empty_threads(text, text[]) IS
'Internal to the forget functions: delete those of the scope''s threads that hold no turn and no fact (their names are the caller''s data), which the caller has locked FOR UPDATE. Returns the threads deleted.';

-- A turn's rows without the recall-log step: forget_turn is this and then pgmem._forget_logs;
-- apply_retention calls it for each expired turn and then pgmem._forget_logs once for them all,
-- reading the recall log once a scope instead of once a turn.
CREATE OR REPLACE FUNCTION pgmem._forget_turn_rows(scope text, thread text, turn_index integer,
                                                   OUT threads integer, OUT turns integer,
                                                   OUT piece_ids bigint[], OUT fact_ids bigint[])
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    threads := 0;
    -- The thread first (pgmem._lock_thread). A put_turn of this thread holds a key share lock
    -- on it, so this waits for that writer to commit, and the statements below (each with a
    -- fresh snapshot) see its turn: the thread is kept. A writer that starts after this lock
    -- waits for it and then stores its turn after the forget.
    PERFORM pgmem._lock_thread(_forget_turn_rows.scope, _forget_turn_rows.thread);
    -- Then the turn: a concurrent put_turn of the same turn waits, then finds it gone.
    PERFORM 1 FROM pgmem.turn t
      WHERE t.scope_id = _forget_turn_rows.scope AND t.thread_id = _forget_turn_rows.thread
        AND t.turn_index = _forget_turn_rows.turn_index
        FOR UPDATE;
    WITH d AS (
        DELETE FROM pgmem.piece p
         WHERE p.scope_id = _forget_turn_rows.scope AND p.kind = 'memory'
           AND p.thread_id = _forget_turn_rows.thread AND p.turn_index = _forget_turn_rows.turn_index
        RETURNING p.piece_id)
    SELECT coalesce(array_agg(d.piece_id), '{}') INTO piece_ids FROM d;
    WITH d AS (
        DELETE FROM pgmem.fact f
         WHERE f.scope_id = _forget_turn_rows.scope AND f.thread_id = _forget_turn_rows.thread
           AND f.turn_index = _forget_turn_rows.turn_index
        RETURNING f.fact_id)
    SELECT coalesce(array_agg(d.fact_id), '{}') INTO fact_ids FROM d;
    DELETE FROM pgmem.turn t
     WHERE t.scope_id = _forget_turn_rows.scope AND t.thread_id = _forget_turn_rows.thread
       AND t.turn_index = _forget_turn_rows.turn_index;
    GET DIAGNOSTICS turns = ROW_COUNT;
    IF _forget_turn_rows.turn_index = 0 THEN  -- a store item is its thread's turn 0
        PERFORM pgmem._forget_items(_forget_turn_rows.scope, _forget_turn_rows.thread);
    END IF;
    -- A thread left without turns or facts goes too: its name is the caller's data. A fact may
    -- be tied to a turn the scope never held (add_facts made its thread row): the thread goes with
    -- that fact as well, as with forget_fact (0062).
    IF turns > 0 OR cardinality(fact_ids) > 0 THEN
        threads := pgmem._drop_empty_threads(_forget_turn_rows.scope, ARRAY[_forget_turn_rows.thread]);
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._forget_turn_rows(text, text, integer) IS
'Internal to forget_turn and apply_retention: forget one turn''s rows (the thread''s store items and thread row locked first; the turn, its pieces, the facts tied to it, the store item whose turn it is, the thread row when a turn or fact went and nothing of the thread remains), but not the recall-log rows that returned them. Returns the threads and turns deleted and the ids of the pieces and facts deleted.';

CREATE OR REPLACE FUNCTION pgmem.forget_turn(scope text, thread text, turn_index integer)
RETURNS TABLE (threads integer, turns integer, pieces integer, facts integer, documents integer, recall_logs integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    IF scope IS NULL OR thread IS NULL OR turn_index IS NULL THEN
        RAISE EXCEPTION 'forget_turn: scope, thread and turn_index must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM pgmem._forget_read_committed('forget_turn');
    PERFORM set_config('pgmem.scope', pgmem._write_scope(forget_turn.scope), true);
    SELECT * INTO r FROM pgmem._forget_turn_rows(forget_turn.scope, forget_turn.thread, forget_turn.turn_index);
    -- A thread that went with its last turn takes the recalls filtered to it too (a NULL turn
    -- index is the whole thread), as forget_thread does: they hold its name and their messages.
    RETURN QUERY SELECT r.threads, r.turns, cardinality(r.piece_ids), cardinality(r.fact_ids), 0,
                        pgmem._forget_logs(forget_turn.scope, ARRAY[forget_turn.thread, forget_turn.thread],
                                           ARRAY[forget_turn.turn_index, CASE WHEN r.threads > 0 THEN NULL ELSE forget_turn.turn_index END],
                                           r.piece_ids, r.fact_ids);
END
$$;
COMMENT ON FUNCTION pgmem.forget_turn(text, text, integer) IS
'Forget one turn of the transaction''s scope: the turn, its pieces, the facts tied to it (thread and turn_index), the LangGraph store item whose turn it is (turn 0 of an item''s thread), the recall-log rows that returned any of them, and the thread row when no turn or fact of it remains. One row of counts (threads, turns, pieces, facts, documents, recall_logs); zeros when there was nothing to forget. READ COMMITTED only (25000 under REPEATABLE READ or SERIALIZABLE, whose snapshot predates the wait for the writers of what it forgets, 0113).';

-- A thread's rows without the recall-log step: forget_thread is this and then pgmem._forget_logs;
-- expire_items calls it (through pgmem._delete_item_rows) for each expired item and then
-- pgmem._forget_logs once for them all.
CREATE OR REPLACE FUNCTION pgmem._forget_thread_rows(scope text, thread text,
                                                     OUT threads integer, OUT turns integer,
                                                     OUT piece_ids bigint[], OUT fact_ids bigint[])
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- Waits for writers of the thread (see forget_turn): their turns are forgotten too.
    PERFORM pgmem._lock_thread(_forget_thread_rows.scope, _forget_thread_rows.thread);
    PERFORM pgmem._forget_items(_forget_thread_rows.scope, _forget_thread_rows.thread);
    WITH d AS (
        DELETE FROM pgmem.piece p
         WHERE p.scope_id = _forget_thread_rows.scope AND p.kind = 'memory' AND p.thread_id = _forget_thread_rows.thread
        RETURNING p.piece_id)
    SELECT coalesce(array_agg(d.piece_id), '{}') INTO piece_ids FROM d;
    WITH d AS (
        DELETE FROM pgmem.fact f WHERE f.scope_id = _forget_thread_rows.scope AND f.thread_id = _forget_thread_rows.thread
        RETURNING f.fact_id)
    SELECT coalesce(array_agg(d.fact_id), '{}') INTO fact_ids FROM d;
    DELETE FROM pgmem.turn t WHERE t.scope_id = _forget_thread_rows.scope AND t.thread_id = _forget_thread_rows.thread;
    GET DIAGNOSTICS turns = ROW_COUNT;
    DELETE FROM pgmem.thread th WHERE th.scope_id = _forget_thread_rows.scope AND th.thread_id = _forget_thread_rows.thread;
    GET DIAGNOSTICS threads = ROW_COUNT;
END
$$;
COMMENT ON FUNCTION pgmem._forget_thread_rows(text, text) IS
'Internal to forget_thread and expire_items: forget a whole thread''s rows (its store items and thread row locked first; the store items whose turn it holds, its turns and pieces, every fact tied to it, the thread row), but not the recall-log rows that returned them. Returns the threads and turns deleted and the ids of the pieces and facts deleted.';

CREATE OR REPLACE FUNCTION pgmem.forget_thread(scope text, thread text)
RETURNS TABLE (threads integer, turns integer, pieces integer, facts integer, documents integer, recall_logs integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    IF scope IS NULL OR thread IS NULL THEN
        RAISE EXCEPTION 'forget_thread: scope and thread must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM pgmem._forget_read_committed('forget_thread');
    PERFORM set_config('pgmem.scope', pgmem._write_scope(forget_thread.scope), true);
    SELECT * INTO r FROM pgmem._forget_thread_rows(forget_thread.scope, forget_thread.thread);
    RETURN QUERY SELECT r.threads, r.turns, cardinality(r.piece_ids), cardinality(r.fact_ids), 0,
                        pgmem._forget_logs(forget_thread.scope, ARRAY[forget_thread.thread], ARRAY[NULL::integer],
                                           r.piece_ids, r.fact_ids);
END
$$;
COMMENT ON FUNCTION pgmem.forget_thread(text, text) IS
'Forget a whole thread of the transaction''s scope: its turns and pieces, every fact tied to the thread, the LangGraph store items whose turn it holds, the thread row, and the recall-log rows that returned any of them or were filtered to the thread. One row of counts; zeros when there was nothing to forget. READ COMMITTED only (25000 under REPEATABLE READ or SERIALIZABLE, whose snapshot predates the wait for the writers of what it forgets, 0113).';

CREATE OR REPLACE FUNCTION pgmem.forget_fact(scope text, fact_id bigint)
RETURNS TABLE (threads integer, turns integer, pieces integer, facts integer, documents integer, recall_logs integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer;
    n_threads integer := 0;
    fact_thread text;
BEGIN
    IF scope IS NULL OR fact_id IS NULL THEN
        RAISE EXCEPTION 'forget_fact: scope and fact_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM pgmem._forget_read_committed('forget_fact');
    PERFORM set_config('pgmem.scope', pgmem._write_scope(forget_fact.scope), true);
    -- A fact tied to a thread: the thread first, as every forget takes it (the lock order), so a
    -- forget of its turn (apply_retention) either finishes first or waits for this one.
    SELECT f.thread_id INTO fact_thread FROM pgmem.fact f
     WHERE f.scope_id = forget_fact.scope AND f.fact_id = forget_fact.fact_id;
    IF fact_thread IS NOT NULL THEN
        PERFORM pgmem._lock_thread(forget_fact.scope, fact_thread);
    ELSE
        -- A fact tied to no thread (or none found): the scope row all the same (0083). Deleted
        -- with no scope row held, its fact was held while forget_scope, having locked the scope
        -- row, waited for it, and a write into the scope after this in the transaction waited
        -- for forget_scope: a deadlock (tests/test_forget_fact_lock_order.py).
        PERFORM pgmem._lock_scope(forget_fact.scope);
    END IF;
    DELETE FROM pgmem.fact f WHERE f.scope_id = forget_fact.scope AND f.fact_id = forget_fact.fact_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    -- Its thread when nothing of it remains (0052), as forget_turn: add_facts created the row.
    IF n > 0 AND fact_thread IS NOT NULL THEN
        n_threads := pgmem._drop_empty_threads(forget_fact.scope, ARRAY[fact_thread]);
    END IF;
    -- The log rows naming the fact go even when the fact is gone already (0040): a log written
    -- after its forget kept the fact's body, and a second forget_fact skipped them.
    RETURN QUERY SELECT n_threads, 0, 0, n, 0, pgmem._forget_logs(forget_fact.scope, fact_ids => ARRAY[forget_fact.fact_id]);
END
$$;
COMMENT ON FUNCTION pgmem.forget_fact(text, bigint) IS
'Forget one fact of the transaction''s scope (by fact_id, as fact_recall returns it), its thread row when no turn or fact of the thread remains, and the fact-plane recall-log rows that returned it. One row of counts; zeros when there was no such fact. READ COMMITTED only (25000 under REPEATABLE READ or SERIALIZABLE, whose snapshot predates the wait for the writers of what it forgets, 0113).';

-- A fact names the document it is about as its section: the document id, or id#anchor. A
-- document id may hold '#' itself, so 'a#b#c' is about document 'a#b' when the scope has it,
-- else about 'a': the longest id of the scope's documents that the section names. A section
-- that names no document of the scope is about every id it names, so forgetting any of them
-- takes it (facts may name a document before it is stored).
-- The empty name is no document's id (the table's check): no fact is about it (0086). As a
-- prefix it named every section starting with '#', and as an id every empty section, so
-- forget_document(scope, '') through SQL deleted those facts
-- (tests/test_forget_document_names.py).
-- A name the scope holds no document of gives way to a shorter id the scope holds (0088): with
-- 'a' stored and 'a#b' not, forget_document(scope, 'a#b') deleted the facts 'a#b' and 'a#b#c',
-- which are a's (its anchors), and left a stored without them. Only a longer id was looked for.
CREATE OR REPLACE FUNCTION pgmem._document_fact(scope text, section text, document_id text)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT document_id <> '' AND (section = document_id OR left(section, length(document_id) + 1) = document_id || '#')
       AND NOT EXISTS (
           -- Another document of the scope that the section names and that takes the fact: a
           -- longer id (one holding '#'), or any when the scope holds no document_id. The ids a
           -- section names are the section and each of its beginnings before a '#', each looked
           -- up by the document's key.
           SELECT 1 FROM generate_series(1, cardinality(string_to_array(_document_fact.section, '#'))) AS g(i)
             JOIN pgmem.document d
               ON d.scope_id = _document_fact.scope
              AND d.document_id = array_to_string((string_to_array(_document_fact.section, '#'))[1:g.i], '#')
            WHERE d.document_id <> _document_fact.document_id
              AND (length(d.document_id) > length(_document_fact.document_id)
                   OR NOT EXISTS (SELECT 1 FROM pgmem.document o
                                   WHERE o.scope_id = _document_fact.scope
                                     AND o.document_id = _document_fact.document_id)))
$$;
COMMENT ON FUNCTION pgmem._document_fact(text, text, text) IS
'Internal to forget_document: whether a fact of the scope whose section is section is about document_id: section is the id, or id#anchor, and no other document of the scope that section names takes it (the longest id of the scope''s documents that section names does: a longer one holding ''#'', or, when the scope holds no document_id, a shorter one, 0088); a section naming no document of the scope is about every id it names; never for the empty document_id, which names no document.';

-- The scope row, then the document row FOR UPDATE (the lock order), for forget_document and
-- remove_document: a put_document replacing it finishes first or waits, instead of each holding
-- what the other deletes. The scope row as _lock_thread holds it (0054). A row a put_document
-- creating the document (or its scope) has inserted, not yet committed, is not seen by a
-- SELECT ... FOR UPDATE: the forget locked nothing and returned, holding the scope's recall-log
-- lock; once the writer had committed, a second forget locked the row and waited for that lock,
-- while the first forget's transaction, putting the document again, waited for the second's
-- row: a deadlock (0083, tests/test_forget_document_lock_order.py). Each row is therefore
-- inserted when it is not found (ON CONFLICT waits for the other insert) and, when this
-- transaction made it (there was none), deleted at once, as _lock_thread does (0082): its index
-- entry makes a writer of the document wait for this transaction. (The row is never seen by
-- another transaction, so its title, body and hash are empty. An id the table or its index
-- cannot hold names no document: no wait.) Split out of forget_document in 0097, so that
-- remove_document knows, under the same locks, whether there is a document to remove.
CREATE OR REPLACE FUNCTION pgmem._lock_document(scope text, document_id text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    made boolean;
BEGIN
    IF NOT pgmem._lock_scope(_lock_document.scope) THEN
        RETURN false;  -- no scope: no document of it
    END IF;
    LOOP
        PERFORM 1 FROM pgmem.document d
          WHERE d.scope_id = _lock_document.scope AND d.document_id = _lock_document.document_id FOR UPDATE;
        IF FOUND THEN
            RETURN true;
        END IF;
        IF coalesce(char_length(_lock_document.document_id) NOT BETWEEN 1 AND 1000, true) THEN
            RETURN false;
        END IF;
        made := NULL;
        BEGIN
            INSERT INTO pgmem.document AS d (scope_id, document_id, title, body, content_hash)
            VALUES (_lock_document.scope, _lock_document.document_id, '', '', '\x'::bytea)
            ON CONFLICT (scope_id, document_id) DO NOTHING
            RETURNING true INTO made;
        EXCEPTION WHEN program_limit_exceeded THEN  -- 54000: too long for the key's index
            RETURN false;
        END;
        IF made THEN
            DELETE FROM pgmem.document d
             WHERE d.scope_id = _lock_document.scope AND d.document_id = _lock_document.document_id;
            RETURN false;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem._lock_document(text, text) IS
'Internal to forget_document and remove_document (0097): hold the scope row FOR KEY SHARE and the document row FOR UPDATE and return true; when the scope has no such document, wait for a writer inserting it (insert the row, delete it again: 0083) and return false.';

CREATE OR REPLACE FUNCTION pgmem.forget_document(scope text, document_id text)
RETURNS TABLE (threads integer, turns integer, pieces integer, facts integer, documents integer, recall_logs integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    piece_ids bigint[];
    fact_ids bigint[];
    fact_threads text[];
    one_thread text;
    n_threads integer;
    n_docs integer;
    old_title text;
BEGIN
    IF scope IS NULL OR document_id IS NULL THEN
        RAISE EXCEPTION 'forget_document: scope and document_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM pgmem._forget_read_committed('forget_document');
    PERFORM set_config('pgmem.scope', pgmem._write_scope(forget_document.scope), true);
    -- The scope row, then the document row (the lock order: pgmem._lock_document).
    PERFORM pgmem._lock_document(forget_document.scope, forget_document.document_id);
    -- Then the threads of the facts about it (0052), their store items first, each sorted, as
    -- forget_fact and apply_retention take them: a forget of one of those facts' turns
    -- (retention) finishes first or waits. Deleting the facts first, this held one fact while it
    -- waited for another, which retention had deleted and held while it waited for the first.
    fact_threads := ARRAY(SELECT DISTINCT f.thread_id FROM pgmem.fact f
                           WHERE f.scope_id = forget_document.scope AND f.thread_id IS NOT NULL
                             AND pgmem._document_fact(forget_document.scope, f.section, forget_document.document_id)
                           ORDER BY 1);
    -- Items by key, bytewise, as every writer of several items locks them (0070).
    PERFORM 1 FROM pgmem.store_item i WHERE i.scope_id = forget_document.scope AND i.thread_id = ANY (fact_threads)
      ORDER BY i.item_key COLLATE "C" FOR UPDATE;
    -- The threads one at a time, in key order, each by pgmem._lock_thread (0119): a row not found
    -- is inserted, which waits for a writer inserting it, and deleted again at once. The set was
    -- locked FOR UPDATE at once, which skipped a thread a forget_thread had deleted meanwhile: an
    -- add_facts created it again with a fact about the document, another add_facts held it and
    -- waited for a later thread this held, and this, having deleted that fact, waited for it at
    -- the thread's delete (40P01).
    FOREACH one_thread IN ARRAY fact_threads LOOP
        PERFORM pgmem._lock_thread(forget_document.scope, one_thread);
    END LOOP;
    -- The units by their chunks' ids: one scan of piece_chunk_idx, whatever the statistics
    -- (0058). A join of piece and chunk, planned before autovacuum had analyzed a document just
    -- written, read the scope's document units once a chunk (piece_scope_kind_idx, the inner
    -- side of a nested loop), or on statistics of emptied tables the chunks once a unit: 8,000
    -- units, 4 a chunk, took 33.6 s against 0.17 s (docs/bench/doc-removal-0058.txt).
    WITH d AS (
        DELETE FROM pgmem.piece p
         WHERE p.scope_id = forget_document.scope
           AND p.chunk_id = ANY (ARRAY(SELECT ch.chunk_id FROM pgmem.chunk ch
                                        WHERE ch.scope_id = forget_document.scope
                                          AND ch.document_id = forget_document.document_id))
        RETURNING p.piece_id)
    SELECT coalesce(array_agg(d.piece_id), '{}') INTO piece_ids FROM d;
    -- Facts about a document name it as their section: the id itself, or id#anchor
    -- (pgmem._document_fact). Those of a thread this does not hold (one a writer committed since
    -- the threads were read) are that writer's, landed after the forget: deleted, they left their
    -- thread row without a fact (rt78).
    WITH d AS (
        DELETE FROM pgmem.fact f
         WHERE f.scope_id = forget_document.scope
           AND pgmem._document_fact(forget_document.scope, f.section, forget_document.document_id)
           AND (f.thread_id IS NULL OR f.thread_id = ANY (fact_threads))
        RETURNING f.fact_id)
    SELECT coalesce(array_agg(d.fact_id), '{}') INTO fact_ids FROM d;
    n_threads := pgmem._drop_empty_threads(forget_document.scope, fact_threads);
    DELETE FROM pgmem.document d WHERE d.scope_id = forget_document.scope AND d.document_id = forget_document.document_id
    RETURNING d.title INTO old_title;
    GET DIAGNOSTICS n_docs = ROW_COUNT;
    -- The links of the scope that named it resolve as gone, or to another document of its slug
    -- (0115; they kept naming it until the linking document was added again).
    IF n_docs > 0 THEN
        PERFORM pgmem._relink_documents(forget_document.scope, pgmem._link_slug(forget_document.document_id), old_title);
    END IF;
    RETURN QUERY SELECT n_threads, 0, cardinality(piece_ids), cardinality(fact_ids), n_docs,
                        pgmem._forget_logs(forget_document.scope, piece_ids => piece_ids, fact_ids => fact_ids,
                                           document_id => forget_document.document_id);
END
$$;
COMMENT ON FUNCTION pgmem.forget_document(text, text) IS
'Forget one document of the transaction''s scope: the document, its chunks and unit pieces, the facts whose section is the document id (or id#anchor, unless another document of the scope that the section names takes them: a longer id holding ''#'', or, when the scope holds no such document, a shorter one: pgmem._document_fact), the thread rows of those facts where no turn or fact of the thread remains, and the recall-log rows that returned any of them. One row of counts; documents is 0 when the scope has no such document, and the facts about the id are forgotten all the same (facts may name a document before it is stored); zeros when nothing was there. pgmem.remove_document calls it for a stored document only. READ COMMITTED only (25000 under REPEATABLE READ or SERIALIZABLE, whose snapshot predates the wait for the writers of what it forgets, 0113).';

CREATE OR REPLACE FUNCTION pgmem.forget_scope(scope text)
RETURNS TABLE (threads integer, turns integer, pieces integer, facts integer, documents integer, recall_logs integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n_threads integer;
    n_turns integer;
    n_pieces integer;
    n_facts integer;
    n_docs integer;
    n_logs integer;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'forget_scope: scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM pgmem._forget_read_committed('forget_scope');
    PERFORM set_config('pgmem.scope', pgmem._write_scope(forget_scope.scope), true);
    -- Lock the scope row: a concurrent write of this scope waits, then starts the scope afresh.
    -- A row another transaction is inserting (a writer recreating the scope after an earlier
    -- forget) is waited for first, by an insert of the row (ON CONFLICT waits for that insert),
    -- as delete_item does (0067): SELECT ... FOR UPDATE does not see an uncommitted row, so it
    -- locked nothing, the writer went on taking the scope's item, thread and turn locks, and this
    -- met them halfway, after the recall-log lock (0081; tests/test_forget_scope_lock_order.py
    -- replays it, and its stress of store batches beside forget_scope met a deadlock in 4 s). The
    -- row inserted here, when there was none, is this transaction's until it is deleted below; a
    -- row another forget deleted while this waited for it is inserted again (the lock then found
    -- nothing, and two forgets of the scope at once deadlocked the same way). (A name the scope
    -- table cannot hold names no scope: nothing to wait for.)
    IF char_length(forget_scope.scope) BETWEEN 1 AND 200 THEN
        LOOP
            INSERT INTO pgmem.scope AS s (scope_id) VALUES (forget_scope.scope) ON CONFLICT (scope_id) DO NOTHING;
            PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = forget_scope.scope FOR UPDATE;
            EXIT WHEN FOUND;
        END LOOP;
    END IF;
    DELETE FROM pgmem.piece p WHERE p.scope_id = forget_scope.scope;
    GET DIAGNOSTICS n_pieces = ROW_COUNT;
    DELETE FROM pgmem.fact f WHERE f.scope_id = forget_scope.scope;
    GET DIAGNOSTICS n_facts = ROW_COUNT;
    DELETE FROM pgmem.turn t WHERE t.scope_id = forget_scope.scope;
    GET DIAGNOSTICS n_turns = ROW_COUNT;
    DELETE FROM pgmem.thread th WHERE th.scope_id = forget_scope.scope;
    GET DIAGNOSTICS n_threads = ROW_COUNT;
    DELETE FROM pgmem.document d WHERE d.scope_id = forget_scope.scope;  -- chunks follow (cascade)
    GET DIAGNOSTICS n_docs = ROW_COUNT;
    PERFORM pg_advisory_xact_lock(pgmem._recall_log_lock(forget_scope.scope));
    DELETE FROM pgmem.recall_log l WHERE l.scope_id = forget_scope.scope;
    GET DIAGNOSTICS n_logs = ROW_COUNT;
    -- The scope row last (its model binding and number); the tables keyed on it with a
    -- cascading foreign key (store_item, and any added later) go with it (store_tombstone has
    -- none: below).
    DELETE FROM pgmem.scope s WHERE s.scope_id = forget_scope.scope;
    -- The LangGraph store's directories list this scope's namespace (no scope_id column; its
    -- delete policy allows this scope's entries, in every directory).
    DELETE FROM pgmem.store_namespace n WHERE n.scope_name = forget_scope.scope;
    -- Remembered 30 days (its hash), so that an import of older copies of its store items does
    -- not write them again (put_item's unless_newer_than, 0051), in place of its deleted keys'
    -- records; older records go, those another transaction holds being skipped.
    DELETE FROM pgmem.store_tombstone t WHERE (t.scope_id, t.key_hash) IN (
        SELECT o.scope_id, o.key_hash FROM pgmem.store_tombstone o
         WHERE o.scope_id = forget_scope.scope FOR UPDATE SKIP LOCKED);
    INSERT INTO pgmem.forgotten_scope AS f (scope_hash, forgotten_at)
    VALUES (sha256(convert_to(forget_scope.scope, 'UTF8')), now())
    ON CONFLICT (scope_hash) DO UPDATE SET forgotten_at = excluded.forgotten_at;
    DELETE FROM pgmem.forgotten_scope f WHERE f.scope_hash IN (
        SELECT o.scope_hash FROM pgmem.forgotten_scope o
         WHERE o.forgotten_at < now() - interval '30 days' FOR UPDATE SKIP LOCKED);
    RETURN QUERY SELECT n_threads, n_turns, n_pieces, n_facts, n_docs, n_logs;
END
$$;
COMMENT ON FUNCTION pgmem.forget_scope(text) IS
'Forget everything of the transaction''s scope: pieces, facts, turns, threads, documents and their chunks, the recall log, the scope row itself (its model binding) with the rows keyed on it (LangGraph store items), and its entry in the store''s namespace directory; the scope is remembered as forgotten 30 days (pgmem.forgotten_scope, its sha256), so an import''s conditional put_item of an older item does not write its namespace again. One row of counts; zeros when the scope holds nothing. Its per-scope ANN index, if any, is left empty until index maintenance drops it. READ COMMITTED only (25000 under REPEATABLE READ or SERIALIZABLE, whose snapshot predates the wait for the writers of what it forgets, 0113).';
