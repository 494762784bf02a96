-- Writing memory: turns with their pieces, facts, and reblending. Re-runnable.

-- A piece's words: the one definition. Stored as text, the lexemes separated by a space: a
-- stripped tsvector kept a 4-byte entry beside each of them, and only the lexemes are read
-- (migration 020: 524 bytes a piece as a tsvector, 346 as text).
DROP FUNCTION IF EXISTS pgmem.piece_tsv(text, text);
CREATE OR REPLACE FUNCTION pgmem.piece_lexemes(label text, body text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pgmem, pg_temp
RETURN array_to_string(tsvector_to_array(to_tsvector('english'::regconfig, label || ' ' || body)), ' ');
COMMENT ON FUNCTION pgmem.piece_lexemes(text, text) IS
'The lexemes (english configuration, to_tsvector) of a piece''s label and body, sorted and separated by a space, as pgmem.piece_word stores them.';

-- Every piece's words, whoever inserts it (put_turns, put_document, a bulk load, a superuser in
-- psql): one rule the database keeps, so no piece can be missing from the word side. Once a
-- statement, from its transition table: one insert of all its pieces' words. A trigger a row (a
-- PL/pgSQL call and an insert for each piece) made a 400-turn put_turns 1.10-1.27 times as slow
-- and put_turn 1.11-1.15 (docs/bench/write-ab-0037.txt).
CREATE OR REPLACE FUNCTION pgmem._piece_words()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    INSERT INTO pgmem.piece_word (scope_id, piece_id, scope_no, kind, thread_id, lexemes)
    SELECT a.scope_id, a.piece_id, a.scope_no, a.kind, a.thread_id, pgmem.piece_lexemes(a.label, a.body)
      FROM added_pieces a
     ORDER BY a.scope_id, a.piece_id;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION pgmem._piece_words() IS
'Trigger function (once a statement): writes the words (pgmem.piece_word) of the pieces the statement inserted, from its transition table added_pieces.';
CREATE OR REPLACE TRIGGER piece_words_on_insert AFTER INSERT ON pgmem.piece
    REFERENCING NEW TABLE AS added_pieces
    FOR EACH STATEMENT EXECUTE FUNCTION pgmem._piece_words();
COMMENT ON TRIGGER piece_words_on_insert ON pgmem.piece IS
'Writes the inserted pieces'' words into pgmem.piece_word (pgmem._piece_words, once a statement); they go with the piece (foreign key, cascade).';

-- The stored hashes of many threads' turns at once (0038): ingest reads a scope's in one
-- statement, not one a thread (a backfill of many threads, a LangGraph batch of many items).
CREATE OR REPLACE FUNCTION pgmem.stored_turn_hashes(scope text, threads text[], turn_indexes integer[])
RETURNS TABLE (thread_id text, turn_index integer, content_hash bytea)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- In another scope every turn would look new (and be embedded again, then refused on write).
    PERFORM pgmem.check_scope(stored_turn_hashes.scope);
    IF coalesce(cardinality(threads), 0) <> coalesce(cardinality(turn_indexes), 0) THEN
        RAISE EXCEPTION 'stored_turn_hashes: % threads for % turn indexes; one thread per turn index',
            coalesce(cardinality(threads), 0), coalesce(cardinality(turn_indexes), 0) USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT t.thread_id, t.turn_index, t.content_hash
      FROM (SELECT DISTINCT k.thread_id, k.turn_index FROM unnest(threads, turn_indexes) AS k(thread_id, turn_index)) k
      JOIN pgmem.turn t ON t.scope_id = stored_turn_hashes.scope AND t.thread_id = k.thread_id
                       AND t.turn_index = k.turn_index;
END
$$;
COMMENT ON FUNCTION pgmem.stored_turn_hashes(text, text[], integer[]) IS
'Stored content hashes of the turns (threads[i], turn_indexes[i]) of the transaction''s scope (22023 when the arrays differ in length; a turn not stored has no row): the client skips (and never embeds) turns whose hash is unchanged.';

CREATE OR REPLACE FUNCTION pgmem.turn_hashes(scope text, thread text, turn_indexes integer[])
RETURNS TABLE (turn_index integer, content_hash bytea)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
    SELECT h.turn_index, h.content_hash
      FROM pgmem.stored_turn_hashes(scope, array_fill(thread, ARRAY[coalesce(cardinality(turn_indexes), 0)]),
                                    turn_indexes) h
$$;
COMMENT ON FUNCTION pgmem.turn_hashes(text, text, integer[]) IS
'Stored content hashes of the given turns of one thread (pgmem.stored_turn_hashes of that thread): the client skips (and never embeds) turns whose hash is unchanged.';

-- Before 0040 it returned neither metadata (a rebuild stored every turn again without it) nor the
-- content hash (a rebuild replaces a turn only while it is the one it read).
DROP FUNCTION IF EXISTS pgmem.pending_turns(text, timestamptz);
CREATE OR REPLACE FUNCTION pgmem.pending_turns(scope text, stored_before timestamptz)
RETURNS TABLE (thread_id text, turn_index integer, turn_time timestamptz, messages jsonb, metadata jsonb, content_hash bytea)
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
    SELECT t.thread_id, t.turn_index, t.turn_time, t.messages, t.metadata, t.content_hash FROM pgmem.turn t
     WHERE t.scope_id = pending_turns.scope AND t.ingested_at < stored_before
     ORDER BY t.thread_id, t.turn_index;
END
$$;
COMMENT ON FUNCTION pgmem.pending_turns(text, timestamptz) IS
'Turns of a scope stored before a moment (a rebuild''s start), with their metadata and content hash: what a resumable rebuild still has to redo (it replaces each only while its hash is this one: put_turns'' replace_hashes). The scope must be the transaction''s pgmem.scope (42501 otherwise).';

