-- The LangGraph store's functions (pgmem.integrations.langgraph.PgmemStore). Re-runnable.
-- Tables: sql/incremental/003_store.sql, 005_store_directory.sql, 007_store_ttl_vectors.sql,
-- 016_store_vector_text_hash.sql. put_item and delete_item are
-- SECURITY DEFINER (900_grants.sql): pgmem_app has no INSERT, UPDATE or DELETE on any table.

-- The namespace directory's guard, the twin of pgmem.check_scope: the directory a function is
-- asked for must be the transaction's pgmem.store_directory (set_config(..., true), the function
-- form of SET LOCAL). Row-level security (the policies at the end of this file) enforces it
-- underneath; this makes the mistake loud.
CREATE OR REPLACE FUNCTION pgmem.check_store_directory(directory text, writing boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    current text := nullif(current_setting('pgmem.store_directory', true), '');
    what text := CASE WHEN coalesce(writing, false) THEN 'writing into' ELSE 'reading' END;
    verb text := CASE WHEN coalesce(writing, false) THEN 'write into' ELSE 'read' END;
BEGIN
    IF directory IS NULL THEN
        RAISE EXCEPTION 'store directory must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF current IS NULL THEN
        IF NOT coalesce(writing, false) AND EXISTS (
            SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = session_user AND (r.rolsuper OR r.rolbypassrls)) THEN
            RETURN directory;
        END IF;
        RAISE EXCEPTION 'no store directory is set for this transaction (% directory %)', what, directory
            USING ERRCODE = '42501',
                  HINT = 'Run SET LOCAL pgmem.store_directory = ''<directory>'' in the same transaction first (PgmemStore does it with its directory).';
    END IF;
    IF current <> directory THEN
        RAISE EXCEPTION 'cannot % store directory %: this transaction''s directory is %', verb, directory, current
            USING ERRCODE = '42501',
                  HINT = 'A transaction reads one store directory: the one in pgmem.store_directory.';
    END IF;
    RETURN directory;
END
$$;
COMMENT ON FUNCTION pgmem.check_store_directory(text, boolean) IS
'Returns directory when it is the transaction''s pgmem.store_directory (or, for a read, when none is set in a superuser or BYPASSRLS session); raises 42501 otherwise, with a hint naming SET LOCAL pgmem.store_directory. store_namespaces and put_item call it; row-level security on pgmem.store_namespace stays the enforcement underneath.';

CREATE OR REPLACE FUNCTION pgmem.store_scope(namespace text[])
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT pg_catalog.string_agg(pg_catalog.replace(pg_catalog.replace(u.label, E'\\', E'\\\\'), '/', E'\\/'), '/' ORDER BY u.i)
      FROM pg_catalog.unnest(namespace) WITH ORDINALITY AS u(label, i)
$$;
COMMENT ON FUNCTION pgmem.store_scope(text[]) IS
'The scope of a LangGraph namespace: its labels joined by /, each label''s \ and / escaped as \\ and \/ (so two namespaces never share a scope). ("users", "a/b") -> users/a\/b. A scope name is at most 200 characters, so a longer namespace cannot be stored.';

-- The thread an indexed item's turn goes into (0092). A scope is any pgmem scope: an application
-- may hold a conversation (put_turn, add_facts) named as the store names an item's thread
-- (item:<key>) in the scope a namespace maps to. put_item attached the item to it: the item's turn
-- replaced the conversation's turn 0, a search for the conversation's words returned the item,
-- and a delete or expiry of the item forgot the whole conversation. The thread is claimed here
-- instead, by inserting its row (a conversation's writer inserting it at the same time is waited
-- for; one that comes later finds it the item's): a thread whose row exists and that is not this
-- item's is someone else's, and the item takes item-sha256:<hex of the key> (then :1, :2, ...)
-- instead. A thread another item holds is refused (23505, one line naming it), as before, but
-- never as the raw unique violation of store_item's constraint. Called under the item row's lock
-- (the lock order: the item row, then its thread).
CREATE OR REPLACE FUNCTION pgmem._claim_item_thread(scope text, item_key text, thread text, own text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    candidate text := thread;
    holder text;
    n integer := 0;
BEGIN
    IF thread IS NULL OR thread = own THEN
        RETURN thread;
    END IF;
    LOOP
        IF candidate = own THEN
            RETURN candidate;  -- the item's own thread (given it by an earlier put)
        END IF;
        SELECT i.item_key INTO holder FROM pgmem.store_item i
         WHERE i.scope_id = scope AND i.thread_id = candidate AND i.item_key <> item_key LIMIT 1;
        IF holder IS NOT NULL AND n = 0 THEN
            RAISE EXCEPTION 'put_item: thread % of scope % is item %''s; an item''s thread is its own', thread, scope, holder
                USING ERRCODE = '23505',
                      HINT = 'Name another thread, or none (NULL: a plain key-value item); PgmemStore names it item:<key>.';
        END IF;
        IF holder IS NULL THEN
            INSERT INTO pgmem.thread AS th (scope_id, thread_id) VALUES (scope, candidate)
            ON CONFLICT (scope_id, thread_id) DO NOTHING;
            IF FOUND THEN
                RETURN candidate;
            END IF;
            -- Its row is there: a conversation's, or an item's committed while the insert waited.
            IF n = 0 AND EXISTS (SELECT 1 FROM pgmem.store_item i
                                  WHERE i.scope_id = scope AND i.thread_id = candidate AND i.item_key <> item_key) THEN
                CONTINUE;  -- refused above, naming the item
            END IF;
        END IF;
        n := n + 1;
        IF n > 100 THEN
            RAISE EXCEPTION 'put_item: no free thread for item % of scope %: % and 100 names after it are taken', item_key, scope, thread
                USING ERRCODE = '23505';
        END IF;
        candidate := 'item-sha256:' || encode(sha256(convert_to(item_key, 'UTF8')), 'hex')
                     || CASE WHEN n > 1 THEN ':' || (n - 1) ELSE '' END;
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem._claim_item_thread(text, text, text, text) IS
'Internal to put_item (0092): the thread an indexed item''s turn goes into, claimed by inserting its row, under the item row''s lock. thread when it is the item''s own (own) or free; when a conversation of the scope (put_turn, add_facts) holds it, item-sha256:<hex of the key> (then :1, :2, ...), so an item never joins or later forgets a conversation; 23505 (one line naming the item) when another item holds thread.';

-- 0038 added keep_vectors.
DROP FUNCTION IF EXISTS pgmem.put_item(text, text[], text, jsonb, text, double precision, text, text[], bytea[]);
-- Before unless_newer_than and written (0045): dropped, as its arguments and result changed.
DROP FUNCTION IF EXISTS pgmem.put_item(text, text[], text, jsonb, text, double precision, text, text[], bytea[], boolean);
CREATE OR REPLACE FUNCTION pgmem.put_item(
    scope text,
    namespace text[],
    item_key text,
    value jsonb,
    thread text DEFAULT NULL,
    ttl_minutes double precision DEFAULT NULL,
    model_id text DEFAULT NULL,
    field_paths text[] DEFAULT NULL,
    text_hashes bytea[] DEFAULT NULL,
    keep_vectors boolean DEFAULT NULL,
    unless_newer_than timestamptz DEFAULT NULL
) RETURNS TABLE (created_at timestamptz, updated_at timestamptz, previous_thread text, vectors_kept boolean,
                 written boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    old_thread text;
    old record;
    kept boolean := false;
    new_scope boolean;
    new_thread text;
    holder text;
    r record;
    ns_made boolean := false;
BEGIN
    IF scope IS NULL OR namespace IS NULL OR item_key IS NULL OR value IS NULL THEN
        RAISE EXCEPTION 'put_item: scope, namespace, item_key and value must not be NULL' USING ERRCODE = '22004',
            HINT = 'Deleting an item is pgmem.delete_item.';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(put_item.scope), true);
    IF nullif(current_setting('pgmem.store_directory', true), '') IS NULL THEN
        RAISE EXCEPTION 'put_item: no store directory is set for this transaction' USING ERRCODE = '42501',
            HINT = 'Run SET LOCAL pgmem.store_directory = ''<directory>'' in the same transaction (PgmemStore does it with its directory).';
    END IF;
    -- A namespace is a list of labels as PgmemStore gives it: store_scope skips a NULL label and
    -- flattens a matrix, so ('a', NULL, 'b') or {{a,b}} would pass as the scope of ('a', 'b') and
    -- be listed as a namespace no store can read back (until 0047).
    IF pgmem._not_a_list(namespace) OR array_position(namespace, NULL) IS NOT NULL
       OR '' = ANY (namespace) THEN
        RAISE EXCEPTION 'put_item: namespace must be a one-dimensional list of non-empty labels, got %', left(namespace::text, 200)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(namespace) = 0 OR pgmem.store_scope(namespace) IS DISTINCT FROM put_item.scope THEN
        RAISE EXCEPTION 'put_item: namespace % belongs to scope %, not %', namespace, pgmem.store_scope(namespace), put_item.scope
            USING ERRCODE = '22023', HINT = 'The scope of a namespace is pgmem.store_scope(namespace).';
    END IF;
    -- A namespace of one blank label maps to a blank scope (0091; PgmemStore refuses it first).
    PERFORM pgmem._check_scope_name(put_item.scope, 'put_item');
    IF jsonb_typeof(value) <> 'object' THEN
        RAISE EXCEPTION 'put_item: value must be a JSON object, got %', jsonb_typeof(value) USING ERRCODE = '22023';
    END IF;
    -- What PgmemStore refuses before calling (check_key, check_value) and reads items back by
    -- (0091): a value nested deeper than json.loads goes failed every read of the namespace, and
    -- so does a number Python cannot read back (pgmem._unreadable_number, 0093). The key's length
    -- is the table's check, said as one line (not a 23514); so is the thread's, not blank.
    IF char_length(item_key) > 1000 THEN
        RAISE EXCEPTION 'put_item: key is % characters; at most 1000', char_length(item_key) USING ERRCODE = '22023';
    END IF;
    -- check_value counts every value, a number or string too: the object is level 1, anything
    -- at level 65 (64 here, the object being 0) is too deep.
    IF jsonb_path_exists(value, 'strict $.**{64 to last}') THEN
        RAISE EXCEPTION 'put_item: value nests deeper than 64 levels' USING ERRCODE = '22023';
    END IF;
    IF pgmem._unreadable_number(value) THEN
        RAISE EXCEPTION 'put_item: value holds a number Python cannot read back (an integer of more than 4,300 digits, or a fraction beyond the range of a double)'
            USING ERRCODE = '22023';
    END IF;
    IF char_length(thread) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'put_item: thread must be 1 to 200 characters, got %', char_length(thread)
            USING ERRCODE = '22023', HINT = 'PgmemStore names an indexed item''s thread item:<key>; NULL for an item without a turn.';
    ELSIF pgmem._blank(thread) THEN
        RAISE EXCEPTION 'put_item: thread must be a non-empty string, got only whitespace'
            USING ERRCODE = '22023', HINT = 'PgmemStore names an indexed item''s thread item:<key>; NULL for an item without a turn.';
    END IF;
    IF ttl_minutes IS NOT NULL AND NOT (ttl_minutes > 0 AND ttl_minutes <= 52596000) THEN  -- NaN fails both
        RAISE EXCEPTION 'put_item: ttl must be a number of minutes above 0 and at most 52596000 (100 years), got %', ttl_minutes
            USING ERRCODE = '22023', HINT = 'NULL: the item never expires.';
    END IF;
    -- A namespace is searched one way: through turns and pieces (pgmem's embedders) or through
    -- field vectors (a store with its own embed, pgmem.put_item_vectors). Mixing would hide items.
    IF thread IS NOT NULL AND EXISTS (
        SELECT 1 FROM pgmem.store_vector v WHERE v.scope_id = put_item.scope AND v.item_key <> put_item.item_key) THEN
        RAISE EXCEPTION 'put_item: namespace % is indexed with field vectors of model %, not with pgmem''s pieces',
            namespace, (SELECT v.model_id FROM pgmem.store_vector v WHERE v.scope_id = put_item.scope LIMIT 1)
            USING ERRCODE = '22000', HINT = 'Open the store with the index config (embed) the namespace was written with.';
    END IF;
    -- The scope row first (the lock order, docs/architecture.md), held in KEY SHARE mode as the
    -- item's foreign key would hold it; a scope forgotten meanwhile is created again, so the
    -- item lands after the forget instead of failing on the foreign key.
    LOOP
        INSERT INTO pgmem.scope AS s (scope_id) VALUES (put_item.scope) ON CONFLICT (scope_id) DO NOTHING;
        new_scope := FOUND;
        PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = put_item.scope FOR KEY SHARE;
        EXIT WHEN FOUND;
    END LOOP;
    -- Then the scope's store directory lock, shared (0039), held to the commit: a delete of the
    -- namespace's last committed item leaves its directory entry while this put is in flight
    -- (pgmem._drop_empty_namespace), and one that removed it first is waited for, so the entry
    -- is written again below.
    PERFORM pg_advisory_xact_lock_shared(pgmem._store_directory_lock(put_item.scope));
    -- Then the namespace's directory entry, before the item row (0093). Written last, as until
    -- 0092, two first puts into a namespace without an entry deadlocked: one inserted the entry
    -- and went on to a key the other had inserted, while the other waited for that entry (the
    -- concurrent store test, CI at ef5b205; replayed in tests/test_langgraph_directory.py). Here
    -- the entry is the first thing a put may wait for, while it holds no item of the scope. A put
    -- that then writes nothing removes the entry it made.
    INSERT INTO pgmem.store_namespace AS n (directory, namespace, scope_name)
    VALUES (pgmem.check_store_directory(current_setting('pgmem.store_directory', true), true), put_item.namespace, put_item.scope)
    ON CONFLICT (directory, namespace) DO NOTHING
    RETURNING true INTO ns_made;
    -- A conditional put (an import) then takes the key's lock, as delete_item does before it
    -- deletes: a delete of a key the import is inserting right now would not see the new row,
    -- and the import would not see the delete's tombstone (0051).
    IF unless_newer_than IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(pgmem._store_key_lock(put_item.scope, put_item.item_key));
    END IF;
    -- Then the item row: inserted, or, when it exists, locked and replaced. Two puts of a new
    -- key both try the insert; the second does nothing (any unique index: the key's or the
    -- thread's) and locks the first's row once it commits, so neither fails on a unique index.
    LOOP
        INSERT INTO pgmem.store_item AS i (scope_id, item_key, namespace, value, thread_id, ttl_minutes, expires_at)
        VALUES (put_item.scope, put_item.item_key, put_item.namespace, put_item.value, put_item.thread,
                put_item.ttl_minutes, pg_catalog.now() + pg_catalog.make_interval(secs => put_item.ttl_minutes * 60))
        ON CONFLICT DO NOTHING
        RETURNING i.created_at, i.updated_at INTO r;
        -- A conditional put of a key deleted after its time (pgmem.store_tombstone), or into a
        -- scope forgotten after it (pgmem.forgotten_scope), writes nothing: an import does not
        -- bring back what the application deleted since the source's copy was written (0051).
        -- Read after the insert, which waited for a forget of the item in flight (a forget of its
        -- thread holds the row, not the key's lock), and after the scope row, which waited for a
        -- forget_scope in flight, so their records are seen; the row just inserted goes again,
        -- and so does a scope row this put created (a key deleted before its namespace stored
        -- anything leaves none, as delete_item creates none). An item stored now in a forgotten
        -- scope was written after the forget, and is kept below.
        IF FOUND AND unless_newer_than IS NOT NULL AND (
            EXISTS (SELECT 1 FROM pgmem.store_tombstone t
                     WHERE t.scope_id = put_item.scope AND t.key_hash = sha256(convert_to(put_item.item_key, 'UTF8'))
                       AND t.deleted_at > unless_newer_than)
            OR EXISTS (SELECT 1 FROM pgmem.forgotten_scope f
                        WHERE f.scope_hash = sha256(convert_to(put_item.scope, 'UTF8'))
                          AND f.forgotten_at > unless_newer_than)) THEN
            DELETE FROM pgmem.store_item i WHERE i.scope_id = put_item.scope AND i.item_key = put_item.item_key;
            IF ns_made THEN
                DELETE FROM pgmem.store_namespace n
                 WHERE n.directory = current_setting('pgmem.store_directory', true) AND n.namespace = put_item.namespace;
            END IF;
            IF new_scope THEN
                DELETE FROM pgmem.scope s WHERE s.scope_id = put_item.scope;
            END IF;
            RETURN QUERY SELECT NULL::timestamptz, NULL::timestamptz, NULL::text, false, false;
            RETURN;
        END IF;
        IF FOUND THEN
            -- A new item's thread, claimed under the row just inserted (0092): a conversation's
            -- of that name is left to it, and the item takes another.
            new_thread := pgmem._claim_item_thread(put_item.scope, put_item.item_key, put_item.thread, NULL);
            IF new_thread IS DISTINCT FROM put_item.thread THEN
                UPDATE pgmem.store_item i SET thread_id = new_thread
                 WHERE i.scope_id = put_item.scope AND i.item_key = put_item.item_key;
            END IF;
            EXIT;
        END IF;
        SELECT i.thread_id, i.created_at, i.updated_at, i.expires_at INTO old FROM pgmem.store_item i
         WHERE i.scope_id = put_item.scope AND i.item_key = put_item.item_key FOR UPDATE;
        IF FOUND THEN
            -- A conditional put (an import): an item written after unless_newer_than, and not
            -- expired, is kept as it is. Decided under the item's lock, so a put committed
            -- after the caller read the item is never overwritten by an older value. Expired by
            -- the clock, as the store's reads judge it (0074): by the transaction's start, an
            -- item that expired since, which the transaction's own reads no longer found, was
            -- kept, and the import's copy was lost with it.
            IF old.updated_at > unless_newer_than AND NOT coalesce(old.expires_at <= pg_catalog.clock_timestamp(), false) THEN
                RETURN QUERY SELECT old.created_at, old.updated_at, old.thread_id, false, false;
                RETURN;
            END IF;
            -- An expiry is a delete at expires_at (0092): an item that expired after the copy was
            -- written is not brought back by it, swept or not (expire_items remembers the key at
            -- that time, pgmem.store_tombstone); it stays expired, as a deleted key stays deleted.
            IF unless_newer_than IS NOT NULL AND old.expires_at <= pg_catalog.clock_timestamp()
               AND old.expires_at > unless_newer_than THEN
                IF ns_made THEN
                    DELETE FROM pgmem.store_namespace n
                     WHERE n.directory = current_setting('pgmem.store_directory', true) AND n.namespace = put_item.namespace;
                END IF;
                RETURN QUERY SELECT NULL::timestamptz, NULL::timestamptz, NULL::text, false, false;
                RETURN;
            END IF;
            old_thread := old.thread_id;
            -- Its thread: the one it has, or one claimed (pgmem._claim_item_thread, 0092), so the
            -- update never meets store_item's unique thread as a raw violation.
            new_thread := pgmem._claim_item_thread(put_item.scope, put_item.item_key, put_item.thread, old_thread);
            -- An expired item put again is a new item (PostgresStore: the sweep had removed it),
            -- expired by the clock as above.
            UPDATE pgmem.store_item i SET value = put_item.value, thread_id = new_thread, updated_at = pg_catalog.now(),
                   created_at = CASE WHEN i.expires_at <= pg_catalog.clock_timestamp() THEN pg_catalog.now() ELSE i.created_at END,
                   ttl_minutes = put_item.ttl_minutes,
                   expires_at = pg_catalog.now() + pg_catalog.make_interval(secs => put_item.ttl_minutes * 60)
             WHERE i.scope_id = put_item.scope AND i.item_key = put_item.item_key
            RETURNING i.created_at, i.updated_at INTO r;
            -- Its field vectors are the old value's: kept when they are those of the texts this
            -- put indexes (same paths, same texts, same model: pgmem.item_vectors_current, read
            -- under the item's lock, which every writer of its vectors holds), so a re-put of the
            -- same text embeds and writes nothing; dropped otherwise, and the caller writes the
            -- new ones (put_item_vectors).
            kept := pgmem.item_vectors_current(put_item.scope, put_item.item_key, put_item.model_id,
                                               put_item.field_paths, put_item.text_hashes);
            IF NOT kept THEN
                DELETE FROM pgmem.store_vector v WHERE v.scope_id = put_item.scope AND v.item_key = put_item.item_key;
            END IF;
            EXIT;
        END IF;
        SELECT i.item_key INTO holder FROM pgmem.store_item i
         WHERE i.scope_id = put_item.scope AND i.thread_id = put_item.thread LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'put_item: thread % of scope % is item %''s; an item''s thread is its own', put_item.thread, put_item.scope, holder
                USING ERRCODE = '23505',
                      HINT = 'Name another thread, or none (NULL: a plain key-value item); PgmemStore names it item:<key>.';
        END IF;
    END LOOP;
    -- The caller read the item's vectors as current (without a lock) and sends none: a put
    -- that committed since changed them, so this transaction must run again and embed.
    IF keep_vectors AND NOT kept THEN
        RAISE EXCEPTION 'put_item: the field vectors of item % changed since they were read as current', item_key
            USING ERRCODE = '40001', HINT = 'Run the transaction again: it reads them again and embeds what changed.';
    END IF;
    -- An item put again without an index keeps no searchable copy of its old text: its old
    -- thread is forgotten (turn, pieces and the recall-log rows that returned them), after the
    -- item row, as the lock order has it.
    IF old_thread IS NOT NULL AND old_thread IS DISTINCT FROM new_thread THEN
        PERFORM pgmem.forget_thread(put_item.scope, old_thread);
    END IF;
    RETURN QUERY SELECT r.created_at, r.updated_at, old_thread, kept, true;
END
$$;
COMMENT ON FUNCTION pgmem.put_item(text, text[], text, jsonb, text, double precision, text, text[], bytea[], boolean, timestamptz) IS
'Insert or replace a LangGraph store item of the transaction''s scope (namespace must map to it: pgmem.store_scope; a one-dimensional list of non-empty labels, 22023 otherwise; since 0091 also 22023 for a blank scope, a key over 1,000 characters, a value nested deeper than 64 levels or holding a number Python cannot read back (pgmem._unreadable_number), a blank thread: what PgmemStore refuses first). ttl_minutes sets its expiry (now() + ttl_minutes; NULL: never; 22023 unless above 0 and at most 100 years). Replacing an item keeps its field vectors when they are those of the texts the put indexes (model_id, field_paths and text_hashes, the sha256 of each text: pgmem.item_vectors_current), and drops them otherwise (the caller writes the new ones with pgmem.put_item_vectors); vectors_kept says which. keep_vectors => true says the caller found them current (pgmem.store_vectors_current, read without a lock) and embeds nothing: when they are not current under the item''s lock, 40001 (run the transaction again), so the caller need not wait for vectors_kept. thread names the turn that makes the item searchable (the caller then stores that turn with put_turn in the same transaction, in the thread the item row holds: store_item.thread_id, which is another name, item-sha256:<hex of the key>, when a conversation of the scope holds thread, since 0092); NULL for a plain key-value item, and an item that had a turn loses it. Records the namespace in pgmem.store_namespace under the transaction''s directory (pgmem.store_directory: 42501 when none is set, even for a superuser, since the row needs a directory). unless_newer_than makes the put conditional (an import from another store): an item of the key updated after it, and not expired (by the clock, as reads judge it), is kept unchanged, decided under the item''s lock, and written is false (the caller then stores no turn or vectors for it); a key deleted after it (pgmem.store_tombstone, kept 30 days), expired after it (an expiry is a delete at expires_at: swept or not, since 0092), or in a scope forgotten after it (pgmem.forgotten_scope), is not written either, and created_at and updated_at are NULL. A conditional put holds the key''s lock (pgmem._store_key_lock) from before the item row to its commit, as delete_item does. Returns the item''s created_at, updated_at, its previous thread and whether the put was written.';

-- A namespace whose items another directory's store wrote is listed in this one too when a
-- store of this directory finds them there (an import that writes nothing: unchanged or kept),
-- without writing an item. The namespace is read from the scope's items, never taken from the
-- caller, so only a namespace that holds an item can be listed. The lock order of put_item: the
-- scope row (KEY SHARE), the scope's directory lock (shared, to the commit), the directory row
-- (since 0093; until then after the item), then one of its items (KEY SHARE: a delete of it in
-- flight is waited for, and then its _drop_empty_namespace is not kept from removing the entry
-- by this lock).
CREATE OR REPLACE FUNCTION pgmem.note_store_namespace(scope text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    dir text := nullif(current_setting('pgmem.store_directory', true), '');
    ns text[];
    made boolean := false;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'note_store_namespace: scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(note_store_namespace.scope), true);
    IF dir IS NULL THEN
        RAISE EXCEPTION 'note_store_namespace: no store directory is set for this transaction' USING ERRCODE = '42501',
            HINT = 'Run SET LOCAL pgmem.store_directory = ''<directory>'' in the same transaction (PgmemStore does it with its directory).';
    END IF;
    IF EXISTS (SELECT 1 FROM pgmem.store_namespace n
                WHERE n.directory = dir AND n.scope_name = note_store_namespace.scope) THEN
        RETURN false;  -- listed already (a rerun): no lock taken
    END IF;
    PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = note_store_namespace.scope FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(pgmem._store_directory_lock(note_store_namespace.scope));
    -- The directory row before an item (0093), as put_item writes it: one waiting for a put's
    -- new entry while holding an item the put then locks would deadlock. The namespace is any
    -- item's (a scope is one namespace); an entry made here goes again if no item is left.
    SELECT i.namespace INTO ns FROM pgmem.store_item i WHERE i.scope_id = note_store_namespace.scope LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO pgmem.store_namespace AS n (directory, namespace, scope_name)
    VALUES (pgmem.check_store_directory(dir, true), ns, note_store_namespace.scope)
    ON CONFLICT (directory, namespace) DO NOTHING
    RETURNING true INTO made;
    PERFORM 1 FROM pgmem.store_item i WHERE i.scope_id = note_store_namespace.scope LIMIT 1 FOR KEY SHARE;
    IF NOT FOUND THEN
        IF made THEN
            DELETE FROM pgmem.store_namespace n WHERE n.directory = dir AND n.namespace = ns;
        END IF;
        RETURN false;
    END IF;
    RETURN coalesce(made, false);
END
$$;
COMMENT ON FUNCTION pgmem.note_store_namespace(text) IS
'List the namespace of the transaction''s scope in the transaction''s store directory (pgmem.store_directory: 42501 when none is set) when the scope holds an item, as put_item lists it, without writing an item: for an import that finds its items already stored (by a store of another directory). The namespace is the one of the scope''s items (nothing is listed for a scope without one). Returns whether an entry was added.';

-- An item's rows without the recall-log step: delete_item is this and then pgmem._forget_logs of
-- the item's thread; expire_items calls it for each expired item and reads the log once.
CREATE OR REPLACE FUNCTION pgmem._delete_item_rows(scope text, item_key text,
                                                   OUT existed boolean, OUT thread text,
                                                   OUT piece_ids bigint[], OUT fact_ids bigint[])
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    DELETE FROM pgmem.store_item i WHERE i.scope_id = _delete_item_rows.scope AND i.item_key = _delete_item_rows.item_key
    RETURNING i.thread_id INTO thread;
    existed := FOUND;
    piece_ids := '{}';
    fact_ids := '{}';
    IF thread IS NOT NULL THEN  -- its turn goes as a forget would take it (forget_thread)
        SELECT r.piece_ids, r.fact_ids INTO piece_ids, fact_ids
          FROM pgmem._forget_thread_rows(_delete_item_rows.scope, thread) r;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._delete_item_rows(text, text) IS
'Internal to delete_item and expire_items: delete a store item of the scope and, when it was indexed, its thread''s rows (pgmem._forget_thread_rows), but not the recall-log rows that returned them. Returns whether the item existed, its thread, and the ids of the pieces and facts deleted.';

-- A store delete's recall-log rows are deleted at its transaction's commit (0073), not by the
-- delete: the lock order puts the scope's recall-log lock (pgmem._recall_log_lock) after every
-- row lock of the transaction, and a store batch deleting two items took it at its first delete,
-- then asked for the second key's lock, while a delete of that key alone held the key and asked
-- for the recall-log lock: a deadlock. (A batch's puts after a delete, and their turns, were
-- held the same way.) delete_item adds a line to the transaction's setting
-- pgmem.item_logs_at_commit before it deletes the item row: the scope (a JSON string), a tab, and
-- a JSON object of the item's thread, piece_ids and fact_ids; the deferred trigger below, queued
-- by the row's delete, forgets them in one read of the log a scope, at the commit, after
-- everything else the transaction locked. A savepoint rolled back takes back both the setting
-- and its queued triggers. Until the commit the transaction itself still sees the rows.
-- The first line names the transaction (0076): a value another transaction left (a
-- session-level SET, which outlives its transaction on a pooled connection) is dropped, not
-- added to: a later delete on that connection forgot the other threads it named. A line is
-- appended, never parsed here: 0073 parsed and rewrote a JSON object of every delete so far at
-- each delete, 4,000 deletes in one transaction spent 13.4 s on it.
-- Sealed chunks (0079): a setting is a string copied whole when it is set, so one that grew by a
-- line a delete cost each delete the length of every line before it (a delete took 2.07-3.92 ms
-- in a transaction of 8,000 deletes against 0.67 in one of 50; sealed, 0.89-1.65 against 0.69:
-- docs/bench/delete-ab-0079.txt). Past
-- chunk_bytes the lines move to pgmem.item_logs_at_commit_<i> (i = 1, 2, ...), each headed by the
-- same first line, and pgmem.item_logs_at_commit_chunks holds the first line and their count.
CREATE OR REPLACE FUNCTION pgmem._item_logs_sealed(head text)
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    chunks text := current_setting('pgmem.item_logs_at_commit_chunks', true);
    n integer := 0;
BEGIN
    IF left(chunks, length(head)) = head THEN
        IF substr(chunks, length(head) + 1) !~ '^[0-9]{1,9}$' THEN
            RAISE EXCEPTION 'pgmem.item_logs_at_commit_chunks is not what delete_item wrote: it is pgmem''s own setting'
                USING ERRCODE = '22023', HINT = 'Do not set pgmem.item_logs_at_commit*.';
        END IF;
        n := substr(chunks, length(head) + 1)::integer;
    END IF;
    -- The chunk after the last one counted is never the transaction's (the trigger empties the
    -- chunks it takes back into the setting): a count set below the chunks sealed (unset,
    -- another transaction's, or smaller) hid their lines, and the scope, marked done by its first
    -- row, kept those items' log rows (found probing 0079, tests/test_rt47_notes.py).
    IF left(current_setting('pgmem.item_logs_at_commit_' || (n + 1), true), length(head)) = head THEN
        RAISE EXCEPTION 'pgmem.item_logs_at_commit_chunks is not what delete_item wrote: it is pgmem''s own setting'
            USING ERRCODE = '22023', HINT = 'Do not set pgmem.item_logs_at_commit*.';
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION pgmem._item_logs_sealed(text) IS
'Internal to the store''s delete notes: how many chunks of pgmem.item_logs_at_commit the transaction (head, its first line) has sealed, from pgmem.item_logs_at_commit_chunks (0 when that is another transaction''s or unset; 22023 when it is not a count, or when the chunk after the last one counted is the transaction''s: a count set below the chunks sealed).';

CREATE OR REPLACE FUNCTION pgmem._item_logs_at_commit(scope text, thread text, piece_ids bigint[], fact_ids bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    head text := 'pgmem ' || pg_current_xact_id()::text || E'\n';
    pending text := current_setting('pgmem.item_logs_at_commit', true);
    chunk_bytes constant integer := 16384;
    sealed integer;
BEGIN
    IF pending IS NULL OR left(pending, length(head)) IS DISTINCT FROM head THEN
        pending := head;  -- anything else found there (set by the caller) starts afresh
    END IF;
    IF octet_length(pending) > chunk_bytes THEN
        sealed := pgmem._item_logs_sealed(head) + 1;
        PERFORM set_config('pgmem.item_logs_at_commit_' || sealed, pending, true);
        PERFORM set_config('pgmem.item_logs_at_commit_chunks', head || sealed, true);
        pending := head;
    END IF;
    PERFORM set_config('pgmem.item_logs_at_commit',
                       pending || to_jsonb(scope)::text || E'\t'
                       || jsonb_build_object('thread', thread, 'piece_ids', coalesce(piece_ids, '{}'),
                                             'fact_ids', coalesce(fact_ids, '{}'))::text || E'\n',
                       true);
END
$$;
COMMENT ON FUNCTION pgmem._item_logs_at_commit(text, text, bigint[], bigint[]) IS
'Internal to delete_item: add an item''s thread, pieces and facts, before the item row is deleted, to the transaction''s pgmem.item_logs_at_commit (a line appended; a value of another transaction is dropped; past 16 kB its lines are sealed into pgmem.item_logs_at_commit_<i>, counted by pgmem.item_logs_at_commit_chunks), whose recall-log rows pgmem._forget_item_logs_at_commit deletes at the commit.';

-- The trigger's function runs as pgmem_owner (900_grants.sql): at the commit no pgmem function
-- is running, and pgmem_app may not delete recall-log rows. It reads the setting only for the
-- scope of a store item the transaction deleted, which a definer function deleted under the
-- transaction's write scope, so what it forgets is that scope's log rows only; it sets
-- pgmem.scope to that scope for the delete (row-level security) and back.
-- The deleted row's own thread is forgotten whatever the setting holds (0076): set to '' or
-- '{}' after the delete, or to another transaction's value, the setting named nothing and the
-- deleted item's log rows survived the commit (with no line of its scope in this transaction's
-- value, each row then forgets its own thread, and nothing is marked done; a rewrite keeping the
-- transaction's id that leaves one line of the scope, or adds a done line, which this cannot tell
-- from its own, still lets the first row stand for the scope's others). The scope's lines
-- (in the setting and its sealed chunks) are then replaced by a line marking it done, the other
-- scopes' lines kept in the setting and the chunks dropped, so its other rows cost no read of the
-- log and no parse of the lines (0079: a search of the setting); a later delete_item in the scope
-- (under SET CONSTRAINTS ALL IMMEDIATE, the trigger fires at each delete) adds a line again. A
-- thread that exists again at the commit (a put of the same key after the delete, in the same
-- transaction) is forgotten by the deleted pieces' and facts' ids only: as a whole thread, the
-- recalls logged after the put, which returned the new item, went too.
CREATE OR REPLACE FUNCTION pgmem._forget_item_logs_at_commit()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
DECLARE
    head text := 'pgmem ' || pg_current_xact_id()::text || E'\n';
    pending text := current_setting('pgmem.item_logs_at_commit', true);
    sealed integer := 0;
    chunk text;
    mine text := to_jsonb(OLD.scope_id)::text || E'\t';
    done text := 'done' || E'\t' || to_jsonb(OLD.scope_id)::text;
    lines text[] := '{}';
    entries jsonb[] := '{}';
    threads text[];
    whole text[];
    piece_ids bigint[] := '{}';
    fact_ids bigint[] := '{}';
    caller_scope text := current_setting('pgmem.scope', true);
BEGIN
    IF pending IS NOT NULL AND left(pending, length(head)) = head THEN
        sealed := pgmem._item_logs_sealed(head);
        -- Forgotten with the scope's first deleted row: marked done, no line of it since.
        IF sealed = 0 AND strpos(pending, E'\n' || done || E'\n') > 0 AND strpos(pending, E'\n' || mine) = 0 THEN
            RETURN NULL;
        END IF;
        FOR i IN 1..sealed LOOP
            chunk := current_setting('pgmem.item_logs_at_commit_' || i, true);
            IF left(chunk, length(head)) IS DISTINCT FROM head THEN
                RAISE EXCEPTION 'pgmem.item_logs_at_commit_% is not what delete_item wrote: it is pgmem''s own setting', i
                    USING ERRCODE = '22023',
                          HINT = 'Do not set pgmem.item_logs_at_commit*; the transaction''s deletes were not committed.';
            END IF;
            lines := lines || string_to_array(rtrim(substr(chunk, length(head) + 1), E'\n'), E'\n');
        END LOOP;
        lines := lines || string_to_array(rtrim(substr(pending, length(head) + 1), E'\n'), E'\n');
    ELSE
        pending := NULL;  -- not this transaction's: the row's own thread only
    END IF;
    BEGIN
        entries := ARRAY(SELECT substr(u.l, length(mine) + 1)::jsonb FROM unnest(lines) AS u(l) WHERE starts_with(u.l, mine));
        threads := ARRAY(SELECT DISTINCT t FROM (
                             SELECT e ->> 'thread' FROM unnest(entries) AS u(e) UNION ALL SELECT OLD.thread_id
                         ) AS u(t) WHERE t IS NOT NULL);
        piece_ids := ARRAY(SELECT DISTINCT i::bigint FROM unnest(entries) AS u(e), jsonb_array_elements_text(e -> 'piece_ids') AS p(i));
        fact_ids := ARRAY(SELECT DISTINCT i::bigint FROM unnest(entries) AS u(e), jsonb_array_elements_text(e -> 'fact_ids') AS f(i));
    EXCEPTION WHEN data_exception OR statement_too_complex THEN
        RAISE EXCEPTION 'pgmem.item_logs_at_commit is not what delete_item wrote: it is pgmem''s own setting'
            USING ERRCODE = '22023',
                  HINT = 'Do not set pgmem.item_logs_at_commit; the transaction''s deletes were not committed.';
    END;
    IF pending IS NOT NULL AND cardinality(entries) > 0 THEN  -- none noted: each row its own thread
        PERFORM set_config('pgmem.item_logs_at_commit',
                           head || coalesce(string_agg(u.l || E'\n', '' ORDER BY u.n), '') || done || E'\n', true)
           FROM unnest(lines) WITH ORDINALITY AS u(l, n)
          WHERE NOT starts_with(u.l, mine) AND u.l <> done;
        IF sealed > 0 THEN  -- taken back into the setting: emptied, so none counts as sealed
            FOR i IN 1..sealed LOOP
                PERFORM set_config('pgmem.item_logs_at_commit_' || i, '', true);
            END LOOP;
            PERFORM set_config('pgmem.item_logs_at_commit_chunks', head || '0', true);
        END IF;
    END IF;
    PERFORM set_config('pgmem.scope', OLD.scope_id, true);
    whole := ARRAY(SELECT t FROM unnest(threads) AS u(t)
                    WHERE NOT EXISTS (SELECT 1 FROM pgmem.thread th WHERE th.scope_id = OLD.scope_id AND th.thread_id = u.t));
    PERFORM pgmem._forget_logs(OLD.scope_id, whole, '{}', piece_ids, fact_ids);
    PERFORM set_config('pgmem.scope', coalesce(caller_scope, ''), true);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION pgmem._forget_item_logs_at_commit() IS
'Trigger (deferred to the commit, on pgmem.store_item deletes in a transaction that called delete_item): deletes the recall-log rows of the deleted items of the row''s scope, from pgmem.item_logs_at_commit and its sealed chunks (this transaction''s lines only) and the row''s own thread (pgmem._forget_logs, once a scope), after every other lock the transaction took; a thread stored again since is forgotten by the deleted pieces'' and facts'' ids only.';

-- A constraint trigger (the only kind that can wait for the commit) has no OR REPLACE; the
-- re-runnable set holds store_item ACCESS EXCLUSIVE anyway (its policies).
DROP TRIGGER IF EXISTS store_item_logs_at_commit ON pgmem.store_item;
CREATE CONSTRAINT TRIGGER store_item_logs_at_commit
AFTER DELETE ON pgmem.store_item
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW
WHEN (OLD.thread_id IS NOT NULL AND pg_catalog.current_setting('pgmem.item_logs_at_commit', true) <> '')
EXECUTE FUNCTION pgmem._forget_item_logs_at_commit();

CREATE OR REPLACE FUNCTION pgmem.delete_item(scope text, item_key text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r record;
    item_thread text;
    item_pieces bigint[];
    item_facts bigint[];
BEGIN
    IF scope IS NULL OR item_key IS NULL THEN
        RAISE EXCEPTION 'delete_item: scope and item_key must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(delete_item.scope), true);
    -- The scope row first (the lock order, docs/architecture.md), FOR KEY SHARE as put_item
    -- holds it, when there is one (a delete creates none): a forget_scope in flight is waited
    -- for before any item or record of the scope is held. Without it, a transaction that went
    -- on to put into the scope after a delete (a store batch: its deletes and puts in key order)
    -- waited for forget_scope's lock on the row while forget_scope waited for the deleted row.
    -- Then the key's lock, as a conditional put (an import) takes it, then the item row; the
    -- delete is remembered (pgmem.store_tombstone, 0051), whether the item was stored yet or
    -- not, so an import of an older copy does not write it again.
    -- A scope row another transaction is inserting (a put recreating a forgotten scope) is
    -- waited for as well, by an insert of the row, taken back at once when this one made it:
    -- FOR KEY SHARE alone does not see an uncommitted row, so a delete took the key's lock first
    -- and a put after it in the same transaction then waited for that insert, whose transaction
    -- (an import's page) waited for the key's lock: a deadlock (0067).
    -- (A name the scope table cannot hold names no scope: nothing to wait for.)
    -- Through pgmem._lock_scope since 0085: a row found by the insert's conflict check but
    -- deleted by a forget_scope before the lock was no longer there to lock, and the delete went
    -- on to the key's lock holding no scope row; an import's page then inserted the row and
    -- waited for that key, while this transaction's put after the delete waited for the import's
    -- insert (a deadlock of tests/test_langgraph_import.py's stress). _lock_scope looks again.
    PERFORM pgmem._lock_scope(delete_item.scope);
    PERFORM pg_advisory_xact_lock(pgmem._store_key_lock(delete_item.scope, delete_item.item_key));
    -- The recall-log rows go at the commit (0073, pgmem._forget_item_logs_at_commit), noted
    -- before the item row goes (0076), which is locked first (as the delete would): a put of the
    -- key waits. Noted after the delete, a trigger fired at the delete's own statement (SET
    -- CONSTRAINTS ALL IMMEDIATE, as Django's constraint checks run) found nothing noted, and the
    -- log rows stayed. (The thread is forgotten whole at the commit, whatever writes into it
    -- before _delete_item_rows locks it: the ids are for hits that do not name it.)
    SELECT i.thread_id,
           ARRAY(SELECT p.piece_id FROM pgmem.piece p
                  WHERE p.scope_id = delete_item.scope AND p.kind = 'memory' AND p.thread_id = i.thread_id),
           ARRAY(SELECT f.fact_id FROM pgmem.fact f WHERE f.scope_id = delete_item.scope AND f.thread_id = i.thread_id)
      INTO item_thread, item_pieces, item_facts
      FROM pgmem.store_item i
     WHERE i.scope_id = delete_item.scope AND i.item_key = delete_item.item_key FOR UPDATE OF i;
    IF item_thread IS NOT NULL THEN
        PERFORM pgmem._item_logs_at_commit(delete_item.scope, item_thread, item_pieces, item_facts);
    END IF;
    SELECT * INTO r FROM pgmem._delete_item_rows(delete_item.scope, delete_item.item_key);
    PERFORM pgmem._note_deleted_items(delete_item.scope, ARRAY[delete_item.item_key]);
    IF r.existed THEN  -- the namespace leaves the directories with the last item (unless one is being put)
        PERFORM pgmem._drop_empty_namespace(delete_item.scope, delete_item.item_key);
    END IF;
    RETURN r.existed;
END
$$;
COMMENT ON FUNCTION pgmem.delete_item(text, text) IS
'Delete a LangGraph store item of the transaction''s scope, with its turn, pieces and the recall-log rows that returned them when it was indexed (pgmem.forget_thread of its thread; the log rows at the commit, by the deferred trigger store_item_logs_at_commit, after every other lock of the transaction); the namespace leaves pgmem.store_namespace (every directory listing it) with its last item (pgmem._drop_empty_namespace, which never waits: while another transaction writes the scope, an item it puts may be on its way, and the entry stays; two deletes of the namespace''s last items at once each still see the other''s item and leave it too; a later delete, expire_items or pgmem.sweep_expired_items, which since 0084 visits every scope with entries and no item, removes it). The delete is remembered 30 days (pgmem.store_tombstone: the sha256 of the key and the time), so an import''s conditional put of an older copy (put_item''s unless_newer_than) does not write the key again; it holds the scope row FOR KEY SHARE (when there is one) and then the key''s lock (pgmem._store_key_lock) from before the item row to its commit. Returns whether the item existed; deleting a missing item is not an error.';

-- Before literal (0040): dropped so a named call stays unambiguous.
DROP FUNCTION IF EXISTS pgmem.store_namespaces(text, text[], text[], integer, integer, integer);
CREATE OR REPLACE FUNCTION pgmem.store_namespaces(
    directory text,
    prefix text[] DEFAULT NULL,
    suffix text[] DEFAULT NULL,
    max_depth integer DEFAULT NULL,
    lim integer DEFAULT 100,
    off integer DEFAULT 0,
    literal boolean DEFAULT false
) RETURNS SETOF text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    -- Paged as store_list (0092): a negative lim was Postgres's bare error, a negative off 0.
    IF lim < 0 OR off < 0 THEN
        RAISE EXCEPTION 'store_namespaces: lim and off must be >= 0 (lim NULL: every namespace), got % and %', lim, off
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT DISTINCT CASE WHEN max_depth IS NULL THEN n.namespace ELSE n.namespace[1:max_depth] END AS ns
      FROM pgmem.store_namespace n
     WHERE n.directory = pgmem.check_store_directory(store_namespaces.directory)
       AND (prefix IS NULL OR (cardinality(n.namespace) >= cardinality(prefix) AND NOT EXISTS (
                SELECT 1 FROM unnest(prefix) WITH ORDINALITY AS p(label, i)
                 WHERE (p.label <> '*' OR literal) AND n.namespace[p.i] IS DISTINCT FROM p.label)))
       AND (suffix IS NULL OR (cardinality(n.namespace) >= cardinality(suffix) AND NOT EXISTS (
                SELECT 1 FROM unnest(suffix) WITH ORDINALITY AS s(label, i)
                 WHERE (s.label <> '*' OR literal)
                   AND n.namespace[cardinality(n.namespace) - cardinality(suffix) + s.i::integer] IS DISTINCT FROM s.label)))
     ORDER BY ns
     LIMIT store_namespaces.lim OFFSET store_namespaces.off;
END
$$;
COMMENT ON FUNCTION pgmem.store_namespaces(text, text[], text[], integer, integer, integer, boolean) IS
'Namespaces of one directory of the LangGraph store that hold items (pgmem.store_namespace), directory being the transaction''s pgmem.store_directory (42501 otherwise, pgmem.check_store_directory), matching a prefix and/or a suffix (a * label matches any label, unless literal: a search''s prefix is taken as written), cut to max_depth labels, distinct and sorted label by label; paged as PostgresStore''s LIMIT and OFFSET: lim NULL returns all, off NULL is 0, a negative one is refused (22023).';

-- Row-level security of the namespace directory (ENABLE and FORCE: 005_store_directory.sql).
-- A row is visible to a transaction that asked for its directory, or that is inside the
-- namespace's own scope (which may read the namespace's items anyway): a service bound to one
-- scope sees its own namespace and nothing of other tenants'. It is written only by put_item
-- (in its scope and directory) and removed only inside its scope (delete_item, forget_scope,
-- sweep_expired_items setting each scope in turn: 0084), in every directory that lists it.
DROP POLICY IF EXISTS directory_read ON pgmem.store_namespace;
CREATE POLICY directory_read ON pgmem.store_namespace AS PERMISSIVE FOR SELECT TO PUBLIC
    USING (directory = pg_catalog.current_setting('pgmem.store_directory', true)
           OR scope_name = pg_catalog.current_setting('pgmem.scope', true));
COMMENT ON POLICY directory_read ON pgmem.store_namespace IS
    'A namespace is visible in its directory (directory = current_setting(''pgmem.store_directory'')) and inside its own scope (scope_name = current_setting(''pgmem.scope'')).';
DROP POLICY IF EXISTS directory_insert ON pgmem.store_namespace;
CREATE POLICY directory_insert ON pgmem.store_namespace AS PERMISSIVE FOR INSERT TO PUBLIC
    WITH CHECK (directory = pg_catalog.current_setting('pgmem.store_directory', true)
                AND scope_name = pg_catalog.current_setting('pgmem.scope', true));
COMMENT ON POLICY directory_insert ON pgmem.store_namespace IS
    'A namespace is entered only into the transaction''s directory and only inside its own scope (put_item).';
DROP POLICY IF EXISTS directory_delete ON pgmem.store_namespace;
CREATE POLICY directory_delete ON pgmem.store_namespace AS PERMISSIVE FOR DELETE TO PUBLIC
    USING (scope_name = pg_catalog.current_setting('pgmem.scope', true));
COMMENT ON POLICY directory_delete ON pgmem.store_namespace IS
    'A namespace leaves its directories only inside its own scope (delete_item, forget_scope, sweep_expired_items in each scope).';
