-- Vector helpers and the model registry. Re-runnable: CREATE OR REPLACE only.

CREATE OR REPLACE FUNCTION pgmem.blend(
    piece vector,
    context vector,
    weight double precision DEFAULT 0.8
) RETURNS vector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
    -- pgvector has no scalar product, so each weight becomes a constant vector
    -- (element-wise *); ~20x faster than unnest/array_agg.
    SELECT l2_normalize(
        l2_normalize(piece) * array_fill(weight::real, ARRAY[vector_dims(piece)])::vector
        + l2_normalize(context) * array_fill((1 - weight)::real, ARRAY[vector_dims(context)])::vector)
$$;
COMMENT ON FUNCTION pgmem.blend(vector, vector, double precision) IS
'unit(weight*unit(piece) + (1-weight)*unit(context)): the seed''s chunkSearchVector. The same function builds stored vectors (context = the turn) and query vectors (context = the whole message).';

CREATE OR REPLACE FUNCTION pgmem.unit_mean(vectors vector[])
RETURNS vector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
    SELECT l2_normalize(avg(l2_normalize(v))) FROM unnest(vectors) AS u(v)
$$;
COMMENT ON FUNCTION pgmem.unit_mean(vector[]) IS
'unit(mean of the unit vectors): a turn''s context vector from its pieces.';

CREATE OR REPLACE FUNCTION pgmem.column_dims(column_name text)
RETURNS integer
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
    SELECT v.dims FROM pgmem.vector_column v WHERE v.column_name = column_dims.column_name
$$;
COMMENT ON FUNCTION pgmem.column_dims(text) IS
'Dimension a vector column was installed with (piece.embedding or fact.embedding).';

