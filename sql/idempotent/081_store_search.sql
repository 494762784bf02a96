-- The LangGraph store's reads, field vectors and expiry (pgmem.integrations.langgraph, issue 28).
-- Re-runnable. Tables: sql/incremental/003_store.sql, 007_store_ttl_vectors.sql and
-- 016_store_vector_text_hash.sql. The rules live here, not in Python: which items are visible
-- (not expired), what a filter matches, what a score means for each distance type, when a put
-- keeps an item's vectors, and what an expiry removes.
-- put_item_vectors, refresh_items and expire_items are SECURITY DEFINER (900_grants.sql).

-- The expired items of one scope, read by every recall of it (pgmem.expired_item_pieces, 0100):
-- store_item_expires (expiry first, every scope's) is the sweep's. Only items with a TTL.
CREATE INDEX IF NOT EXISTS store_item_scope_expires ON pgmem.store_item (scope_id, expires_at)
    WHERE expires_at IS NOT NULL;
COMMENT ON INDEX pgmem.store_item_scope_expires IS
    'The expired store items of one scope (pgmem.expired_item_pieces: a recall leaves their pieces out).';

CREATE OR REPLACE FUNCTION pgmem.store_filter_match(value jsonb, filter jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    f record;
    o record;
    v jsonb;
    ok boolean;
BEGIN
    IF filter IS NULL THEN
        RETURN true;
    END IF;
    IF jsonb_typeof(filter) <> 'object' THEN
        RAISE EXCEPTION 'filter must be a JSON object of field conditions, got %', jsonb_typeof(filter) USING ERRCODE = '22023';
    END IF;
    FOR f IN SELECT e.key, e.value FROM jsonb_each(filter) e LOOP
        v := value -> f.key;
        IF jsonb_typeof(f.value) = 'object' AND EXISTS (SELECT 1 FROM jsonb_object_keys(f.value) k WHERE left(k, 1) = '$') THEN
            FOR o IN SELECT e.key, e.value FROM jsonb_each(f.value) e ORDER BY e.key LOOP
                IF o.key NOT IN ('$eq', '$ne', '$gt', '$gte', '$lt', '$lte') THEN
                    RAISE EXCEPTION 'filter on %: operator % is not one of $eq, $ne, $gt, $gte, $lt, $lte', f.key, left(o.key, 40)
                        USING ERRCODE = '22023', HINT = 'A plain value is equality; operators go in an object, e.g. {"score": {"$gte": 4}}.';
                END IF;
                -- A missing field matches no condition (PostgresStore's value->key is NULL there);
                -- an order compares like with like: numbers as numbers, strings as strings.
                ok := v IS NOT NULL AND CASE o.key
                        WHEN '$eq' THEN v = o.value
                        WHEN '$ne' THEN v <> o.value
                        ELSE jsonb_typeof(v) = jsonb_typeof(o.value) AND jsonb_typeof(v) IN ('number', 'string', 'boolean')
                             AND CASE o.key WHEN '$gt' THEN v > o.value WHEN '$gte' THEN v >= o.value
                                            WHEN '$lt' THEN v < o.value ELSE v <= o.value END
                    END;
                IF NOT ok THEN
                    RETURN false;
                END IF;
            END LOOP;
        ELSIF v IS NULL OR v <> f.value THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN true;
END
$$;
COMMENT ON FUNCTION pgmem.store_filter_match(jsonb, jsonb) IS
'Whether a store item''s value matches a LangGraph filter: each top-level field is equal to a value, or meets every operator of {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": v}. Orders compare numbers as numbers and strings as strings (a value of another JSON type does not match); a missing field matches nothing. An unknown operator raises 22023. NULL filter: true.';

CREATE OR REPLACE FUNCTION pgmem.store_get(scope text, item_key text)
RETURNS TABLE (namespace text[], item_key text, value jsonb, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT i.namespace, i.item_key, i.value, i.created_at, i.updated_at FROM pgmem.store_item i
     WHERE i.scope_id = pgmem.check_scope(store_get.scope) AND i.item_key = store_get.item_key
       AND (i.expires_at IS NULL OR i.expires_at > pg_catalog.clock_timestamp())
$$;
COMMENT ON FUNCTION pgmem.store_get(text, text) IS
'A LangGraph store item of the transaction''s scope by key; no row when it is missing or expired (an expired item is invisible before the sweep removes it).';

-- The time a store gives an item's turn (0038): read once for a batch's items, after their puts.
CREATE OR REPLACE FUNCTION pgmem.store_item_times(scope text, item_keys text[])
RETURNS TABLE (item_key text, created_at timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT i.item_key, i.created_at FROM pgmem.store_item i
     WHERE i.scope_id = pgmem.check_scope(store_item_times.scope) AND i.item_key = ANY (item_keys)
$$;
COMMENT ON FUNCTION pgmem.store_item_times(text, text[]) IS
'The created_at of the transaction''s scope''s items among item_keys, expired or not (an item put with a TTL short enough expires within its own transaction): the time of an item''s turn, which a re-put keeps.';

-- A page of the store's listings is PostgresStore's LIMIT %s OFFSET %s (0092): lim NULL is every
-- row, off NULL is 0, and a negative one is refused in one line (22023). store_list took a NULL
-- or negative lim as 0 (nothing, silently) while store_namespaces took NULL as every row.
CREATE OR REPLACE FUNCTION pgmem.store_list(scope text, filter jsonb DEFAULT NULL, lim integer DEFAULT 10, off integer DEFAULT 0)
RETURNS TABLE (namespace text[], item_key text, value jsonb, created_at timestamptz, updated_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF lim < 0 OR off < 0 THEN
        RAISE EXCEPTION 'store_list: lim and off must be >= 0 (lim NULL: every item), got % and %', lim, off
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT i.namespace, i.item_key, i.value, i.created_at, i.updated_at FROM pgmem.store_item i
     WHERE i.scope_id = pgmem.check_scope(store_list.scope)
       AND (i.expires_at IS NULL OR i.expires_at > pg_catalog.clock_timestamp())
       AND pgmem.store_filter_match(i.value, store_list.filter)
     ORDER BY i.updated_at DESC, i.item_key
     LIMIT store_list.lim OFFSET store_list.off;
END
$$;
COMMENT ON FUNCTION pgmem.store_list(text, jsonb, integer, integer) IS
'Items of the transaction''s scope matching a filter (pgmem.store_filter_match), not expired, newest first (updated_at, then key): a search without a query. lim and off page it as PostgresStore''s LIMIT and OFFSET: lim NULL returns every item, off NULL is 0, a negative one is refused (22023).';

CREATE OR REPLACE FUNCTION pgmem.store_vector_model(scope text)
RETURNS TABLE (model_id text, dims integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
    SELECT v.model_id, vector_dims(v.embedding) FROM pgmem.store_vector v
     WHERE v.scope_id = pgmem.check_scope(store_vector_model.scope) LIMIT 1
$$;
COMMENT ON FUNCTION pgmem.store_vector_model(text) IS
'The model and dimension of the transaction''s scope''s field vectors (no row: none stored yet). A store checks it before embedding.';

-- The rule that lets a put skip embedding: an item's stored vectors are current for a put when
-- they are exactly one per text it indexes, in order, with the same path, the same text (its
-- sha256) and the same model. A vector without a hash (stored before migration 0023) never is.
CREATE OR REPLACE FUNCTION pgmem.item_vectors_current(
    scope text,
    item_key text,
    model_id text,
    field_paths text[],
    text_hashes bytea[]
) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
    SELECT coalesce(cardinality(field_paths), 0) > 0
       AND cardinality(field_paths) = coalesce(cardinality(text_hashes), 0)
       AND item_vectors_current.model_id IS NOT NULL
       AND coalesce((
           SELECT array_agg(v.field_path ORDER BY v.field_no) = field_paths
              AND array_agg(v.text_hash ORDER BY v.field_no) = text_hashes
              AND bool_and(v.text_hash IS NOT NULL AND v.model_id = item_vectors_current.model_id)
              AND max(v.field_no) = cardinality(field_paths) - 1
             FROM pgmem.store_vector v
            WHERE v.scope_id = pgmem.check_scope(item_vectors_current.scope)
              AND v.item_key = item_vectors_current.item_key), false)
$$;
COMMENT ON FUNCTION pgmem.item_vectors_current(text, text, text, text[], bytea[]) IS
'Whether a store item''s field vectors are those of the texts a put indexes: one per text, in order, with the same path (field_paths), the same text (text_hashes: the sha256 of each text''s UTF-8 bytes) and the same model. pgmem.put_item keeps them then; false when the item has none, or any without a hash (stored before migration 0023).';

CREATE OR REPLACE FUNCTION pgmem.store_vectors_current(
    scope text,
    model_id text,
    item_keys text[],
    field_counts integer[],
    field_paths text[],
    text_hashes bytea[]
) RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pgmem.check_scope(store_vectors_current.scope);
    IF coalesce(cardinality(item_keys), 0) <> coalesce(cardinality(field_counts), 0)
       OR cardinality(item_keys) > 10000
       OR array_position(field_counts, NULL) IS NOT NULL
       OR EXISTS (SELECT 1 FROM unnest(field_counts) c WHERE c < 0)
       OR coalesce(cardinality(field_paths), 0) <> coalesce(cardinality(text_hashes), 0)
       OR coalesce((SELECT sum(c) FROM unnest(field_counts) c), 0) <> coalesce(cardinality(field_paths), 0) THEN
        RAISE EXCEPTION 'store_vectors_current: % item keys, % field counts (summing to %), % paths and % hashes; one count per key, counts >= 0 summing to the paths, one hash per path, at most 10000 keys',
            cardinality(item_keys), cardinality(field_counts), (SELECT sum(c) FROM unnest(field_counts) c),
            cardinality(field_paths), cardinality(text_hashes)
            USING ERRCODE = '22023';
    END IF;
    -- Read without a lock, so a put can leave out of its embedding request the items that need
    -- none; put_item decides again under the item's lock (a concurrent put may change them).
    RETURN QUERY
    SELECT k.item_key
      FROM (SELECT u.item_key, u.n, (sum(u.n) OVER (ORDER BY u.i) - u.n)::integer AS start
              FROM unnest(item_keys, field_counts) WITH ORDINALITY AS u(item_key, n, i)) k
     WHERE k.n > 0
       AND pgmem.item_vectors_current(store_vectors_current.scope, k.item_key, store_vectors_current.model_id,
                                      field_paths[k.start + 1 : k.start + k.n], text_hashes[k.start + 1 : k.start + k.n]);
END
$$;
COMMENT ON FUNCTION pgmem.store_vectors_current(text, text, text[], integer[], text[], bytea[]) IS
'The keys among item_keys whose field vectors are current (pgmem.item_vectors_current) for the texts a put indexes: item i has field_counts[i] paths and hashes, in order, in field_paths and text_hashes. A store asks before embedding, without locks, and embeds only the other items'' texts (22023 when the arrays do not line up).';

CREATE OR REPLACE FUNCTION pgmem.put_item_vectors(
    scope text,
    item_key text,
    model_id text,
    paths text[],
    vectors vector[],
    text_hashes bytea[] DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    bound record;
    n integer := coalesce(cardinality(vectors), 0);
BEGIN
    IF scope IS NULL OR item_key IS NULL OR model_id IS NULL THEN
        RAISE EXCEPTION 'put_item_vectors: scope, item_key and model_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(put_item_vectors.scope), true);
    IF n <> coalesce(cardinality(paths), 0) OR n > 10000 OR array_position(vectors, NULL) IS NOT NULL
       OR array_position(paths, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'put_item_vectors: % vectors for % paths; one non-NULL vector per path, at most 10000', n, cardinality(paths)
            USING ERRCODE = '22023';
    END IF;
    IF length(model_id) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'put_item_vectors: model_id must be 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    IF text_hashes IS NOT NULL AND (cardinality(text_hashes) <> n OR EXISTS (
        SELECT 1 FROM unnest(text_hashes) h WHERE h IS NULL OR length(h) <> 32)) THEN
        RAISE EXCEPTION 'put_item_vectors: % text hashes for % vectors; one sha256 (32 bytes) per vector, or NULL', cardinality(text_hashes), n
            USING ERRCODE = '22023';
    END IF;
    -- The item row first (put_item locked it in this transaction; the lock order), then its vectors.
    PERFORM 1 FROM pgmem.store_item i WHERE i.scope_id = put_item_vectors.scope AND i.item_key = put_item_vectors.item_key
        FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'put_item_vectors: no item % in scope %', item_key, scope USING ERRCODE = '22023',
            HINT = 'Call pgmem.put_item first, in the same transaction.';
    END IF;
    IF EXISTS (SELECT 1 FROM pgmem.store_item i WHERE i.scope_id = put_item_vectors.scope AND i.thread_id IS NOT NULL) THEN
        RAISE EXCEPTION 'put_item_vectors: this namespace is indexed with pgmem''s pieces (its own model), not with field vectors'
            USING ERRCODE = '22000', HINT = 'Open the store without an index embed for this namespace, or use another namespace.';
    END IF;
    SELECT v.model_id, vector_dims(v.embedding) AS dims INTO bound FROM pgmem.store_vector v
     WHERE v.scope_id = put_item_vectors.scope AND v.item_key <> put_item_vectors.item_key LIMIT 1;
    IF FOUND AND bound.model_id <> put_item_vectors.model_id THEN
        RAISE EXCEPTION 'this namespace''s items are embedded with %, not %', bound.model_id, model_id USING ERRCODE = '22000',
            HINT = 'Open the store with the index config the namespace was written with.';
    END IF;
    IF n > 0 AND EXISTS (SELECT 1 FROM unnest(vectors) x WHERE vector_dims(x) <> coalesce(bound.dims, vector_dims(vectors[1]))) THEN
        RAISE EXCEPTION 'put_item_vectors: vectors of % dimensions, the namespace''s model % has %',
            (SELECT vector_dims(x) FROM unnest(vectors) x WHERE vector_dims(x) <> coalesce(bound.dims, vector_dims(vectors[1])) LIMIT 1),
            model_id, coalesce(bound.dims, vector_dims(vectors[1])) USING ERRCODE = '22000';
    END IF;
    DELETE FROM pgmem.store_vector v WHERE v.scope_id = put_item_vectors.scope AND v.item_key = put_item_vectors.item_key;
    INSERT INTO pgmem.store_vector (scope_id, item_key, field_no, field_path, model_id, embedding, text_hash)
    SELECT put_item_vectors.scope, put_item_vectors.item_key, (u.i - 1)::integer, u.path, put_item_vectors.model_id, u.vec,
           text_hashes[u.i]
      FROM unnest(paths, vectors) WITH ORDINALITY AS u(path, vec, i);
    RETURN n;
END
$$;
COMMENT ON FUNCTION pgmem.put_item_vectors(text, text, text, text[], vector[], bytea[]) IS
'Replace the field vectors of a store item of the transaction''s scope (put by pgmem.put_item in the same transaction): one vector per indexed text, with the path it came from and, in text_hashes, the sha256 of the text''s UTF-8 bytes (what lets a later put of the same text keep the vector: pgmem.item_vectors_current; NULL: never kept). One model and one dimension per scope (22000 otherwise, naming both), and a namespace searched through pieces takes none (22000). Returns how many were stored.';

CREATE OR REPLACE FUNCTION pgmem.store_search(
    scope text,
    query vector,
    model_id text,
    distance_type text DEFAULT 'cosine',
    filter jsonb DEFAULT NULL,
    lim integer DEFAULT 10,
    off integer DEFAULT 0
) RETURNS TABLE (namespace text[], item_key text, value jsonb, created_at timestamptz, updated_at timestamptz, score double precision)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    bound record;
BEGIN
    PERFORM pgmem.check_scope(store_search.scope);
    IF query IS NULL OR model_id IS NULL THEN
        RAISE EXCEPTION 'store_search: query and model_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF distance_type IS NULL OR distance_type NOT IN ('cosine', 'inner_product', 'l2') THEN
        RAISE EXCEPTION 'store_search: distance_type must be cosine, inner_product or l2, got %', left(distance_type, 40)
            USING ERRCODE = '22023';
    END IF;
    -- As store_list pages (0092): off NULL 0 (refused before), and the sum counted in bigint (two
    -- numbers near 2^31 overflowed integer); lim NULL the rest of the window of 10,000 (every
    -- match until 0093, past the window: review rt57).
    IF lim < 0 OR off < 0 OR coalesce(lim, 0)::bigint + coalesce(off, 0) > 10000 THEN
        RAISE EXCEPTION 'store_search: lim and off must be >= 0 with lim + off at most 10000 (lim NULL: up to 10000 - off), got % and %', lim, off
            USING ERRCODE = '22023';
    END IF;
    SELECT * INTO bound FROM pgmem.store_vector_model(store_search.scope);
    IF FOUND AND (bound.model_id <> store_search.model_id OR bound.dims <> vector_dims(query)) THEN
        RAISE EXCEPTION 'this namespace''s items are embedded with % (% dimensions), not % (% dimensions)',
            bound.model_id, bound.dims, model_id, vector_dims(query) USING ERRCODE = '22000',
            HINT = 'Search with the index config the namespace was written with.';
    END IF;
    -- A namespace of pgmem's pieces (items with a turn) has no field vector to score: refused as
    -- put_item_vectors refuses to write it (0087). Before, the search answered nothing, without a
    -- word, e.g. after `pgmem store import` (pieces) and a switch that kept an index embed.
    IF NOT FOUND AND EXISTS (SELECT 1 FROM pgmem.store_item i
                              WHERE i.scope_id = store_search.scope AND i.thread_id IS NOT NULL) THEN
        RAISE EXCEPTION 'store_search: this namespace is indexed with pgmem''s pieces (its own model), not with field vectors'
            USING ERRCODE = '22000',
            HINT = 'Search it with a store without an index embed (pgmem''s recall), or use another namespace.';
    END IF;
    -- PostgresStore's scores: cosine similarity, the inner product, or the negated L2 distance;
    -- an item scores its best field. Every match, best first, the key breaking ties (stable pages).
    -- A zero vector (a field or the query: the caller's embed may return one) has no direction:
    -- its cosine similarity is 0 (0090). pgvector's cosine distance is NaN there, which sorts
    -- above every number, so such an item came first in every search, with score NaN, and an
    -- item with one such field scored NaN whatever its other fields.
    RETURN QUERY
    SELECT i.namespace, i.item_key, i.value, i.created_at, i.updated_at, s.score
      FROM (SELECT v.item_key,
                   max(CASE store_search.distance_type
                         WHEN 'cosine' THEN coalesce(nullif(1 - (v.embedding <=> store_search.query), 'NaN'), 0)
                         WHEN 'inner_product' THEN -(v.embedding <#> store_search.query)
                         ELSE -(v.embedding <-> store_search.query) END) AS score
              FROM pgmem.store_vector v WHERE v.scope_id = store_search.scope
             GROUP BY v.item_key) s
      JOIN pgmem.store_item i ON i.scope_id = store_search.scope AND i.item_key = s.item_key
     WHERE (i.expires_at IS NULL OR i.expires_at > pg_catalog.clock_timestamp())
       AND pgmem.store_filter_match(i.value, store_search.filter)
     ORDER BY s.score DESC NULLS LAST, i.item_key
     LIMIT coalesce(store_search.lim, 10000 - coalesce(store_search.off, 0)) OFFSET store_search.off;
END
$$;
COMMENT ON FUNCTION pgmem.store_search(text, vector, text, text, jsonb, integer, integer) IS
'Vector search of the transaction''s scope''s field vectors (a store with its own embed): every item that is not expired and matches the filter, scored as PostgresStore scores it (cosine: 1 - cosine distance, 0 for a zero vector, field or query; inner_product: the inner product; l2: minus the L2 distance; an item''s best field), best first, ties by key; lim and off page it, within a window of 10,000 (lim NULL: the rest of it). A query of another model or dimension than the scope''s vectors, or of a scope whose items are pgmem''s pieces, is refused (22000). An exact scan: no floor, nothing dropped.';

-- A search through pieces of a namespace of field vectors finds no piece: refused instead, as
-- put_item refuses to write it (0087). Before, a store without an embed (a debugging script, a
-- service opened without the application's index) answered nothing, without a word.
CREATE OR REPLACE FUNCTION pgmem.store_pieces_check(scope text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
DECLARE
    bound record;
BEGIN
    SELECT * INTO bound FROM pgmem.store_vector_model(store_pieces_check.scope);
    IF FOUND THEN
        RAISE EXCEPTION 'store_pieces_check: namespace % is indexed with field vectors of model %, not with pgmem''s pieces',
            left(store_pieces_check.scope, 200), bound.model_id USING ERRCODE = '22000',
            HINT = 'Search it with the index config (embed) the namespace was written with.';
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION pgmem.store_pieces_check(text) IS
'True when the transaction''s scope may be searched through pgmem''s pieces: raises 22000 when its store items are indexed with field vectors (a store with its own embed), naming the model. A LangGraph store''s search through pieces runs it with each namespace''s recall.';

CREATE OR REPLACE FUNCTION pgmem.refresh_items(scope text, item_keys text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'refresh_items: scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(refresh_items.scope), true);
    -- The scope row first, FOR KEY SHARE as its writers hold it (0081): without it a refresh held
    -- items while forget_scope held the scope row and went on to delete them, and the refresh's
    -- transaction then waited for forget_scope (a deadlock in tests/test_mixed_async_ttl.py).
    PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = refresh_items.scope FOR KEY SHARE;
    -- Store items in key order (the lock order); an item a writer holds is skipped: the write
    -- sets its expiry anyway, and a read never waits for one.
    WITH locked AS (
        SELECT i.item_key FROM pgmem.store_item i
         WHERE i.scope_id = refresh_items.scope AND i.item_key = ANY (refresh_items.item_keys)
           AND i.ttl_minutes IS NOT NULL AND i.expires_at > pg_catalog.clock_timestamp()
         ORDER BY i.item_key
           FOR UPDATE SKIP LOCKED)
    UPDATE pgmem.store_item i SET expires_at = pg_catalog.now() + pg_catalog.make_interval(secs => i.ttl_minutes * 60)
      FROM locked WHERE i.scope_id = refresh_items.scope AND i.item_key = locked.item_key;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION pgmem.refresh_items(text, text[]) IS
'Move the expiry of the named items of the transaction''s scope to now() + their ttl (LangGraph''s refresh_ttl on get and search); items without a ttl, expired, or being written right now are left as they are. Returns how many moved.';

CREATE OR REPLACE FUNCTION pgmem.expire_items(scope text, max_items integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    k text;
    keys text[];
    doomed text[];
    ends timestamptz[];
    gone_pieces bigint[];
    gone_facts bigint[];
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'expire_items: scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF max_items IS NULL OR max_items < 1 OR max_items > 1000000 THEN
        RAISE EXCEPTION 'expire_items: max_items must be between 1 and 1000000' USING ERRCODE = '22023';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(expire_items.scope), true);
    -- The scope row first, FOR KEY SHARE as its writers hold it (0054): a forget_scope in flight
    -- is waited for, or waits for this.
    PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = expire_items.scope FOR KEY SHARE;
    -- Then the expired items, in key order, FOR UPDATE (the lock order: store item, then its
    -- thread, turn and pieces, which delete_item's forget_thread takes); one being written now
    -- is skipped: it is no longer expired when that write commits, or the next sweep takes it.
    keys := ARRAY(
        SELECT i.item_key FROM pgmem.store_item i
         WHERE i.scope_id = expire_items.scope AND i.expires_at <= pg_catalog.now()
         ORDER BY i.item_key COLLATE "C" LIMIT max_items
           FOR UPDATE SKIP LOCKED);
    -- Then their threads, FOR UPDATE and sorted (as apply_retention takes a scope's expiring
    -- threads), so that no writer adds to them: the ids of what goes are read once, here.
    doomed := ARRAY(SELECT DISTINCT i.thread_id FROM pgmem.store_item i
                     WHERE i.scope_id = expire_items.scope AND i.item_key = ANY (keys) AND i.thread_id IS NOT NULL
                     ORDER BY 1);
    PERFORM 1 FROM pgmem.thread th WHERE th.scope_id = expire_items.scope AND th.thread_id = ANY (doomed)
      ORDER BY th.thread_id FOR UPDATE;
    gone_pieces := ARRAY(SELECT p.piece_id FROM pgmem.piece p
                          WHERE p.scope_id = expire_items.scope AND p.kind = 'memory' AND p.thread_id = ANY (doomed));
    gone_facts := ARRAY(SELECT f.fact_id FROM pgmem.fact f
                         WHERE f.scope_id = expire_items.scope AND f.thread_id = ANY (doomed));
    -- Each goes as delete_item takes it (its field vectors, turn, pieces), and the recall-log rows
    -- that returned any of them in one read of the log at the end: once an item, the sweep cost
    -- its items times the scope's log rows (0044).
    -- Their expiry times, remembered below as delete_item remembers a delete (0092).
    ends := ARRAY(SELECT i.expires_at FROM unnest(keys) WITH ORDINALITY AS u(key, n)
                    JOIN pgmem.store_item i ON i.scope_id = expire_items.scope AND i.item_key = u.key
                   ORDER BY u.n);
    FOREACH k IN ARRAY keys LOOP
        PERFORM pgmem._delete_item_rows(expire_items.scope, k);
    END LOOP;
    -- An expiry is a delete at expires_at (0092): the keys are remembered at that time
    -- (pgmem.store_tombstone, as delete_item remembers a delete), so an import's conditional
    -- put of a copy written before the expiry does not bring the item back. Before, the sweep
    -- left no record and such a copy was written again. (One older than the 30 days a record
    -- is kept is not written.)
    INSERT INTO pgmem.store_tombstone AS t (scope_id, key_hash, deleted_at)
    SELECT expire_items.scope, sha256(convert_to(u.key, 'UTF8')), max(u.ended)
      FROM unnest(keys, ends) AS u(key, ended)
     WHERE u.ended > pg_catalog.now() - interval '30 days'
     GROUP BY 2 ORDER BY 2
    ON CONFLICT (scope_id, key_hash) DO UPDATE SET deleted_at = greatest(t.deleted_at, excluded.deleted_at);
    PERFORM pgmem._prune_tombstones(expire_items.scope);  -- kept 30 days, as a delete's (0093)
    IF cardinality(doomed) > 0 THEN
        PERFORM pgmem._forget_logs(expire_items.scope, doomed, '{}', gone_pieces, gone_facts);
    END IF;
    -- A namespace left listed without items (its last delete met a writer in flight) goes now.
    PERFORM pgmem._drop_empty_namespace(expire_items.scope, keys[cardinality(keys)]);
    RETURN cardinality(keys);
END
$$;
COMMENT ON FUNCTION pgmem.expire_items(text, integer) IS
'Remove up to max_items expired store items of the transaction''s scope the way pgmem.delete_item removes an item (field vectors, turn, pieces, recall-log rows, directory entry, and the key remembered in pgmem.store_tombstone, at its expires_at since 0092, so an import of a copy older than the expiry does not write it again), and the namespace''s directory entries when it holds no item, even when nothing expired (entries its last deletes left listed: a writer was in flight, or two transactions deleted its last items at once, each still seeing the other''s). PgmemStore''s TTL sweeper calls it for each namespace of its directory. Returns how many went.';

DROP POLICY IF EXISTS maintenance_read ON pgmem.store_item;
CREATE POLICY maintenance_read ON pgmem.store_item AS PERMISSIVE FOR SELECT TO pgmem_owner
    USING ((SELECT pg_catalog.current_setting('pgmem.maintenance', true) = 'on'
                   AND pg_catalog.pg_has_role(SESSION_USER, 'pgmem_owner', 'USAGE')));
COMMENT ON POLICY maintenance_read ON pgmem.store_item IS
    'pgmem.sweep_expired_items (which sets pgmem.maintenance) finds the scopes holding expired items when the login is a member of pgmem_owner; SELECT only.';
-- The sweep also finds the directory entries of scopes that hold no item (0084), across scopes.
DROP POLICY IF EXISTS maintenance_read ON pgmem.store_namespace;
CREATE POLICY maintenance_read ON pgmem.store_namespace AS PERMISSIVE FOR SELECT TO pgmem_owner
    USING ((SELECT pg_catalog.current_setting('pgmem.maintenance', true) = 'on'
                   AND pg_catalog.pg_has_role(SESSION_USER, 'pgmem_owner', 'USAGE')));
COMMENT ON POLICY maintenance_read ON pgmem.store_namespace IS
    'pgmem.sweep_expired_items (which sets pgmem.maintenance) finds the directory entries of scopes that hold no store item when the login is a member of pgmem_owner; SELECT only.';

CREATE OR REPLACE FUNCTION pgmem.sweep_expired_items(max_items integer DEFAULT 100000)
RETURNS TABLE (scope_id text, items integer)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    prior_maintenance text := current_setting('pgmem.maintenance', true);
    prior_scope text := current_setting('pgmem.scope', true);
    scopes text[];
    emptied text[];
    s text;
    expiring boolean;
    left_over integer := max_items;
BEGIN
    IF max_items IS NULL OR max_items < 1 OR max_items > 10000000 THEN
        RAISE EXCEPTION 'sweep_expired_items: max_items must be between 1 and 10000000' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.row_security_active('pgmem.store_item'::regclass)
       AND NOT (pg_catalog.pg_has_role(session_user, 'pgmem_owner', 'USAGE')
                AND pg_catalog.pg_has_role(current_user, 'pgmem_owner', 'USAGE')) THEN
        RAISE EXCEPTION 'the sweep must see every scope, and % (as %) sees only its own under row-level security',
            session_user, current_user
            USING ERRCODE = '42501',
                  HINT = 'Run SELECT * FROM pgmem.sweep_expired_items() as the role that migrates pgmem (a login member of pgmem_owner) or a superuser; an application sweeps its own namespaces with pgmem.expire_items(scope).';
    END IF;
    PERFORM set_config('pgmem.maintenance', 'on', true);
    scopes := ARRAY(SELECT DISTINCT i.scope_id FROM pgmem.store_item i
                     WHERE i.expires_at IS NOT NULL AND i.expires_at <= pg_catalog.now());
    -- Scopes listed in a store directory that hold no item (0084): two deletes of a namespace's
    -- last two items at once each still see the other's item, so neither removes the entry
    -- (pgmem._drop_empty_namespace never waits), and no later delete of the scope may come.
    emptied := ARRAY(SELECT DISTINCT n.scope_name FROM pgmem.store_namespace n
                      WHERE NOT EXISTS (SELECT 1 FROM pgmem.store_item i WHERE i.scope_id = n.scope_name));
    PERFORM set_config('pgmem.maintenance', coalesce(prior_maintenance, ''), true);
    -- Scopes in bytewise order (COLLATE "C", 0077), the order of a store batch's Python sort: in
    -- one transaction, a sweep that went through them in an en_US database's order (a/x before
    -- B/x) and a batch deleting in both (B/x first) could each hold what the other waited for.
    -- The emptied scopes go in the same pass and order (0084), not after it.
    FOR s, expiring IN
        SELECT d.scope_id, d.expiring
          FROM (SELECT u.scope_id, bool_or(u.expiring)
                  FROM (SELECT x, true FROM unnest(scopes) AS x
                        UNION ALL SELECT x, false FROM unnest(emptied) AS x) AS u(scope_id, expiring)
                 GROUP BY u.scope_id) AS d(scope_id, expiring)
         ORDER BY d.scope_id COLLATE "C"
    LOOP
        -- Inside each scope in turn, as its application would delete.
        PERFORM set_config('pgmem.scope', s, true);
        IF expiring THEN
            CONTINUE WHEN left_over < 1;  -- max_items bounds the items; emptied scopes remove none
            scope_id := s;
            items := pgmem.expire_items(s, left_over);
            left_over := left_over - items;
            RETURN NEXT;
        ELSE
            -- The scope row first, FOR KEY SHARE as expire_items holds it (a forget_scope in
            -- flight is waited for), then the entries as a delete removes them: only when the
            -- scope's directory lock is free at once (a put in flight keeps its entry) and no
            -- item is left, read again after that lock.
            PERFORM 1 FROM pgmem.scope sc WHERE sc.scope_id = s FOR KEY SHARE;
            IF pgmem._drop_empty_namespace(s, NULL) THEN
                scope_id := s;
                items := 0;
                RETURN NEXT;
            END IF;
        END IF;
    END LOOP;
    PERFORM set_config('pgmem.scope', coalesce(prior_scope, ''), true);
END
$$;
COMMENT ON FUNCTION pgmem.sweep_expired_items(integer) IS
'Remove expired LangGraph store items of every scope (at most max_items in all), each through pgmem.expire_items inside its scope, so an expiry removes what a delete removes; and the store directory entries (pgmem.store_namespace) of every scope that holds no item (left by two deletes of a namespace''s last items at once), each through pgmem._drop_empty_namespace inside its scope, so a put in flight keeps its entry. Scopes in bytewise order. For a DBA to schedule (pg_cron: SELECT cron.schedule(''pgmem-ttl'', ''*/5 * * * *'', ''SELECT * FROM pgmem.sweep_expired_items()'')), as a login member of pgmem_owner or a superuser (42501 for a login that sees one scope). One row per scope with expired items: how many went (0 when writers held them all); and one, items 0, per scope whose directory entries went with no item removed (a scope whose entries a put in flight kept is not listed).';
