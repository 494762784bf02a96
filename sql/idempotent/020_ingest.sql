-- Writing memory: turns with their pieces, facts, and reblending. Re-runnable.

CREATE OR REPLACE FUNCTION pgmem.turn_hashes(scope text, thread text, turn_indexes integer[])
RETURNS TABLE (turn_index integer, content_hash bytea)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- In another scope every turn would look new (and be embedded again, then refused on write).
    PERFORM pgmem.check_scope(turn_hashes.scope);
    RETURN QUERY
    SELECT t.turn_index, t.content_hash FROM pgmem.turn t
     WHERE t.scope_id = turn_hashes.scope AND t.thread_id = turn_hashes.thread
       AND t.turn_index = ANY (turn_indexes);
END
$$;
COMMENT ON FUNCTION pgmem.turn_hashes(text, text, integer[]) IS
'Stored content hashes of the given turns: the client skips (and never embeds) turns whose hash is unchanged.';

CREATE OR REPLACE FUNCTION pgmem.pending_turns(scope text, stored_before timestamptz)
RETURNS TABLE (thread_id text, turn_index integer, turn_time timestamptz, messages jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF stored_before IS NULL THEN
        RAISE EXCEPTION 'pending_turns: stored_before must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- Read under row-level security like every read: the scope must be this transaction's.
    PERFORM pgmem.check_scope(pending_turns.scope);
    RETURN QUERY
    SELECT t.thread_id, t.turn_index, t.turn_time, t.messages FROM pgmem.turn t
     WHERE t.scope_id = pending_turns.scope AND t.ingested_at < stored_before
     ORDER BY t.thread_id, t.turn_index;
END
$$;
COMMENT ON FUNCTION pgmem.pending_turns(text, timestamptz) IS
'Turns of a scope stored before a moment (a rebuild''s start): what a resumable rebuild still has to redo. The scope must be the transaction''s pgmem.scope (42501 otherwise).';

-- Before metadata was added (issue 15): dropped so a call cannot skip the metadata checks.
DROP FUNCTION IF EXISTS pgmem.put_turn(text, text, integer, timestamptz, jsonb, bytea, text, text[], integer[], text[], text[], @VECTOR_SCHEMA@.vector[], double precision, boolean, boolean, @VECTOR_SCHEMA@.vector);

CREATE OR REPLACE FUNCTION pgmem.put_turn(
    scope text,
    thread text,
    turn_index integer,
    turn_time timestamptz,
    messages jsonb,
    content_hash bytea,
    model_id text,
    unit_kinds text[],
    source_indexes integer[],
    labels text[],
    bodies text[],
    vectors vector[],
    weight double precision DEFAULT 0.8,
    reembed boolean DEFAULT false,
    force boolean DEFAULT false,
    context vector DEFAULT NULL,
    metadata jsonb DEFAULT '{}'
) RETURNS pgmem.put_result
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer := coalesce(array_length(vectors, 1), 0);
    key smallint;
    old_hash bytea;
    ctx vector;
    status text := 'inserted';
    meta jsonb := coalesce(put_turn.metadata, '{}'::jsonb);
BEGIN
    IF scope IS NULL OR thread IS NULL OR turn_index IS NULL OR messages IS NULL OR content_hash IS NULL OR model_id IS NULL THEN
        RAISE EXCEPTION 'put_turn: scope, thread, turn_index, messages, content_hash and model_id must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(put_turn.scope), true);
    IF turn_index < 0 THEN
        RAISE EXCEPTION 'put_turn: turn_index must be >= 0, got %', turn_index USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(meta) <> 'object' THEN
        RAISE EXCEPTION 'put_turn: metadata must be a JSON object, got a JSON %', jsonb_typeof(meta)
            USING ERRCODE = '22023', HINT = 'For example {"channel": "voice", "project": "atlas"}; {} (or NULL) for none.';
    END IF;
    IF octet_length(meta::text) > 4096 THEN
        RAISE EXCEPTION 'put_turn: metadata is % bytes as JSON text; at most 4,096', octet_length(meta::text)
            USING ERRCODE = '22023', HINT = 'Metadata is for short filterable labels; keep content in the messages.';
    END IF;
    IF weight IS NULL OR weight < 0 OR weight > 1 THEN
        RAISE EXCEPTION 'put_turn: weight must be between 0 and 1, got %', weight USING ERRCODE = '22023';
    END IF;
    IF n = 0 THEN
        RAISE EXCEPTION 'put_turn: a turn needs at least one piece' USING ERRCODE = '22023',
            HINT = 'A turn whose messages are all empty has nothing to store.';
    END IF;
    IF coalesce(array_length(unit_kinds, 1), 0) <> n OR coalesce(array_length(source_indexes, 1), 0) <> n
       OR coalesce(array_length(labels, 1), 0) <> n OR coalesce(array_length(bodies, 1), 0) <> n THEN
        RAISE EXCEPTION 'put_turn: unit_kinds, source_indexes, labels, bodies and vectors must have the same length (% vectors)', n
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgmem.check_vectors(vectors, 'piece.embedding', 'vectors');
    key := pgmem.bind_scope_model(scope, model_id, vector_dims(vectors[1]), 'piece', reembed);

    -- Lock order (docs/architecture.md): scope (SHARE, in bind_scope_model), then the thread
    -- (KEY SHARE: writers of one thread run side by side, a forget of the thread, FOR UPDATE,
    -- waits for them or they for it), then the turn, then its pieces. A thread forgotten while
    -- this waited is gone when the lock is granted: it is created again, so the turn is stored
    -- after the forget (never a foreign-key error).
    LOOP
        INSERT INTO pgmem.thread AS th (scope_id, thread_id) VALUES (put_turn.scope, put_turn.thread)
        ON CONFLICT (scope_id, thread_id) DO NOTHING;
        PERFORM 1 FROM pgmem.thread th
          WHERE th.scope_id = put_turn.scope AND th.thread_id = put_turn.thread FOR KEY SHARE;
        EXIT WHEN FOUND;
    END LOOP;

    IF put_turn.context IS NOT NULL THEN
        -- The caller embedded the turn's text as its context (the seed's +0.5-point option).
        PERFORM pgmem.check_vectors(ARRAY[put_turn.context], 'piece.embedding', 'context');
        ctx := l2_normalize(put_turn.context);
    ELSE
        ctx := pgmem.unit_mean(vectors);
    END IF;
    -- Then the turn. A new turn is inserted at once, so a concurrent writer of the same new turn
    -- waits on its key and finds it stored (never two sets of pieces); a stored turn is locked
    -- FOR UPDATE, so concurrent writers of one turn serialise here.
    LOOP
        INSERT INTO pgmem.turn AS t (scope_id, thread_id, turn_index, turn_time, messages, content_hash, context,
                                     blend_weight, model_key, metadata)
        VALUES (scope, thread, turn_index, turn_time, messages, content_hash, ctx, weight, key, meta)
        ON CONFLICT (scope_id, thread_id, turn_index) DO NOTHING;
        EXIT WHEN FOUND;
        SELECT t.content_hash INTO old_hash FROM pgmem.turn t
         WHERE t.scope_id = put_turn.scope AND t.thread_id = put_turn.thread AND t.turn_index = put_turn.turn_index
           FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        IF old_hash = put_turn.content_hash AND NOT coalesce(force, false) THEN
            -- Same content: nothing is embedded or rewritten, but new metadata is kept.
            UPDATE pgmem.turn t SET metadata = meta
             WHERE t.scope_id = put_turn.scope AND t.thread_id = put_turn.thread AND t.turn_index = put_turn.turn_index
               AND t.metadata IS DISTINCT FROM meta;
            RETURN ROW('unchanged', 0)::pgmem.put_result;
        END IF;
        status := 'replaced';
        DELETE FROM pgmem.piece p
         WHERE p.scope_id = put_turn.scope AND p.thread_id = put_turn.thread AND p.turn_index = put_turn.turn_index;
        UPDATE pgmem.turn t
           SET turn_time = put_turn.turn_time, messages = put_turn.messages, content_hash = put_turn.content_hash,
               context = ctx, blend_weight = weight, model_key = key, metadata = meta, ingested_at = now()
         WHERE t.scope_id = put_turn.scope AND t.thread_id = put_turn.thread AND t.turn_index = put_turn.turn_index;
        EXIT;
    END LOOP;

    INSERT INTO pgmem.piece (scope_id, kind, unit_kind, thread_id, turn_index, source_index, seq,
                             label, body, raw_embedding, embedding, model_key)
    SELECT put_turn.scope, 'memory', u.kind, put_turn.thread, put_turn.turn_index, u.src,
           (row_number() OVER (PARTITION BY u.src ORDER BY u.ord))::integer - 1,
           u.label, u.body, l2_normalize(u.v), pgmem.blend(u.v, ctx, weight), key
      FROM unnest(unit_kinds, source_indexes, labels, bodies, vectors) WITH ORDINALITY
           AS u(kind, src, label, body, v, ord)
     ORDER BY u.ord;
    RETURN ROW(status, n)::pgmem.put_result;
