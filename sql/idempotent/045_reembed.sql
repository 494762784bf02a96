-- A model change without downtime (issue 27). Re-runnable.
--
-- `pgmem reembed --to MODEL` (pgmem.reembed in Python) changes the model of a scope's piece
-- plane (memory pieces, LangGraph store items, document units) in three steps:
--   1. reembed_pending lists the pieces without a vector of the new model, a page at a time;
--   2. the client embeds their texts and stage_vectors writes the vectors into
--      pgmem.staged_vector, beside the serving ones: recall keeps serving the current model,
--      and an interrupted run resumes where it stopped (what is staged stays staged);
--   3. reembed_flip swaps them in, in one transaction: the scope's pieces, the turns' contexts
--      and the scope's model change together, so every query sees one model or the other.
-- A piece written meanwhile (by the old model) has no staged vector: the flip then changes
-- nothing and says how many are missing, and the client embeds those and flips again.

CREATE OR REPLACE FUNCTION pgmem.registered_model_key(model_id text, dims integer)
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
    SELECT m.model_key FROM pgmem.embedding_model m WHERE m.model_id = registered_model_key.model_id AND m.dims = registered_model_key.dims
$$;
COMMENT ON FUNCTION pgmem.registered_model_key(text, integer) IS
'The key of a registered embedding model (pgmem.embedding_model), NULL when it never stored a vector here.';