-- The rule, once: the first problem of a vector array (or no row). check_vectors raises it; the
-- bulk writer (pgmem.put_turns) reports it for the one turn it concerns.
CREATE OR REPLACE FUNCTION pgmem.vectors_problem(vectors vector[], column_name text, what text)
RETURNS TABLE (code text, message text, hint text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    want integer := pgmem.column_dims(column_name);
    i integer;
BEGIN
    IF vectors IS NULL THEN
        RETURN QUERY SELECT '22004'::text, format('%s must not be NULL', what), NULL::text;
        RETURN;
    END IF;
    FOR i IN 1 .. coalesce(array_length(vectors, 1), 0) LOOP
        IF vectors[i] IS NULL THEN
            RETURN QUERY SELECT '22004'::text, format('%s[%s] is NULL', what, i), NULL::text;
            RETURN;
        END IF;
        IF vector_dims(vectors[i]) <> want THEN
            RETURN QUERY SELECT '22000'::text,
                format('%s[%s] has %s dimensions but %s was installed with %s', what, i, vector_dims(vectors[i]), column_name, want),
                'Embed with the model the schema was installed for, or reinstall with matching dimensions.'::text;
            RETURN;
        END IF;
        IF vector_norm(vectors[i]) = 0 THEN
            RETURN QUERY SELECT '22023'::text, format('%s[%s] is a zero vector', what, i), NULL::text;
            RETURN;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem.vectors_problem(vector[], text, text) IS
'The first problem of a vector array as (SQLSTATE, message, hint): NULL (22004), a NULL element (22004), wrong dimension for the column (22000), a zero vector (22023); no row when there is none. pgmem.check_vectors raises it.';

CREATE OR REPLACE FUNCTION pgmem.check_vectors(vectors vector[], column_name text, what text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    p record;
BEGIN
    SELECT * INTO p FROM pgmem.vectors_problem(vectors, column_name, what);
    IF p.hint IS NOT NULL THEN
        RAISE EXCEPTION '%', p.message USING ERRCODE = p.code, HINT = p.hint;
    ELSIF p.code IS NOT NULL THEN
        RAISE EXCEPTION '%', p.message USING ERRCODE = p.code;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.check_vectors(vector[], text, text) IS
'Raise 22004/22000/22023 if any vector is NULL, of the wrong dimension for the column, or zero (pgmem.vectors_problem).';

-- Registering a model is internal: pgmem_app reaches it only through bind_scope_model, which
-- requires the caller's write scope. Keys are max + 1 under a lock instead of a sequence, so a
-- registration rolled back burns nothing; they are integers, so committed registrations cannot
-- run out either (each costs a row in a shared table and a scope binding).
DROP FUNCTION IF EXISTS pgmem.model_key(text, integer, text);
DO $$
BEGIN
    -- The return type changed from smallint: CREATE OR REPLACE cannot change it.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                WHERE p.oid = 'pgmem.bind_scope_model(text, text, integer, text, boolean)'::regprocedure
                  AND p.prorettype = 'smallint'::regtype) THEN
        DROP FUNCTION pgmem.bind_scope_model(text, text, integer, text, boolean);
    END IF;
EXCEPTION WHEN undefined_function THEN
    NULL;
END
$$;

-- The rule for a model a vector column may hold, once: _model_key (every write), and the model
-- change's reads (reembed_status, reembed_pending), which until 0069 counted every piece as
-- pending for a model no vector of could ever be staged (dims -5, or 768 in a 384 column).
CREATE OR REPLACE FUNCTION pgmem.check_model(model_id text, dims integer, column_name text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
DECLARE
    want integer := pgmem.column_dims(column_name);
BEGIN
    IF model_id IS NULL OR dims IS NULL THEN
        RAISE EXCEPTION 'model_id and dims must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- The registry's own bound, said in one line (its check constraint's error carried the
    -- whole row as a DETAIL).
    IF char_length(model_id) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'model_id must be 1 to 200 characters, got %', char_length(model_id) USING ERRCODE = '22023';
    END IF;
    IF want IS NULL THEN
        RAISE EXCEPTION 'unknown vector column %', column_name USING ERRCODE = '22023';
    END IF;
    IF dims <> want THEN
        RAISE EXCEPTION 'model % gives % dimensions but % was installed with % dimensions',
            model_id, dims, column_name, want
            USING ERRCODE = '22000',
                  HINT = 'Configure the model the schema was installed for (PGMEM_PIECE_DIMS / PGMEM_FACT_DIMS), or install into a new database.';
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.check_model(text, integer, text) IS
'Raise unless a vector column (piece.embedding or fact.embedding) may hold vectors of the model: model_id and dims not NULL (22004), model_id 1 to 200 characters (22023), dims the column''s installed dimension (22000, naming both).';

CREATE OR REPLACE FUNCTION pgmem._model_key(model_id text, dims integer, column_name text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    key integer;
BEGIN
    PERFORM pgmem.check_model(model_id, dims, column_name);
    SELECT m.model_key INTO key FROM pgmem.embedding_model m
     WHERE m.model_id = _model_key.model_id AND m.dims = _model_key.dims;
    IF key IS NULL THEN
        -- One registration at a time (SELECTs and foreign-key checks do not wait); look again
        -- once the lock is held, in case another transaction registered the model meanwhile.
        LOCK TABLE pgmem.embedding_model IN SHARE ROW EXCLUSIVE MODE;
        SELECT m.model_key INTO key FROM pgmem.embedding_model m
         WHERE m.model_id = _model_key.model_id AND m.dims = _model_key.dims;
        IF key IS NULL THEN
            INSERT INTO pgmem.embedding_model (model_key, model_id, dims)
            SELECT coalesce(max(m.model_key), 0) + 1, _model_key.model_id, _model_key.dims FROM pgmem.embedding_model m
            RETURNING embedding_model.model_key INTO key;
        END IF;
    END IF;
    RETURN key;
END
$$;
COMMENT ON FUNCTION pgmem._model_key(text, integer, text) IS
'Internal (not granted to pgmem_app): find or register an embedding model for a vector column, key = max + 1 under a lock (no sequence: a rolled-back registration burns nothing); a dimension other than the installed one is an error naming both. Services register models through bind_scope_model, inside their scope.';

CREATE OR REPLACE FUNCTION pgmem.model_refusal(scope text, model_id text, dims integer, plane text DEFAULT 'piece')
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    bound_id text;
    bound_dims integer;
BEGIN
    IF scope IS NULL OR model_id IS NULL OR dims IS NULL THEN
        RAISE EXCEPTION 'model_refusal: scope, model_id and dims must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF plane IS NULL OR plane NOT IN ('piece', 'fact') THEN
        RAISE EXCEPTION 'plane must be piece or fact, got %', plane USING ERRCODE = '22023';
    END IF;
    PERFORM pgmem.check_scope(model_refusal.scope);
    SELECT m.model_id, m.dims INTO bound_id, bound_dims
      FROM pgmem.scope s
      JOIN pgmem.embedding_model m
        ON m.model_key = CASE WHEN plane = 'piece' THEN s.piece_model_key ELSE s.fact_model_key END
     WHERE s.scope_id = model_refusal.scope;
    IF NOT FOUND OR (bound_id = model_refusal.model_id AND bound_dims = model_refusal.dims) THEN
        RETURN NULL;
    END IF;
    RETURN format('scope %s stores %s vectors from model %s (%s dimensions); refusing model %s (%s dimensions)',
                  model_refusal.scope, plane, bound_id, bound_dims, model_refusal.model_id, model_refusal.dims);
END
$$;
COMMENT ON FUNCTION pgmem.model_refusal(text, text, integer, text) IS
'Why a write of the scope''s piece or fact plane with this model would be refused (the scope stores vectors of another model), or NULL when it would not: the check a client runs before embedding anything, and the message bind_scope_model raises. The scope must be the transaction''s pgmem.scope (42501 otherwise).';

-- A transaction that writes several scopes (a LangGraph store batch over several namespaces)
-- opens all of them, sorted, before it binds a model in any (0075): the registry's lock, held by
-- a registration to the end of the transaction, comes after every scope row the transaction
-- creates. A batch that registered a new model binding its first scope, then inserted its
-- second scope's row, waited for another writer that had inserted that row and was waiting for
-- the registry: a deadlock.
CREATE OR REPLACE FUNCTION pgmem.open_scope(scope text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(open_scope.scope), true);
    PERFORM pgmem._check_scope_name(open_scope.scope, 'open_scope');
    -- As put_item and set_retention: insert, then hold FOR KEY SHARE; a scope forgotten
    -- meanwhile is created again.
    LOOP
        INSERT INTO pgmem.scope AS s (scope_id) VALUES (open_scope.scope) ON CONFLICT (scope_id) DO NOTHING;
        PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = open_scope.scope FOR KEY SHARE;
        EXIT WHEN FOUND;
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem.open_scope(text) IS
'Create the scope''s row if it has none (no model bound) and hold it FOR KEY SHARE to the end of the transaction: a transaction writing several scopes opens them all, sorted, before it binds a model in any (bind_scope_model may register a new model, whose lock is held to the commit and comes after every scope row in the lock order, docs/architecture.md). The scope must be the transaction''s pgmem.scope (42501 otherwise).';

CREATE OR REPLACE FUNCTION pgmem.bind_scope_model(scope text, model_id text, dims integer, plane text DEFAULT 'piece', reembed boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    key integer;
    bound integer;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(bind_scope_model.scope), true);
    PERFORM pgmem._check_scope_name(bind_scope_model.scope, 'bind_scope_model');
    IF plane NOT IN ('piece', 'fact') THEN
        RAISE EXCEPTION 'plane must be piece or fact, got %', plane USING ERRCODE = '22023';
    END IF;
    -- Lock order (docs/architecture.md): the scope row first, in SHARE mode, so that writers of
    -- one scope run side by side (FOR SHARE conflicts neither with itself nor with the KEY SHARE
    -- that foreign keys take) while a change of the scope's model (an UPDATE of the row) waits
    -- for them. FOR UPDATE here serialised every writer of a scope, and deadlocked two
    -- transactions that each held the row's KEY SHARE (store_item's foreign key) and asked for
    -- the upgrade. A new scope's row is inserted before its model is registered (a registration
    -- holds pgmem.embedding_model's lock to the end of the transaction): registering first
    -- deadlocked with a writer that had already inserted the row, through put_item, and then
    -- registered the same new model. A plane's first write records its model before the SHARE
    -- lock is taken (an UPDATE only when the row is unbound), so two first writers serialise
    -- instead of deadlocking. A scope forgotten meanwhile (forget_scope deleted the row) is
    -- created again: the write lands after the forget. A transaction writing several scopes
    -- opens them all first (pgmem.open_scope, 0075), so a registration here creates no scope
    -- row after it.
    LOOP
        INSERT INTO pgmem.scope AS s (scope_id) VALUES (bind_scope_model.scope) ON CONFLICT (scope_id) DO NOTHING;
        key := pgmem._model_key(model_id, dims, plane || '.embedding');
        UPDATE pgmem.scope s
           SET piece_model_key = coalesce(s.piece_model_key, CASE WHEN plane = 'piece' THEN key END),
               fact_model_key = coalesce(s.fact_model_key, CASE WHEN plane = 'fact' THEN key END)
         WHERE s.scope_id = bind_scope_model.scope
           AND CASE WHEN plane = 'piece' THEN s.piece_model_key ELSE s.fact_model_key END IS NULL;
        SELECT CASE WHEN plane = 'piece' THEN s.piece_model_key ELSE s.fact_model_key END INTO bound
          FROM pgmem.scope s WHERE s.scope_id = bind_scope_model.scope FOR SHARE;
        EXIT WHEN FOUND;
    END LOOP;
    IF bound <> key AND NOT reembed THEN
        RAISE EXCEPTION '%', pgmem.model_refusal(bind_scope_model.scope, model_id, dims, plane)
            USING ERRCODE = '22000',
                  -- The fact plane keeps its model: pgmem reembed moves pieces only (0114).
                  HINT = CASE WHEN plane = 'fact'
                              THEN 'Add the scope''s facts with their model: pgmem reembed moves a scope''s pieces, not its facts, which keep the model they were stored with.'
                              ELSE 'Use the scope''s model, or change the scope''s model without downtime: pgmem reembed --to MODEL --scope SCOPE.' END;
    END IF;
    IF bound <> key THEN  -- a re-embed: waits for the scope's other writers
        UPDATE pgmem.scope s
           SET piece_model_key = CASE WHEN plane = 'piece' THEN key ELSE s.piece_model_key END,
               fact_model_key = CASE WHEN plane = 'fact' THEN key ELSE s.fact_model_key END
         WHERE s.scope_id = bind_scope_model.scope;
    END IF;
    RETURN key;
END
$$;
COMMENT ON FUNCTION pgmem.bind_scope_model(text, text, integer, text, boolean) IS
'Create the scope if needed and check (or, first time or with reembed, record) the model its piece or fact vectors come from.';