END
$$;
COMMENT ON FUNCTION pgmem.put_turn(text, text, integer, timestamptz, jsonb, bytea, text, text[], integer[], text[], text[], vector[], double precision, boolean, boolean, vector, jsonb) IS
'Store one sealed turn and its pieces atomically: unchanged hash = no write (unless force, used by rebuild) except new metadata; changed = pieces replaced. Computes the turn context (unit mean of the piece vectors, or the given context vector) and each piece''s blended search vector in SQL. metadata: a JSON object of at most 4,096 bytes (22023 otherwise; NULL is {}), stored on the turn and filtered on by memory_recall(metadata_filter => ...).';

CREATE OR REPLACE FUNCTION pgmem.reblend(scope text, weight double precision DEFAULT 0.8, thread text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n bigint;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'reblend: scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(reblend.scope), true);
    IF weight IS NULL OR weight < 0 OR weight > 1 OR weight = 'NaN'::double precision THEN
        RAISE EXCEPTION 'reblend: weight must be between 0 and 1, got %', weight USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgmem.scope s WHERE s.scope_id = reblend.scope) THEN
        RAISE EXCEPTION 'reblend: scope % has no memory stored', reblend.scope USING ERRCODE = '42704',
            HINT = 'Check the scope name: scopes are created by their first stored turn.';
    END IF;
    UPDATE pgmem.piece p SET embedding = pgmem.blend(p.raw_embedding, t.context, weight)
      FROM pgmem.turn t
     WHERE p.scope_id = reblend.scope AND p.kind = 'memory'
       AND (reblend.thread IS NULL OR p.thread_id = reblend.thread)
       AND t.scope_id = p.scope_id AND t.thread_id = p.thread_id AND t.turn_index = p.turn_index;
    GET DIAGNOSTICS n = ROW_COUNT;
    UPDATE pgmem.turn t SET blend_weight = weight
     WHERE t.scope_id = reblend.scope AND (reblend.thread IS NULL OR t.thread_id = reblend.thread);
    RETURN n;