-- Before metadata was added (issue 15): dropped so a call cannot skip the metadata checks.
DROP FUNCTION IF EXISTS pgmem.put_turn(text, text, integer, timestamptz, jsonb, bytea, text, text[], integer[], text[], text[], @VECTOR_SCHEMA@.vector[], double precision, boolean, boolean, @VECTOR_SCHEMA@.vector);
-- Before replace_hashes (0040, a rebuild's condition): dropped so a named call stays unambiguous.
DROP FUNCTION IF EXISTS pgmem.put_turn(text, text, integer, timestamptz, jsonb, bytea, text, text[], integer[], text[], text[], @VECTOR_SCHEMA@.vector[], double precision, boolean, boolean, @VECTOR_SCHEMA@.vector, jsonb);
DROP FUNCTION IF EXISTS pgmem.put_turns(text, text, text[], integer[], timestamptz[], jsonb[], bytea[], integer[], text[], integer[], text[], text[], @VECTOR_SCHEMA@.vector[], double precision, boolean, boolean, @VECTOR_SCHEMA@.vector[], jsonb[]);

-- The shapes pgmem reads in a turn's messages (0091): Python's check_messages (pgmem/turns.py)
-- refuses the same before it embeds, and reads them back by it (a rebuild, pgmem.pending_turns):
-- a turn stored through SQL without them could not be rebuilt. Every message an object with a
-- string role; its content a string, a list of parts, an object or null; its tool_calls absent,
-- null or a list of objects whose function is an object with a string name and arguments that
-- are a string, JSON or null; nothing nested more than 64 levels (Python recurses on it); no
-- number Python cannot read back (pgmem._unreadable_number). The first problem as one line
-- naming the message (0-based, as JSON and Python count), or NULL.
-- The numbers a stored JSON value may not hold, because Python cannot read them back (0091, the
-- rule corrected in 0093 after review rt57): an integer of more than 4,300 digits (json.loads
-- fails the whole read: Python's limit on converting long integers) and a fraction beyond the
-- largest double (read back as infinity, which is no JSON). An integer beyond a double but of
-- fewer digits reads back exactly (a Python int), so it is stored, as LangGraph's stores store
-- it. $max is the largest double exactly (DBL_MAX, 309 digits), $big 10^4300. The one definition
-- of the rule in SQL: turn messages and metadata (pgmem._messages_problem, _turn_problem) and
-- store values (put_item); Python's pgmem.turns.unreadable_number is the same rule.
CREATE OR REPLACE FUNCTION pgmem._max_number()
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
RETURN jsonb_build_object(
    'max', '179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878171540458953514382464234321326889464182768467546703537516986049910576551282076245490090389328944075868508455133942304583236903222948165808559332123348274797826204144723168738177180919299881250404026184124858368'::numeric,
    'big', '1e4300'::numeric);
COMMENT ON FUNCTION pgmem._max_number() IS
'{"max": DBL_MAX, "big": 10^4300}, the bounds of the numbers Python reads back, for pgmem._unreadable_number (0091, 0093).';

-- A quoted body, not a SQL-standard one: that would depend on pgmem._max_number, and the
-- downgrade to base, dropping every function by the oids it listed first, met this one dropped
-- already with it.
CREATE OR REPLACE FUNCTION pgmem._unreadable_number(value jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT jsonb_path_exists(value,
        'strict $.** ? (@.type() == "number" && (@ >= $big || @ <= -$big || ((@ > $max || @ < -$max) && @.floor() != @)))',
        pgmem._max_number())
$$;
COMMENT ON FUNCTION pgmem._unreadable_number(jsonb) IS
'Whether a JSON value holds a number Python cannot read back: an integer of more than 4,300 digits, or a fraction beyond the largest double (0093; 0091 refused every number beyond a double, integers that read back exactly included). put_turn (messages, metadata) and put_item refuse such a value.';

CREATE OR REPLACE FUNCTION pgmem._messages_problem(messages jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    m jsonb;
    i integer;
    kind text;
    call jsonb;
    j integer;
    fn jsonb;
BEGIN
    IF jsonb_typeof(messages) IS DISTINCT FROM 'array' THEN
        RETURN NULL;  -- the caller's rule
    END IF;
    FOR m, i IN SELECT e.m, (e.n - 1)::integer FROM jsonb_array_elements(messages) WITH ORDINALITY AS e(m, n) LOOP
        IF jsonb_typeof(m) <> 'object' OR jsonb_typeof(m -> 'role') IS DISTINCT FROM 'string' THEN
            RETURN format('messages[%s] must be an object with a string role', i);
        END IF;
        kind := jsonb_typeof(m -> 'content');
        IF kind IN ('number', 'boolean') THEN
            RETURN format('messages[%s].content must be a string, a list of parts, an object (stored as its JSON) or null, got a JSON %s',
                          i, kind);
        END IF;
        kind := jsonb_typeof(m -> 'tool_calls');
        IF kind IS NOT NULL AND kind <> 'null' THEN
            IF kind <> 'array' THEN
                RETURN format('messages[%s].tool_calls must be a list of tool calls, got a JSON %s', i, kind);
            END IF;
            FOR call, j IN SELECT e.c, (e.n - 1)::integer FROM jsonb_array_elements(m -> 'tool_calls') WITH ORDINALITY AS e(c, n) LOOP
                fn := CASE WHEN jsonb_typeof(call) = 'object' THEN call -> 'function' END;
                IF jsonb_typeof(fn) IS DISTINCT FROM 'object' OR jsonb_typeof(fn -> 'name') IS DISTINCT FROM 'string' THEN
                    RETURN format('messages[%s].tool_calls[%s] must be an object whose function is an object with a string name', i, j);
                END IF;
                IF jsonb_typeof(fn -> 'arguments') IN ('number', 'boolean') THEN
                    RETURN format('messages[%s].tool_calls[%s].function.arguments must be a string or JSON', i, j);
                END IF;
            END LOOP;
        END IF;
        -- The message is level 0: a list or object at level 64 is nested 65 deep (Python's count,
        -- pgmem.turns.MAX_DEPTH).
        IF jsonb_path_exists(m, 'strict $.**{64 to last} ? (@.type() == "object" || @.type() == "array")') THEN
            RETURN format('messages[%s] nests more than 64 levels deep; at most 64', i);
        END IF;
        IF pgmem._unreadable_number(m) THEN
            RETURN format('messages[%s] holds a number Python cannot read back (an integer of more than 4,300 digits, or a fraction beyond the range of a double)', i);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION pgmem._messages_problem(jsonb) IS
'The first shape rule a turn''s messages (a JSON array) break, as one line naming the message, or NULL (0091): each message an object with a string role, content a string, list, object or null, tool_calls null or a list of objects whose function is an object with a string name (arguments a string, JSON or null), nothing nested more than 64 levels, no number Python cannot read back (pgmem._unreadable_number). Python''s check_messages, which a rebuild reads stored turns back with.';

-- The rules of one turn, once: the first thing wrong with it as (SQLSTATE, message, hint), or no
-- row. put_turn raises it; put_turns reports it for that turn and stores the others.
-- Before the turn time was one of them.
DROP FUNCTION IF EXISTS pgmem._turn_problem(text, integer, jsonb, bytea, jsonb, double precision, @VECTOR_SCHEMA@.vector[], @VECTOR_SCHEMA@.vector);
CREATE OR REPLACE FUNCTION pgmem._turn_problem(
    thread text,
    turn_index integer,
    messages jsonb,
    content_hash bytea,
    metadata jsonb,
    weight double precision,
    vectors vector[],
    context vector DEFAULT NULL,
    turn_time timestamptz DEFAULT NULL
) RETURNS TABLE (code text, message text, hint text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    meta jsonb := coalesce(_turn_problem.metadata, '{}'::jsonb);
    problem text;
BEGIN
    -- Only for a turn whose key fields are there (the order of the rules below).
    IF thread IS NOT NULL AND turn_index IS NOT NULL AND content_hash IS NOT NULL THEN
        problem := pgmem._messages_problem(messages);
    END IF;
    IF thread IS NULL OR turn_index IS NULL OR messages IS NULL OR content_hash IS NULL THEN
        RETURN QUERY SELECT '22004'::text,
            'put_turn: scope, thread, turn_index, messages, content_hash and model_id must not be NULL'::text, NULL::text;
    ELSIF turn_index < 0 THEN
        RETURN QUERY SELECT '22023'::text, format('put_turn: turn_index must be >= 0, got %s', turn_index), NULL::text;
    -- A stored turn time is read back as a Python datetime (rebuild, the MCP thread list): years
    -- 1 to 9999 in UTC, finite. Outside them a stored turn would make every read of it fail.
    ELSIF turn_time IS NOT NULL AND (NOT isfinite(turn_time) OR turn_time < '0001-01-01 00:00:00+00'::timestamptz
                                     OR turn_time >= '9999-12-31 00:00:00+00'::timestamptz + interval '1 day') THEN
        RETURN QUERY SELECT '22023'::text,
            format('put_turn: turn_time must be a finite time from year 1 to 9999 in UTC, got %s', turn_time),
            'Leave turn_time NULL for a turn without a time.'::text;
    ELSIF length(thread) NOT BETWEEN 1 AND 200 THEN  -- the thread table's check, as one line (not a 23514)
        RETURN QUERY SELECT '22023'::text, format('put_turn: thread must be 1 to 200 characters, got %s', length(thread)),
            NULL::text;
    -- 0091: Python's check_name, by which a rebuild reads the turn back.
    ELSIF pgmem._blank(thread) THEN
        RETURN QUERY SELECT '22023'::text, 'put_turn: thread must be a non-empty string, got only whitespace'::text,
            'A thread name needs a character that is not whitespace.'::text;
    ELSIF jsonb_typeof(messages) <> 'array' THEN
        RETURN QUERY SELECT '22023'::text, format('put_turn: messages must be a JSON array of chat messages, got a JSON %s',
                                                  jsonb_typeof(messages)), NULL::text;
    ELSIF problem IS NOT NULL THEN
        RETURN QUERY SELECT '22023'::text, 'put_turn: ' || problem,
            'Messages are OpenAI chat messages: {"role": "user", "content": "..."}; an assistant''s tool_calls are [{"id": ..., "function": {"name": ..., "arguments": ...}}].'::text;
    ELSIF jsonb_typeof(meta) <> 'object' THEN
        RETURN QUERY SELECT '22023'::text, format('put_turn: metadata must be a JSON object, got a JSON %s', jsonb_typeof(meta)),
            'For example {"channel": "voice", "project": "atlas"}; {} (or NULL) for none.'::text;
    ELSIF jsonb_path_exists(meta, 'strict $.**{64 to last} ? (@.type() == "object" || @.type() == "array")') THEN
        RETURN QUERY SELECT '22023'::text, 'put_turn: metadata nests more than 64 levels'::text,
            'Metadata is for short filterable labels; keep content in the messages.'::text;
    ELSIF pgmem._unreadable_number(meta) THEN
        RETURN QUERY SELECT '22023'::text, 'put_turn: metadata holds a number Python cannot read back (an integer of more than 4,300 digits, or a fraction beyond the range of a double)'::text,
            NULL::text;
    ELSIF octet_length(meta::text) > 4096 THEN
        RETURN QUERY SELECT '22023'::text, format('put_turn: metadata is %s bytes as JSON text; at most 4,096', octet_length(meta::text)),
            'Metadata is for short filterable labels; keep content in the messages.'::text;
    ELSIF weight IS NULL OR weight < 0 OR weight > 1 OR weight = 'NaN'::double precision THEN
        RETURN QUERY SELECT '22023'::text, format('put_turn: weight must be between 0 and 1, got %s', weight), NULL::text;
    ELSIF coalesce(array_length(vectors, 1), 0) = 0 THEN
        RETURN QUERY SELECT '22023'::text, 'put_turn: a turn needs at least one piece'::text,
            'A turn whose messages are all empty has nothing to store.'::text;
    ELSE
        RETURN QUERY SELECT * FROM pgmem.vectors_problem(vectors, 'piece.embedding', 'vectors');
        IF NOT FOUND AND _turn_problem.context IS NOT NULL THEN
            RETURN QUERY SELECT * FROM pgmem.vectors_problem(ARRAY[_turn_problem.context], 'piece.embedding', 'context');
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._turn_problem(text, integer, jsonb, bytea, jsonb, double precision, vector[], vector, timestamptz) IS
'The first rule a turn breaks, as (SQLSTATE, message, hint), or no row: NULL key fields or messages (22004), turn_index < 0, turn_time infinite or outside years 1 to 9999 in UTC (what Python reads back), a thread name blank (0091), messages of a shape pgmem does not read (pgmem._messages_problem, 0091), metadata not a JSON object, over 4,096 bytes, nested more than 64 levels or holding a number Python cannot read back (0091, 0093), weight outside [0, 1], no piece (22023), and the vector rules of pgmem.vectors_problem for its vectors and its context. put_turn raises it; put_turns reports it for the turn.';

CREATE OR REPLACE FUNCTION pgmem.put_turns(
    scope text,
    model_id text,
    threads text[],
    turn_indexes integer[],
    turn_times timestamptz[],
    messages jsonb[],
    content_hashes bytea[],
    piece_counts integer[],
    unit_kinds text[],
    source_indexes integer[],
    labels text[],
    bodies text[],
    vectors vector[],
    weight double precision DEFAULT 0.8,
    reembed boolean DEFAULT false,
    force boolean DEFAULT false,
    contexts vector[] DEFAULT NULL,
    metadata jsonb[] DEFAULT NULL,
    replace_hashes bytea[] DEFAULT NULL
) RETURNS TABLE (turn_no integer, status text, pieces integer, error_code text, error text, error_hint text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n_turns integer := coalesce(array_length(threads, 1), 0);
    n_pieces integer := coalesce(array_length(vectors, 1), 0);
    piece_turn integer[];
    ok integer[] := '{}';      -- the turns that broke no rule, in input order
    meta jsonb[];
    ctxs vector[];
    stat text[];               -- per turn: failed, inserted, replaced, unchanged, skipped (NULL: not yet stored)
    rh bytea[];                -- per turn: replace only the stored turn of this hash (NULL: any, or insert)
    key integer;
    i integer;
    p record;
    locked text[];             -- the turns' threads this call holds (KEY SHARE)
    one_thread text;
    make_thread boolean;
    bad_arg text;
BEGIN
    IF scope IS NULL OR model_id IS NULL THEN
        RAISE EXCEPTION 'put_turns: scope and model_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(put_turns.scope), true);
    PERFORM pgmem._check_scope_name(put_turns.scope, 'put_turns');
    -- Entry i of each turn array is turn i, of each piece array piece i (rt70), as add_facts and
    -- put_document take theirs: the lengths below are of the first dimension while unnest reads
    -- every element, so an array of arrays (turn_indexes '{{0,1},{2,3}}' beside two threads)
    -- stored turns at indexes the call never paired with them; and a turn's subscripts read
    -- NULL from an array indexed from another bound, so a turn to replace (replace_hashes
    -- '[2:2]={...}') whose turn was gone was never marked skipped, and the call looped for ever.
    bad_arg := CASE WHEN pgmem._not_a_list(threads) THEN 'threads'
                    WHEN pgmem._not_a_list(turn_indexes) THEN 'turn_indexes'
                    WHEN pgmem._not_a_list(turn_times) THEN 'turn_times'
                    WHEN pgmem._not_a_list(put_turns.messages) THEN 'messages'
                    WHEN pgmem._not_a_list(content_hashes) THEN 'content_hashes'
                    WHEN pgmem._not_a_list(piece_counts) THEN 'piece_counts'
                    WHEN pgmem._not_a_list(unit_kinds) THEN 'unit_kinds'
                    WHEN pgmem._not_a_list(source_indexes) THEN 'source_indexes'
                    WHEN pgmem._not_a_list(labels) THEN 'labels'
                    WHEN pgmem._not_a_list(bodies) THEN 'bodies'
                    WHEN pgmem._not_a_list(vectors) THEN 'vectors'
                    WHEN pgmem._not_a_list(contexts) THEN 'contexts'
                    WHEN pgmem._not_a_list(put_turns.metadata) THEN 'metadata'
                    WHEN pgmem._not_a_list(replace_hashes) THEN 'replace_hashes' END;
    IF bad_arg IS NOT NULL THEN
        RAISE EXCEPTION 'put_turns: % must be a one-dimensional array indexed from 1 (entry i for turn i, or piece i)', bad_arg
            USING ERRCODE = '22023', HINT = 'ARRAY[...] and a client''s list are; ''[0:1]={...}'' and ''{{...}}'' are not.';
    END IF;
    -- Subscripted below from 1: an array with other bounds (or dimensions) is read as its elements.
    piece_counts := ARRAY(SELECT c.n FROM unnest(piece_counts) AS c(n));
    IF coalesce(array_length(turn_indexes, 1), 0) <> n_turns OR coalesce(array_length(turn_times, 1), 0) <> n_turns
       OR coalesce(array_length(messages, 1), 0) <> n_turns OR coalesce(array_length(content_hashes, 1), 0) <> n_turns
       OR coalesce(array_length(piece_counts, 1), 0) <> n_turns
       OR (contexts IS NOT NULL AND coalesce(array_length(contexts, 1), 0) <> n_turns)
       OR (put_turns.metadata IS NOT NULL AND coalesce(array_length(put_turns.metadata, 1), 0) <> n_turns)
       OR (replace_hashes IS NOT NULL AND coalesce(array_length(replace_hashes, 1), 0) <> n_turns) THEN
        RAISE EXCEPTION 'put_turns: the turn arrays (threads, turn_indexes, turn_times, messages, content_hashes, piece_counts and the optional contexts, metadata, replace_hashes) must have the same length (% threads)', n_turns
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(piece_counts) AS c(n) WHERE c.n IS NULL OR c.n < 0)
       OR (SELECT coalesce(sum(c.n), 0) FROM unnest(piece_counts) AS c(n)) <> n_pieces
       OR coalesce(array_length(unit_kinds, 1), 0) <> n_pieces OR coalesce(array_length(source_indexes, 1), 0) <> n_pieces
       OR coalesce(array_length(labels, 1), 0) <> n_pieces OR coalesce(array_length(bodies, 1), 0) <> n_pieces THEN
        RAISE EXCEPTION 'put_turns: piece_counts must be >= 0 and sum to the length of unit_kinds, source_indexes, labels, bodies and vectors (% vectors)', n_pieces
            USING ERRCODE = '22023', HINT = 'The piece arrays hold the turns'' pieces one turn after the other; piece_counts[i] is how many are turn i''s.';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(threads, turn_indexes) AS u(th, ti) GROUP BY u.th, u.ti HAVING count(*) > 1) THEN
        RAISE EXCEPTION 'put_turns: a turn (thread, turn_index) appears more than once in the call' USING ERRCODE = '22023',
            HINT = 'Send the latest version of each turn once.';
    END IF;
    -- Each piece's turn (an integer array: subscripts are O(1), unlike on text or vector arrays).
    piece_turn := ARRAY(SELECT c.i FROM unnest(piece_counts) WITH ORDINALITY AS c(n, i)
                         CROSS JOIN LATERAL generate_series(1, c.n) ORDER BY c.i);
    meta := coalesce(put_turns.metadata, array_fill(NULL::jsonb, ARRAY[n_turns]));
    ctxs := coalesce(contexts, array_fill(NULL::vector, ARRAY[n_turns]));
    stat := array_fill(NULL::text, ARRAY[n_turns]);
    rh := coalesce(replace_hashes, array_fill(NULL::bytea, ARRAY[n_turns]));
    -- Each turn against the rules of one turn (pgmem._turn_problem, the same as put_turn's), its
    -- context computed on the way (the given one, or the unit mean of its pieces), in one pass.
    FOR p IN
        WITH per AS MATERIALIZED (
            SELECT u.tno, array_agg(u.v ORDER BY u.j) AS vs
              FROM unnest(vectors, piece_turn) WITH ORDINALITY AS u(v, tno, j) GROUP BY u.tno)
        SELECT t.i::integer AS i, pr.code, pr.message, pr.hint,
               CASE WHEN pr.code IS NULL THEN coalesce(l2_normalize(t.ctx), pgmem.unit_mean(per.vs)) END AS ctx
          FROM unnest(threads, turn_indexes, put_turns.messages, content_hashes, meta, ctxs, turn_times)
               WITH ORDINALITY AS t(th, ti, msg, h, md, ctx, tm, i)
          LEFT JOIN per ON per.tno = t.i
          LEFT JOIN LATERAL pgmem._turn_problem(t.th, t.ti, t.msg, t.h, t.md, weight, per.vs, t.ctx, t.tm) pr ON true
         ORDER BY t.i
    LOOP
        IF p.code IS NULL THEN
            ok := ok || p.i;
            ctxs[p.i] := p.ctx;
        ELSE
            stat[p.i] := 'failed';
            turn_no := p.i; status := 'failed'; pieces := 0; error_code := p.code; error := p.message; error_hint := p.hint;
            RETURN NEXT;
        END IF;
    END LOOP;
    IF cardinality(ok) = 0 THEN
        RETURN;
    END IF;
    -- Every turn left has vectors of the installed dimension (its rules checked it).
    key := pgmem.bind_scope_model(scope, model_id, pgmem.column_dims('piece.embedding'), 'piece', reembed);

    -- Lock order (docs/architecture.md), as put_turn: the scope (SHARE, in bind_scope_model), then
    -- the threads (KEY SHARE), then the turns, then their pieces; each set in key order, so two
    -- batches over the same threads and turns take their locks in the same order. A thread
    -- forgotten while this waited is created again (the turns land after the forget), except for
    -- a turn to replace only as it was read (replace_hashes, a rebuild's): its thread is locked
    -- if it is there, never created, and a turn whose thread is gone is skipped (0040: a rebuild
    -- brought back turns forgotten while it embedded).
    -- One thread at a time, in key order, as add_facts since 0114 (rt78): inserted, or locked
    -- when it is there, again while it is gone. The set at once (inserted, then locked), tried
    -- again when a thread had been forgotten between its insert and its lock, inserted that thread
    -- anew while this call held a later thread it had created: another writer that had created the
    -- thread meanwhile and waited for the later one deadlocked with it (40P01).
    locked := '{}';
    FOR one_thread, make_thread IN
        SELECT t.th, bool_or(t.h IS NULL) FROM unnest(threads, stat, rh) AS t(th, st, h) WHERE t.st IS NULL
         GROUP BY t.th ORDER BY 1
    LOOP
        -- A new thread is this call's once inserted (no other transaction sees it before the
        -- commit): one statement, as a backfill's threads are. A stored one is locked. A thread to
        -- replace a turn in only is locked when it is there, never created.
        LOOP
            IF make_thread THEN
                INSERT INTO pgmem.thread AS th (scope_id, thread_id) VALUES (put_turns.scope, one_thread)
                ON CONFLICT (scope_id, thread_id) DO NOTHING;
                EXIT WHEN FOUND;
            END IF;
            PERFORM 1 FROM pgmem.thread th
             WHERE th.scope_id = put_turns.scope AND th.thread_id = one_thread FOR KEY SHARE;
            EXIT WHEN FOUND OR NOT make_thread;
        END LOOP;
        IF FOUND THEN
            locked := locked || one_thread;
        END IF;
    END LOOP;
    FOR i IN 1 .. n_turns LOOP
        IF stat[i] IS NULL AND rh[i] IS NOT NULL AND NOT threads[i] = ANY (locked) THEN
            stat[i] := 'skipped';
        END IF;
    END LOOP;
    -- A thread a store item holds is the item's (0094, as put_item keeps an item out of a
    -- conversation's thread since 0092): it takes only the item's own turn, the one the store
    -- writes, turn 0 at the item's created_at, or a rebuild's copy of a stored turn. Any other
    -- turn replaced the item's indexed text and was forgotten with the item. Read with the
    -- threads locked: an item put committed while this waited is seen. Most threads hold no
    -- item: one probe of store_item's thread index first, the loop only when one does (with the
    -- loop alone a one-turn put_turn ran at 0.94 of 0093's speed in both orders, with the probe
    -- within noise: docs/bench/write-ab-0094.txt).
    IF EXISTS (SELECT 1 FROM pgmem.store_item si WHERE si.scope_id = put_turns.scope AND si.thread_id = ANY (locked)) THEN
        FOR p IN
            SELECT u.i::integer AS i, si.item_key
              FROM unnest(threads, turn_indexes, turn_times, stat, rh) WITH ORDINALITY AS u(th, ti, tm, st, h, i)
              JOIN pgmem.store_item si ON si.scope_id = put_turns.scope AND si.thread_id = u.th
             WHERE u.st IS NULL AND u.h IS NULL
               AND NOT (u.ti = 0 AND u.tm IS NOT DISTINCT FROM si.created_at)
             ORDER BY 1
        LOOP
            stat[p.i] := 'failed';
            ok := array_remove(ok, p.i);
            turn_no := p.i; status := 'failed'; pieces := 0; error_code := '23505';
            error := format('put_turns: thread %s of scope %s is store item %s''s; a conversation cannot write into an item''s thread',
                            threads[p.i], scope, p.item_key);
            error_hint := 'Name another thread; the item''s own turn is written by the store (PgmemStore.put).';
            RETURN NEXT;
        END LOOP;
    END IF;

    -- Then the turns: new ones inserted at once (a concurrent writer of the same new turn waits on
    -- its key and finds it stored), stored ones locked FOR UPDATE; one gone meanwhile is tried again.
    -- A turn to replace only as read is never inserted: one gone, or stored with another hash
    -- (written again since it was read), is skipped.
    LOOP
        FOR p IN
            WITH ins AS (
                INSERT INTO pgmem.turn AS t (scope_id, thread_id, turn_index, turn_time, messages, content_hash, context,
                                             blend_weight, model_key, metadata)
                SELECT put_turns.scope, u.th, u.ti, u.tm, u.msg, u.h, u.ctx, weight, key, coalesce(u.md, '{}'::jsonb)
                  FROM unnest(threads, turn_indexes, turn_times, put_turns.messages, content_hashes, ctxs, meta, stat, rh)
                       AS u(th, ti, tm, msg, h, ctx, md, st, rh)
                 WHERE u.st IS NULL AND u.rh IS NULL
                 ORDER BY u.th, u.ti
                ON CONFLICT (scope_id, thread_id, turn_index) DO NOTHING
                RETURNING t.thread_id, t.turn_index)
            SELECT u.i::integer AS i FROM unnest(threads, turn_indexes) WITH ORDINALITY AS u(th, ti, i)
              JOIN ins ON ins.thread_id = u.th AND ins.turn_index = u.ti
        LOOP
            stat[p.i] := 'inserted';
        END LOOP;
        FOR p IN
            SELECT u.i::integer AS i, t.content_hash = u.h AND NOT coalesce(force, false) AS same,
                   u.rh IS NOT NULL AND t.content_hash IS DISTINCT FROM u.rh AS moved
              FROM unnest(threads, turn_indexes, content_hashes, stat, rh) WITH ORDINALITY AS u(th, ti, h, st, rh, i)
              JOIN pgmem.turn t ON t.scope_id = put_turns.scope AND t.thread_id = u.th AND t.turn_index = u.ti
             WHERE u.st IS NULL
             ORDER BY t.thread_id, t.turn_index
               FOR UPDATE OF t
        LOOP
            stat[p.i] := CASE WHEN p.moved THEN 'skipped' WHEN p.same THEN 'unchanged' ELSE 'replaced' END;
        END LOOP;
        FOR i IN 1 .. n_turns LOOP
            IF stat[i] IS NULL AND rh[i] IS NOT NULL THEN
                stat[i] := 'skipped';
            END IF;
        END LOOP;
        EXIT WHEN array_position(stat, NULL) IS NULL;
    END LOOP;

    -- Same content: nothing is embedded or rewritten, but new metadata is kept.
    IF 'unchanged' = ANY (stat) THEN
        UPDATE pgmem.turn t SET metadata = coalesce(u.md, '{}'::jsonb)
          FROM unnest(threads, turn_indexes, meta, stat) AS u(th, ti, md, st)
         WHERE u.st = 'unchanged'
           AND t.scope_id = put_turns.scope AND t.thread_id = u.th AND t.turn_index = u.ti
           AND t.metadata IS DISTINCT FROM coalesce(u.md, '{}'::jsonb);
    END IF;
    -- Changed content: the turn's pieces are replaced.
    IF 'replaced' = ANY (stat) THEN
        DELETE FROM pgmem.piece pc
         USING unnest(threads, turn_indexes, stat) AS u(th, ti, st)
         WHERE u.st = 'replaced'
           AND pc.scope_id = put_turns.scope AND pc.thread_id = u.th AND pc.turn_index = u.ti;
        UPDATE pgmem.turn t
           SET turn_time = u.tm, messages = u.msg, content_hash = u.h, context = u.ctx, blend_weight = weight,
               model_key = key, metadata = coalesce(u.md, '{}'::jsonb), ingested_at = now()
          FROM unnest(threads, turn_indexes, turn_times, put_turns.messages, content_hashes, ctxs, meta, stat)
               AS u(th, ti, tm, msg, h, ctx, md, st)
         WHERE u.st = 'replaced'
           AND t.scope_id = put_turns.scope AND t.thread_id = u.th AND t.turn_index = u.ti;
    END IF;

    -- The pieces of every inserted or replaced turn, in one statement (their words follow,
    -- pgmem._piece_words).
    INSERT INTO pgmem.piece (scope_id, kind, unit_kind, thread_id, turn_index, source_index, seq,
                             label, body, raw_embedding, embedding, model_key)
    SELECT put_turns.scope, 'memory', pc.kind, t.th, t.ti, pc.src,
           (row_number() OVER (PARTITION BY pc.tno, pc.src ORDER BY pc.j))::integer - 1,
           pc.label, pc.body, l2_normalize(pc.v), pgmem.blend(pc.v, t.ctx, weight), key
      FROM unnest(unit_kinds, source_indexes, labels, bodies, vectors, piece_turn) WITH ORDINALITY
           AS pc(kind, src, label, body, v, tno, j)
      JOIN unnest(threads, turn_indexes, ctxs, stat) WITH ORDINALITY AS t(th, ti, ctx, st, i) ON t.i = pc.tno
     WHERE t.st IN ('inserted', 'replaced')
     ORDER BY pc.j;

    FOR i IN SELECT unnest(ok) LOOP
        turn_no := i; status := stat[i]; pieces := CASE WHEN stat[i] IN ('unchanged', 'skipped') THEN 0 ELSE piece_counts[i] END;
        error_code := NULL; error := NULL; error_hint := NULL;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION pgmem.put_turns(text, text, text[], integer[], timestamptz[], jsonb[], bytea[], integer[], text[], integer[], text[], text[], vector[], double precision, boolean, boolean, vector[], jsonb[], bytea[]) IS
'Bulk put_turn: many turns of one scope (any threads) in one call and one transaction, set-based (one insert of the turns, one of the pieces). Per turn i: threads[i], turn_indexes[i], turn_times[i], messages[i], content_hashes[i], contexts[i] (NULL: the mean of its pieces), metadata[i] (NULL: {}), and piece_counts[i] pieces, which follow the previous turn''s in unit_kinds, source_indexes, labels, bodies and vectors. Stores exactly the rows put_turn would (put_turn is this function with one turn): same rules (pgmem._turn_problem), same hashes, same blend, same lock order. Returns one row per turn, in input order: status inserted, replaced, unchanged (same hash: only new metadata is kept) or failed, with the SQLSTATE, message and hint put_turn would raise for it; the failed turns are not stored, the others are. replace_hashes[i] (a rebuild''s, NULL: none) writes turn i only over a stored turn of that content hash: a turn gone or written again since it was read is skipped (status skipped, its thread never created). A turn into a thread a store item holds (store_item.thread_id) fails (23505, 0094) unless it is the item''s own (turn 0 at the item''s created_at, as the store writes it) or a rebuild''s. A malformed call (arrays of different lengths, or not one-dimensional and indexed from 1, since 0107; a turn twice), another transaction''s scope or another model fails as a whole.';

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
    metadata jsonb DEFAULT '{}',
    replace_hash bytea DEFAULT NULL
) RETURNS pgmem.put_result
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer := coalesce(array_length(vectors, 1), 0);
    r record;
BEGIN
    IF scope IS NULL OR model_id IS NULL THEN
        RAISE EXCEPTION 'put_turn: scope, thread, turn_index, messages, content_hash and model_id must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    IF coalesce(array_length(unit_kinds, 1), 0) <> n OR coalesce(array_length(source_indexes, 1), 0) <> n
       OR coalesce(array_length(labels, 1), 0) <> n OR coalesce(array_length(bodies, 1), 0) <> n THEN
        RAISE EXCEPTION 'put_turn: unit_kinds, source_indexes, labels, bodies and vectors must have the same length (% vectors)', n
            USING ERRCODE = '22023';
    END IF;
    -- One write pipeline: a turn is stored by put_turns, as one turn of a batch.
    SELECT * INTO r FROM pgmem.put_turns(put_turn.scope, put_turn.model_id, ARRAY[put_turn.thread], ARRAY[put_turn.turn_index],
                                         ARRAY[put_turn.turn_time], ARRAY[put_turn.messages], ARRAY[put_turn.content_hash],
                                         ARRAY[n], unit_kinds, source_indexes, labels, bodies, vectors,
                                         weight, reembed, force, ARRAY[put_turn.context], ARRAY[put_turn.metadata],
                                         ARRAY[put_turn.replace_hash]);
    IF r.error_hint IS NOT NULL THEN
        RAISE EXCEPTION '%', r.error USING ERRCODE = r.error_code, HINT = r.error_hint;
    ELSIF r.error_code IS NOT NULL THEN
        RAISE EXCEPTION '%', r.error USING ERRCODE = r.error_code;
    END IF;
    RETURN ROW(r.status, r.pieces)::pgmem.put_result;
END
$$;
COMMENT ON FUNCTION pgmem.put_turn(text, text, integer, timestamptz, jsonb, bytea, text, text[], integer[], text[], text[], vector[], double precision, boolean, boolean, vector, jsonb, bytea) IS
'Store one sealed turn and its pieces atomically: unchanged hash = no write (unless force, used by rebuild) except new metadata; changed = pieces replaced. Computes the turn context (unit mean of the piece vectors, or the given context vector) and each piece''s blended search vector in SQL. metadata: a JSON object of at most 4,096 bytes (22023 otherwise; NULL is {}), stored on the turn and filtered on by memory_recall(metadata_filter => ...). replace_hash (a rebuild''s): write only over the stored turn of that content hash, else status skipped. The one write pipeline: pgmem.put_turns with one turn, raising the error it reports (the rules are pgmem._turn_problem''s).';

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
    -- Lock order (docs/architecture.md, 0040): the scope row FOR SHARE, as writers hold it, so a
    -- model change (reembed_flip, FOR NO KEY UPDATE) commits first or waits, and the vectors and
    -- contexts below are read after it, all of one model (updating pieces while a flip was in
    -- flight blended its new raw vectors with the old model's contexts); then the turns FOR
    -- UPDATE in key order, then their pieces, as every writer of a turn takes them (pieces first
    -- waited for a turn a writer held while it waited for a piece: a deadlock).
    PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = reblend.scope FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reblend: scope % has no memory stored', reblend.scope USING ERRCODE = '42704',
            HINT = 'Check the scope name: scopes are created by their first stored turn.';
    END IF;
    PERFORM 1 FROM pgmem.turn t
      WHERE t.scope_id = reblend.scope AND (reblend.thread IS NULL OR t.thread_id = reblend.thread)
      ORDER BY t.thread_id, t.turn_index FOR UPDATE;
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
'Rewrite the search vectors of a scope''s memory pieces (given thread, only that thread''s) with a new weight (0 to 1, 22023 otherwise), from the stored raw and context vectors: no embedding call. Returns the pieces rewritten; a scope with no memory stored raises 42704.';

-- What makes two facts the same: the same scope and the same (thread, turn, section, body),
-- compared exactly (case, spaces and all). The JSON array keeps NULL apart from '' and each
-- field apart from the next; add_facts stores a blank section as NULL (0118). 002_hardening.sql filled existing rows with this same expression.
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
    thr text[];
    one_thread text;
    bad_arg text;
    -- A fact naming a store item's thread (0094): its entry, its thread and the item.
    held_no bigint;
    held_thread text;
    held_item text;
    ids bigint[];
BEGIN
    IF scope IS NULL OR model_id IS NULL OR bodies IS NULL THEN
        RAISE EXCEPTION 'add_facts: scope, model_id and bodies must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(add_facts.scope), true);
    PERFORM pgmem._check_scope_name(add_facts.scope, 'add_facts');
    -- Entry i of each array is fact i: an array with other bounds or more dimensions, of the
    -- right length, tied a fact to another's thread, turn or section, or to none (0052).
    bad_arg := CASE WHEN pgmem._not_a_list(bodies) THEN 'bodies'
                    WHEN pgmem._not_a_list(vectors) THEN 'vectors'
                    WHEN pgmem._not_a_list(thread_ids) THEN 'thread_ids'
                    WHEN pgmem._not_a_list(turn_indexes) THEN 'turn_indexes'
                    WHEN pgmem._not_a_list(sections) THEN 'sections' END;
    IF bad_arg IS NOT NULL THEN
        RAISE EXCEPTION 'add_facts: % must be a one-dimensional array indexed from 1 (entry i for fact i)', bad_arg
            USING ERRCODE = '22023', HINT = 'ARRAY[...] and a client''s list are; ''[0:1]={...}'' and ''{{...}}'' are not.';
    END IF;
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
    -- The rules Python's check_fact applies too: a body with some text (a character that is not
    -- whitespace as Python's str.isspace has it, whatever the database's locale), a turn index of
    -- 0 or more.
    IF EXISTS (SELECT 1 FROM generate_series(1, n) AS u(i) WHERE coalesce(pgmem._blank(bodies[u.i]), true)) THEN
        RAISE EXCEPTION 'add_facts: bodies[%] is empty (or only whitespace)',
            (SELECT min(u.i) FROM generate_series(1, n) AS u(i) WHERE coalesce(pgmem._blank(bodies[u.i]), true))
            USING ERRCODE = '22023';
    END IF;
    -- A fact is a sentence or a few (0118): a body or a section of any size was stored, and
    -- embedded whole by the client first (10 MB took minutes and the model saw its first words).
    -- A section names a document (its id, up to 1,000 characters, or id#anchor) or a part of one.
    IF EXISTS (SELECT 1 FROM generate_series(1, n) AS u(i) WHERE octet_length(bodies[u.i]) > 8000) THEN
        RAISE EXCEPTION 'add_facts: bodies[%] is % bytes; at most 8,000',
            (SELECT min(u.i) FROM generate_series(1, n) AS u(i) WHERE octet_length(bodies[u.i]) > 8000),
            (SELECT octet_length(bodies[u.i]) FROM generate_series(1, n) AS u(i)
              WHERE octet_length(bodies[u.i]) > 8000 ORDER BY u.i LIMIT 1)
            USING ERRCODE = '22023',
                  HINT = 'A fact is a sentence or a few: split a longer text into facts, or store it as a document.';
    END IF;
    IF EXISTS (SELECT 1 FROM generate_series(1, n) AS u(i) WHERE octet_length(sections[u.i]) > 8000) THEN
        RAISE EXCEPTION 'add_facts: sections[%] is % bytes; at most 8,000',
            (SELECT min(u.i) FROM generate_series(1, n) AS u(i) WHERE octet_length(sections[u.i]) > 8000),
            (SELECT octet_length(sections[u.i]) FROM generate_series(1, n) AS u(i)
              WHERE octet_length(sections[u.i]) > 8000 ORDER BY u.i LIMIT 1)
            USING ERRCODE = '22023',
                  HINT = 'A section names a document (its id, or id#anchor) or a part of one.';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(turn_indexes) AS t(ti) WHERE t.ti < 0) THEN
        RAISE EXCEPTION 'add_facts: turn_indexes[%] must be >= 0, got %',
            (SELECT min(t.i) FROM unnest(turn_indexes) WITH ORDINALITY AS t(ti, i) WHERE t.ti < 0),
            (SELECT t.ti FROM unnest(turn_indexes) WITH ORDINALITY AS t(ti, i) WHERE t.ti < 0 ORDER BY t.i LIMIT 1)
            USING ERRCODE = '22023';
    END IF;
    -- A turn is a thread's: a fact tied to a turn index without a thread could never be reached
    -- by forget_turn (nor shown with its turn), only by forget_fact or forget_scope.
    IF EXISTS (SELECT 1 FROM unnest(turn_indexes) WITH ORDINALITY AS t(ti, i)
                WHERE t.ti IS NOT NULL AND thread_ids[t.i] IS NULL) THEN
        RAISE EXCEPTION 'add_facts: turn_indexes[%] needs its thread (thread_ids[%] is NULL): a turn is a thread''s',
            (SELECT min(t.i) FROM unnest(turn_indexes) WITH ORDINALITY AS t(ti, i)
              WHERE t.ti IS NOT NULL AND thread_ids[t.i] IS NULL),
            (SELECT min(t.i) FROM unnest(turn_indexes) WITH ORDINALITY AS t(ti, i)
              WHERE t.ti IS NOT NULL AND thread_ids[t.i] IS NULL)
            USING ERRCODE = '22023';
    END IF;
    thr := ARRAY(SELECT DISTINCT t.id FROM unnest(thread_ids) AS t(id) WHERE t.id IS NOT NULL ORDER BY 1);
    IF EXISTS (SELECT 1 FROM unnest(thr) AS t(id) WHERE length(t.id) NOT BETWEEN 1 AND 200) THEN
        RAISE EXCEPTION 'add_facts: a thread id must be 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    -- Python's check_name (0091): a fact tied to a blank thread could not be forgotten with its
    -- thread through Python, which refuses the name first.
    IF EXISTS (SELECT 1 FROM unnest(thread_ids) AS t(id) WHERE pgmem._blank(t.id)) THEN
        RAISE EXCEPTION 'add_facts: thread_ids[%] must be a non-empty string, got only whitespace',
            (SELECT min(t.i) FROM unnest(thread_ids) WITH ORDINALITY AS t(id, i) WHERE pgmem._blank(t.id))
            USING ERRCODE = '22023', HINT = 'A thread name needs a character that is not whitespace; NULL ties the fact to no thread.';
    END IF;
    -- Lock order (docs/architecture.md, 0040): the facts' threads, inserted and held FOR KEY
    -- SHARE in key order as put_turns holds its turns' threads, before the facts. A forget of a
    -- thread (FOR UPDATE) then either finishes first and the facts land after it, under the
    -- thread again, or waits and deletes them with the thread; before, a fact added while the
    -- forget ran outlived it.
    -- One thread at a time, in key order (0114): inserted then locked, again while it is gone.
    -- The set at once, tried again when a thread had gone between its insert and its lock, inserted
    -- that thread anew while this call held a later one it had created: another add_facts that
    -- had created the thread meanwhile and waited for the later one deadlocked with it (40P01).
    FOREACH one_thread IN ARRAY thr LOOP
        LOOP
            INSERT INTO pgmem.thread AS th (scope_id, thread_id) VALUES (add_facts.scope, one_thread)
            ON CONFLICT (scope_id, thread_id) DO NOTHING;
            PERFORM 1 FROM pgmem.thread th
             WHERE th.scope_id = add_facts.scope AND th.thread_id = one_thread FOR KEY SHARE;
            EXIT WHEN FOUND;
        END LOOP;
    END LOOP;
    -- A thread a store item holds is the item's (0094): a fact tied to it was forgotten with the
    -- item. Read with the threads locked, as put_turns does.
    SELECT t.i, t.id, si.item_key INTO held_no, held_thread, held_item
      FROM unnest(thread_ids) WITH ORDINALITY AS t(id, i)
      JOIN pgmem.store_item si ON si.scope_id = add_facts.scope AND si.thread_id = t.id
     ORDER BY t.i LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'add_facts: thread_ids[%] (%) is store item %''s thread; a fact cannot join an item''s thread',
            held_no, held_thread, held_item
            USING ERRCODE = '23505', HINT = 'Name another thread, or none (NULL).';
    END IF;
    -- Idempotent by content: a fact stored already (same scope, thread, turn, section, body),
    -- or repeated in this call, is skipped; only the ids of new rows come back, in the call's order.
    -- Lock order (0106): the facts are inserted by content hash, as every add_facts inserts them.
    -- In the call's order, two calls adding the same facts in two orders each waited for a fact
    -- the other had just inserted (the unique key's wait): a deadlock (40P01). Their ids are still
    -- the call's order: taken from the identity first, in that order, and given with the rows.
    -- No section is one rule (0118): an empty or blank section is none (NULL), so a fact written
    -- with section '' and with none is one fact, not two rows. A row stored before 0118 with
    -- section '' stays apart (looking such rows up on every call planned, on a new scope's
    -- statistics, as a scan of the scope's facts: adding facts stored already took 2.9 times as
    -- long, python -m pgmem.lab.bench.write_ab URL URL2 --facts 2000).
    IF sections IS NOT NULL THEN
        sections := ARRAY(SELECT CASE WHEN pgmem._blank(s.t) THEN NULL ELSE s.t END
                            FROM unnest(sections) WITH ORDINALITY AS s(t, i) ORDER BY s.i);
    END IF;
    ids := ARRAY(SELECT v FROM (SELECT nextval(pg_catalog.pg_get_serial_sequence('pgmem.fact', 'fact_id')) AS v
                                  FROM generate_series(1, n)) AS s ORDER BY v);
    RETURN QUERY
    WITH added AS (
        INSERT INTO pgmem.fact AS f (fact_id, scope_id, thread_id, turn_index, section, body, embedding, model_key,
                                     content_hash)
        OVERRIDING SYSTEM VALUE
        SELECT ids[u.i], add_facts.scope, thread_ids[u.i], turn_indexes[u.i], sections[u.i], bodies[u.i],
               l2_normalize(vectors[u.i]), key, u.h
          FROM (SELECT g.i, pgmem._fact_hash(thread_ids[g.i], turn_indexes[g.i], sections[g.i], bodies[g.i]) AS h
                  FROM generate_series(1, n) AS g(i)) AS u
         ORDER BY u.h, u.i
        ON CONFLICT (scope_id, content_hash) DO NOTHING
        RETURNING f.fact_id)
    SELECT a.fact_id FROM added a ORDER BY a.fact_id;
END
$$;
COMMENT ON FUNCTION pgmem.add_facts(text, text, text[], vector[], text[], integer[], text[]) IS
'Store fact sentences (each optionally tied to a thread/turn or a section) with their vectors; returns the ids of the facts stored now. A body must hold some text, a thread id some text too (0091), a body and a section be at most 8,000 bytes (0118), and a turn index be 0 or more and come with its thread (22023 naming the entry; nothing of the call is stored); an empty or blank section is none (stored NULL, 0118); every array is one-dimensional from 1, entry i for fact i (22023 naming it). Idempotent by content: a fact whose (thread, turn, section, body) the scope holds already (a row stored before 0118 with section '' is another fact), or that repeats one earlier in the call, is skipped. A thread a store item holds takes no fact (23505 naming the entry, 0094). The facts are inserted in content-hash order, so two calls adding the same facts in other orders do not deadlock; the ids come back in the call''s order (0106).';