CREATE OR REPLACE FUNCTION pgmem.reembed_status(scope text, model_id text, dims integer)
RETURNS TABLE (current_model text, pieces bigint, staged bigint, pending bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
-- Whole-scope joins, hashed whatever the statistics (0095, as reembed_flip below).
SET enable_nestloop = off
AS $$
#variable_conflict use_column
DECLARE
    key integer;
BEGIN
    IF scope IS NULL OR model_id IS NULL OR dims IS NULL THEN
        RAISE EXCEPTION 'reembed_status: scope, model_id and dims must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM pgmem.check_model(model_id, dims, 'piece.embedding');
    key := pgmem.registered_model_key(model_id, dims);
    PERFORM pgmem.check_scope(reembed_status.scope);
    RETURN QUERY
    SELECT (SELECT m.model_id FROM pgmem.scope s JOIN pgmem.embedding_model m ON m.model_key = s.piece_model_key
             WHERE s.scope_id = reembed_status.scope),
           count(*),
           count(*) FILTER (WHERE p.model_key IS NOT DISTINCT FROM key OR sv.piece_id IS NOT NULL),
           count(*) FILTER (WHERE p.model_key IS DISTINCT FROM key AND sv.piece_id IS NULL)
      FROM pgmem.piece p
      LEFT JOIN pgmem.staged_vector sv
        ON sv.scope_id = p.scope_id AND sv.model_key = key AND sv.piece_id = p.piece_id
     WHERE p.scope_id = reembed_status.scope;
END
$$;
COMMENT ON FUNCTION pgmem.reembed_status(text, text, integer) IS
'Progress of a model change of the scope''s piece plane: the model recall serves now, the pieces, those with a vector of the new model (staged, or already stored under it) and those still to embed. The scope must be the transaction''s pgmem.scope; the model one piece.embedding may hold (pgmem.check_model).';

CREATE OR REPLACE FUNCTION pgmem.reembed_pending(scope text, model_id text, dims integer, max_rows integer DEFAULT 256,
                                                 after bigint DEFAULT 0)
RETURNS TABLE (piece_id bigint, embed_text text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    key integer;
BEGIN
    IF scope IS NULL OR model_id IS NULL OR dims IS NULL OR max_rows IS NULL OR after IS NULL THEN
        RAISE EXCEPTION 'reembed_pending: arguments must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF max_rows < 1 OR max_rows > 10000 THEN
        RAISE EXCEPTION 'reembed_pending: max_rows must be between 1 and 10000, got %', max_rows USING ERRCODE = '22023';
    END IF;
    PERFORM pgmem.check_model(model_id, dims, 'piece.embedding');
    key := pgmem.registered_model_key(model_id, dims);
    PERFORM pgmem.check_scope(reembed_pending.scope);
    -- The text each piece was embedded from when it was written: a memory piece's label and
    -- body (pgmem.pieces.Piece.text), a document unit's label, a newline and its body.
    RETURN QUERY
    SELECT p.piece_id,
           CASE WHEN p.kind = 'memory' THEN p.label || ' ' || p.body
                WHEN p.body <> '' THEN p.label || E'\n' || p.body
                ELSE p.label END
      FROM pgmem.piece p
     WHERE p.scope_id = reembed_pending.scope AND p.piece_id > after
       AND p.model_key IS DISTINCT FROM key
       AND NOT EXISTS (SELECT 1 FROM pgmem.staged_vector sv
                        WHERE sv.scope_id = p.scope_id AND sv.model_key = key AND sv.piece_id = p.piece_id)
     ORDER BY p.piece_id
     LIMIT max_rows;
END
$$;
COMMENT ON FUNCTION pgmem.reembed_pending(text, text, integer, integer, bigint) IS
'The next pieces (piece_id > after, at most max_rows, in piece_id order) of the scope that have no vector of the model yet, with the text to embed: step 1 of a model change. The scope must be the transaction''s pgmem.scope; the model one piece.embedding may hold (pgmem.check_model).';

CREATE OR REPLACE FUNCTION pgmem.stage_vectors(scope text, model_id text, piece_ids bigint[], vectors vector[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer := coalesce(array_length(vectors, 1), 0);
    key integer;
    written bigint;
BEGIN
    IF scope IS NULL OR model_id IS NULL OR piece_ids IS NULL THEN
        RAISE EXCEPTION 'stage_vectors: scope, model_id and piece_ids must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(stage_vectors.scope), true);
    IF n = 0 THEN
        RETURN 0;
    END IF;
    IF coalesce(array_length(piece_ids, 1), 0) <> n THEN
        RAISE EXCEPTION 'stage_vectors: piece_ids and vectors must have the same length (% vectors)', n
            USING ERRCODE = '22023';
    END IF;
    IF n > 10000 THEN
        RAISE EXCEPTION 'stage_vectors: at most 10,000 vectors a call, got %', n USING ERRCODE = '22023';
    END IF;
    PERFORM pgmem.check_vectors(vectors, 'piece.embedding', 'vectors');
    key := pgmem._model_key(model_id, vector_dims(vectors[1]), 'piece.embedding');
    -- Lock order (docs/architecture.md): only the pieces (KEY SHARE, the foreign key's lock,
    -- taken here so a piece deleted meanwhile is skipped, never a 23503), in piece order, and
    -- never waited for (0078): a piece a writer holds right now (put_turns replacing its turn,
    -- a forget, forget_scope, a store batch deleting items) is skipped, and staged by the next
    -- pass of the model change if it is still there (reembed_flip reports it pending). Waiting,
    -- staging held pieces in the order of its join while such a writer deleted them in the
    -- order of its scan, and each waited for a piece the other held (40P01, found by the slow
    -- variants of tests/test_mixed_writers.py); locking their turns or threads first met a store
    -- batch, which holds its items' threads in key order.
    INSERT INTO pgmem.staged_vector AS sv (scope_id, model_key, piece_id, raw_embedding)
    SELECT stage_vectors.scope, key, p.piece_id, l2_normalize(u.v)
      FROM (SELECT DISTINCT ON (x.id) x.id, x.v FROM unnest(piece_ids, vectors) WITH ORDINALITY AS x(id, v, ord)
             ORDER BY x.id, x.ord DESC) AS u
      JOIN pgmem.piece p ON p.scope_id = stage_vectors.scope AND p.piece_id = u.id
     ORDER BY p.piece_id
       FOR KEY SHARE OF p SKIP LOCKED
    ON CONFLICT (scope_id, model_key, piece_id) DO UPDATE SET raw_embedding = EXCLUDED.raw_embedding, staged_at = now();
    GET DIAGNOSTICS written = ROW_COUNT;
    RETURN written;
END
$$;
COMMENT ON FUNCTION pgmem.stage_vectors(text, text, bigint[], vector[]) IS
'Step 2 of a model change: store the new model''s vectors of the given pieces beside the serving ones (pgmem.staged_vector); recall is unchanged. A piece gone meanwhile is skipped, and so is one a writer holds right now (being replaced or forgotten: never waited for), which reembed_flip then reports pending if it is still there; a piece given twice keeps its last vector. Returns the vectors written.';

CREATE OR REPLACE FUNCTION pgmem.reembed_flip(scope text, model_id text, dims integer,
                                              document_weight double precision DEFAULT 0.8)
RETURNS TABLE (flipped boolean, pending bigint, pieces bigint, turns bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
-- Every join below takes the scope's pieces, turns and staged vectors whole: hashed, whatever the
-- statistics (0095). Planned on statistics older than the scope (the tables never analyzed, or
-- analyzed empty, as right after a first load), the planner took each side for one row and
-- joined them in nested loops, reading the scope's staged vectors once a piece: 1,000 document
-- units read 1,003,000 staged rows (4,000 now), and 3,000 units flipped back to a model they
-- had used took 46 s against 0.2 s (tests/test_reembed.py).
SET enable_nestloop = off
AS $$
#variable_conflict use_column
DECLARE
    key integer;
    bound integer;
    missing bigint;
    n_turns bigint;
    n_memory bigint;
    n_documents bigint;
BEGIN
    IF scope IS NULL OR model_id IS NULL OR dims IS NULL THEN
        RAISE EXCEPTION 'reembed_flip: scope, model_id and dims must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(reembed_flip.scope), true);
    -- The flip waits for the scope's writers in flight (the scope row, below), then counts the
    -- pieces still without a staged vector, each statement with a snapshot of its own: READ
    -- COMMITTED only (0106), as refresh_word_fold. Under REPEATABLE READ or SERIALIZABLE the
    -- transaction's snapshot predates the wait: a writer of the old model that committed
    -- meanwhile held the scope row only (FOR SHARE, no update to conflict with), so its pieces
    -- were neither counted nor moved, and the flip bound the scope to the new model with them
    -- left on the old one (a database whose default_transaction_isolation is repeatable read).
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'reembed_flip must run in a READ COMMITTED transaction, not %',
            upper(current_setting('transaction_isolation'))
            USING ERRCODE = '25000',
                  HINT = 'Run the model change at the default isolation level (SET default_transaction_isolation = ''read committed'' for its login): the flip must see the pieces of the writers it waits for.';
    END IF;
    IF document_weight IS NULL OR document_weight < 0 OR document_weight > 1 OR document_weight = 'NaN' THEN
        RAISE EXCEPTION 'reembed_flip: document_weight must be between 0 and 1, got %', document_weight
            USING ERRCODE = '22023';
    END IF;
    key := pgmem._model_key(model_id, dims, 'piece.embedding');
    -- Lock order (docs/architecture.md): the scope row first, FOR NO KEY UPDATE: it waits for
    -- the scope's writers (FOR SHARE in bind_scope_model) and they wait for it, while inserts
    -- elsewhere that only check the row's key (KEY SHARE) go on. Then the documents and the
    -- threads (KEY SHARE, sorted), so a forget in progress finishes first and a new one waits;
    -- then turns, then pieces, then the staged rows.
    SELECT s.piece_model_key INTO bound FROM pgmem.scope s WHERE s.scope_id = reembed_flip.scope FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reembed_flip: scope % holds no memory', reembed_flip.scope USING ERRCODE = '42704',
            HINT = 'Check the scope name: scopes are created by their first stored turn.';
    END IF;
    -- Already on the model: done, unless a write with reembed => true rebound the scope and left
    -- pieces of the old model in it. Until 0064 the flip returned here whatever the pieces, threw
    -- away the vectors staged for those, and the scope stayed on two models.
    IF bound IS NOT DISTINCT FROM key
       AND NOT EXISTS (SELECT 1 FROM pgmem.piece p WHERE p.scope_id = reembed_flip.scope AND p.model_key <> key) THEN
        DELETE FROM pgmem.staged_vector sv WHERE sv.scope_id = reembed_flip.scope AND sv.model_key = key;
        RETURN QUERY SELECT true, 0::bigint, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    PERFORM 1 FROM pgmem.document d WHERE d.scope_id = reembed_flip.scope ORDER BY d.document_id FOR KEY SHARE;
    PERFORM 1 FROM pgmem.thread th WHERE th.scope_id = reembed_flip.scope ORDER BY th.thread_id FOR KEY SHARE;
    SELECT count(*) INTO missing FROM pgmem.piece p
     WHERE p.scope_id = reembed_flip.scope AND p.model_key IS DISTINCT FROM key
       AND NOT EXISTS (SELECT 1 FROM pgmem.staged_vector sv
                        WHERE sv.scope_id = p.scope_id AND sv.model_key = key AND sv.piece_id = p.piece_id);
    IF missing > 0 THEN
        RETURN QUERY SELECT false, missing, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    -- Each turn's context is the unit mean of its pieces' new vectors (a turn stored with its
    -- text as context, ingest context="text", gets the mean too: its text is not embedded again).
    WITH c AS (
        SELECT p.thread_id, p.turn_index,
               pgmem.unit_mean(array_agg(coalesce(sv.raw_embedding, p.raw_embedding) ORDER BY p.piece_id)) AS ctx
          FROM pgmem.piece p
          LEFT JOIN pgmem.staged_vector sv ON sv.scope_id = p.scope_id AND sv.model_key = key AND sv.piece_id = p.piece_id
         WHERE p.scope_id = reembed_flip.scope AND p.kind = 'memory'
         GROUP BY p.thread_id, p.turn_index
        -- Only turns with a staged piece: a turn already on the model (written with it after a
        -- rebinding) keeps its context, which its pieces' search vectors were blended with.
        HAVING count(sv.piece_id) > 0
    )
    UPDATE pgmem.turn t SET context = c.ctx, model_key = key
      FROM c
     WHERE t.scope_id = reembed_flip.scope AND t.thread_id = c.thread_id AND t.turn_index = c.turn_index;
    GET DIAGNOSTICS n_turns = ROW_COUNT;
    UPDATE pgmem.piece p
       SET raw_embedding = sv.raw_embedding, embedding = pgmem.blend(sv.raw_embedding, t.context, t.blend_weight),
           model_key = key
      FROM pgmem.staged_vector sv, pgmem.turn t
     WHERE p.scope_id = reembed_flip.scope AND p.kind = 'memory'
       AND sv.scope_id = p.scope_id AND sv.model_key = key AND sv.piece_id = p.piece_id
       AND t.scope_id = p.scope_id AND t.thread_id = p.thread_id AND t.turn_index = p.turn_index;
    GET DIAGNOSTICS n_memory = ROW_COUNT;
    -- Document units: blended with their chunk's context at document_weight, as put_document
    -- does, except a unit stored alone (its search vector equal to its raw vector), which stays alone.
    WITH c AS (
        SELECT p.chunk_id, pgmem.unit_mean(array_agg(coalesce(sv.raw_embedding, p.raw_embedding) ORDER BY p.piece_id)) AS ctx
          FROM pgmem.piece p
          LEFT JOIN pgmem.staged_vector sv ON sv.scope_id = p.scope_id AND sv.model_key = key AND sv.piece_id = p.piece_id
         WHERE p.scope_id = reembed_flip.scope AND p.kind = 'document'
         GROUP BY p.chunk_id
    )
    UPDATE pgmem.piece p
       SET raw_embedding = sv.raw_embedding,
           embedding = CASE WHEN document_weight = 1 OR (p.embedding <=> p.raw_embedding) < 1e-6
                            THEN sv.raw_embedding ELSE pgmem.blend(sv.raw_embedding, c.ctx, document_weight) END,
           model_key = key
      FROM pgmem.staged_vector sv, c
     WHERE p.scope_id = reembed_flip.scope AND p.kind = 'document' AND p.chunk_id = c.chunk_id
       AND sv.scope_id = p.scope_id AND sv.model_key = key AND sv.piece_id = p.piece_id;
    GET DIAGNOSTICS n_documents = ROW_COUNT;
    UPDATE pgmem.scope s SET piece_model_key = key WHERE s.scope_id = reembed_flip.scope;
    -- Only this model's staged rows go (0075): another model's are vectors of the same texts (a
    -- flip changes no piece's text or id), still valid for a change to that model, which until
    -- then lost them silently and embedded every piece again.
    DELETE FROM pgmem.staged_vector sv WHERE sv.scope_id = reembed_flip.scope AND sv.model_key = key;
    RETURN QUERY SELECT true, 0::bigint, n_memory + n_documents, n_turns;
END
$$;
COMMENT ON FUNCTION pgmem.reembed_flip(text, text, integer, double precision) IS
'Step 3 of a model change: in this one transaction, swap the staged vectors of the model into every piece of the scope (search vectors blended again: memory pieces with their turn''s new context at the turn''s weight, document units with their chunk''s at document_weight), and make it the scope''s model. When a piece still has no vector of the model (written meanwhile), nothing changes: flipped is false and pending says how many to embed first. A scope already on the model whose pieces are not all of it (a write with reembed => true rebound it) has those pieces swapped in too; turns without a staged piece keep their contexts. The model''s staged vectors are then deleted; those staged for another model are kept (a flip changes no piece''s text) and go when that model flips, their pieces are deleted or the scope is forgotten. READ COMMITTED only (25000 under REPEATABLE READ or SERIALIZABLE, whose snapshot predates the wait for the scope''s writers, 0106). Returns flipped, pending, the pieces and turns rewritten.';

CREATE OR REPLACE FUNCTION pgmem.maintenance_scopes()
RETURNS TABLE (scope_id text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- The maintenance_read policy on pgmem.scope (050_security.sql) shows every scope to a login
    -- member of pgmem_owner while pgmem.maintenance is on; the application login sees none.
    PERFORM set_config('pgmem.maintenance', 'on', true);
    RETURN QUERY SELECT s.scope_id FROM pgmem.scope s ORDER BY s.scope_id;
    PERFORM set_config('pgmem.maintenance', '', true);
END
$$;
COMMENT ON FUNCTION pgmem.maintenance_scopes() IS
'The scopes a maintenance run (pgmem reembed --all) goes through: every scope for a superuser or a login member of pgmem_owner, none for the application login (row-level security).';