END
$$;
COMMENT ON FUNCTION pgmem.reblend(text, double precision, text) IS
'Rewrite the search vectors of a scope''s memory pieces with a new weight, from the stored raw and context vectors: no embedding call. Returns the pieces rewritten.';

-- What makes two facts the same: the same scope and the same (thread, turn, section, body),
-- compared exactly (case, spaces and all). The JSON array keeps NULL apart from '' and each
-- field apart from the next. 002_hardening.sql filled existing rows with this same expression.
CREATE OR REPLACE FUNCTION pgmem._fact_hash(thread text, turn integer, section text, body text)
RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.jsonb_build_array(thread, turn, section, body)::text, 'UTF8'))
$$;
COMMENT ON FUNCTION pgmem._fact_hash(text, integer, text, text) IS
'fact.content_hash: sha256 of [thread, turn, section, body] as JSON text. A fact whose scope and content hash are stored already is not stored again.';

CREATE OR REPLACE FUNCTION pgmem.add_facts(
    scope text,
    model_id text,
    bodies text[],
    vectors vector[],
    thread_ids text[] DEFAULT NULL,
    turn_indexes integer[] DEFAULT NULL,
    sections text[] DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer := coalesce(array_length(vectors, 1), 0);
    key integer;
BEGIN
    IF scope IS NULL OR model_id IS NULL OR bodies IS NULL THEN
        RAISE EXCEPTION 'add_facts: scope, model_id and bodies must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(add_facts.scope), true);
    IF coalesce(array_length(bodies, 1), 0) <> n
       OR (thread_ids IS NOT NULL AND coalesce(array_length(thread_ids, 1), 0) <> n)
       OR (turn_indexes IS NOT NULL AND coalesce(array_length(turn_indexes, 1), 0) <> n)
       OR (sections IS NOT NULL AND coalesce(array_length(sections, 1), 0) <> n) THEN
        RAISE EXCEPTION 'add_facts: bodies, vectors and the optional arrays must have the same length (% vectors)', n
            USING ERRCODE = '22023';
    END IF;
    IF n = 0 THEN
        RETURN;
    END IF;
    PERFORM pgmem.check_vectors(vectors, 'fact.embedding', 'vectors');
    key := pgmem.bind_scope_model(scope, model_id, vector_dims(vectors[1]), 'fact', false);
    IF EXISTS (SELECT 1 FROM generate_series(1, n) AS u(i) WHERE bodies[u.i] IS NULL OR bodies[u.i] = '') THEN
        RAISE EXCEPTION 'add_facts: bodies[%] is empty',
            (SELECT min(u.i) FROM generate_series(1, n) AS u(i) WHERE bodies[u.i] IS NULL OR bodies[u.i] = '')
            USING ERRCODE = '22023';
    END IF;
    -- Idempotent by content: a fact stored already (same scope, thread, turn, section, body),
    -- or repeated in this call, is skipped; only the ids of new rows come back.
    RETURN QUERY
    INSERT INTO pgmem.fact AS f (scope_id, thread_id, turn_index, section, body, embedding, model_key, content_hash)
    SELECT add_facts.scope, thread_ids[u.i], turn_indexes[u.i], sections[u.i], bodies[u.i],
           l2_normalize(vectors[u.i]), key,
           pgmem._fact_hash(thread_ids[u.i], turn_indexes[u.i], sections[u.i], bodies[u.i])
      FROM generate_series(1, n) AS u(i)
     ORDER BY u.i
    ON CONFLICT (scope_id, content_hash) DO NOTHING
    RETURNING f.fact_id;
END
$$;
COMMENT ON FUNCTION pgmem.add_facts(text, text, text[], vector[], text[], integer[], text[]) IS
'Store fact sentences (each optionally tied to a thread/turn or a section) with their vectors; returns the ids of the facts stored now. Idempotent by content: a fact whose (thread, turn, section, body) the scope holds already, or that repeats one earlier in the call, is skipped.';
