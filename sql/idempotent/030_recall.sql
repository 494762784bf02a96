-- Reading memory: per-part groups over memory pieces and facts. Re-runnable.

-- Earlier signature of the argument check (before scope, model and the per-function arguments).
DROP FUNCTION IF EXISTS pgmem.check_recall_args(@VECTOR_SCHEMA@.vector[], text[], integer, double precision, text, text);
DROP FUNCTION IF EXISTS pgmem.check_recall_args(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, text, text, text, integer, integer, integer, integer);
-- Before the time window, the since / until filter and recency.
DROP FUNCTION IF EXISTS pgmem.check_recall_args(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, text, text, text, integer, integer, integer, integer, jsonb);

-- A time window [lower, upper) on turn_time: either end may be open (NULL); a given end must be
-- finite, and a window with both ends must not end before it starts.
CREATE OR REPLACE FUNCTION pgmem.check_window(lower timestamptz, upper timestamptz, lower_name text, upper_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
BEGIN
    IF lower IS NOT NULL AND NOT isfinite(lower) THEN
        RAISE EXCEPTION '% must be a finite time, got %', lower_name, lower USING ERRCODE = '22023',
            HINT = format('Leave %s NULL for a window open at that end.', lower_name);
    END IF;
    IF upper IS NOT NULL AND NOT isfinite(upper) THEN
        RAISE EXCEPTION '% must be a finite time, got %', upper_name, upper USING ERRCODE = '22023',
            HINT = format('Leave %s NULL for a window open at that end.', upper_name);
    END IF;
    IF lower IS NOT NULL AND upper IS NOT NULL AND upper <= lower THEN
        RAISE EXCEPTION '% (%) must be later than % (%)', upper_name, upper, lower_name, lower USING ERRCODE = '22023',
            HINT = format('The window is turn_time >= %s and turn_time < %s; swap them if they are reversed.', lower_name, upper_name);
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.check_window(timestamptz, timestamptz, text, text) IS
'Validate a time window on turn_time (turn_time >= lower and turn_time < upper, an end NULL when open): 22023 naming the argument when an end is infinite or the window is empty (upper <= lower).';

-- Every argument of every recall function (memory_recall, fact_recall, explain_recall,
-- document_search, log_recall and the candidate helpers) is checked here, in one place. An
-- argument a function does not take keeps its default here, which always passes; NULL passed
-- for an argument a function does take is refused. NaN compares greater than every number in
-- Postgres, so "> upper bound" refuses a NaN floor too.
CREATE OR REPLACE FUNCTION pgmem.check_recall_args(
    scope text,
    part_vectors vector[],
    part_texts text[],
    x integer,
    floor double precision,
    mode text,
    column_name text,
    model_id text DEFAULT NULL,
    candidates integer DEFAULT 20,
    rrf_k integer DEFAULT 60,
    ef_search integer DEFAULT NULL,
    show integer DEFAULT 10,
    metadata_filter jsonb DEFAULT NULL,
    time_from timestamptz DEFAULT NULL,
    time_to timestamptz DEFAULT NULL,
    since timestamptz DEFAULT NULL,
    until timestamptz DEFAULT NULL,
    recency double precision DEFAULT 0
) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer := coalesce(array_length(part_vectors, 1), 0);
    plane text := split_part(column_name, '.', 1);
    bound_id text;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- A read in another scope than the transaction's (or with none set) would see nothing under
    -- row-level security: say so (42501, hint: SET LOCAL pgmem.scope) instead of returning 0 rows.
    PERFORM pgmem.check_scope(scope);
    IF column_name IS NULL OR column_name NOT IN ('piece.embedding', 'fact.embedding') THEN
        RAISE EXCEPTION 'column_name must be piece.embedding or fact.embedding, got %', column_name
            USING ERRCODE = '22023';
    END IF;
    IF part_vectors IS NULL OR n = 0 THEN
        RAISE EXCEPTION 'part_vectors must hold at least one vector' USING ERRCODE = '22004';
    END IF;
    IF n > 64 THEN
        RAISE EXCEPTION 'part_vectors holds % vectors; at most 64 parts are searched', n USING ERRCODE = '22023',
            HINT = 'Split a message into at most 64 parts (pgmem splits into 8).';
    END IF;
    -- Part i is entry i of each (0109): part_texts '[0:0]={dogs}' beside one vector, or an
    -- array of arrays, paired no text with the vector, and a hybrid search went without its word
    -- side, silently; so did a NULL part text.
    -- (pgmem._not_a_list's test, written out: that function is the write functions' own.)
    IF coalesce(array_ndims(part_vectors) > 1 OR array_lower(part_vectors, 1) <> 1
                OR array_ndims(part_texts) > 1 OR array_lower(part_texts, 1) <> 1, false) THEN
        RAISE EXCEPTION 'part_vectors and part_texts must be one-dimensional arrays indexed from 1 (entry i for part i)'
            USING ERRCODE = '22023', HINT = 'ARRAY[...] and a client''s list are; ''[0:1]={...}'' and ''{{...}}'' are not.';
    END IF;
    IF part_texts IS NOT NULL AND coalesce(array_length(part_texts, 1), 0) <> n THEN
        RAISE EXCEPTION 'part_texts has % entries but part_vectors has %', coalesce(array_length(part_texts, 1), 0), n
            USING ERRCODE = '22023';
    END IF;
    IF x IS NULL OR x < 1 OR x > 1000 THEN
        RAISE EXCEPTION 'x must be between 1 and 1000, got %', coalesce(x::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF floor IS NULL OR floor < -1 OR floor > 1 THEN
        RAISE EXCEPTION 'floor is a raw cosine between -1 and 1, got %', coalesce(floor::text, 'NULL') USING ERRCODE = '22023',
            HINT = 'A (1 + cosine) / 2 score floor s is the cosine floor 2*s - 1.';
    END IF;
    IF mode IS NULL OR mode NOT IN ('vector', 'hybrid') THEN
        RAISE EXCEPTION 'mode must be vector or hybrid, got %', coalesce(mode, 'NULL') USING ERRCODE = '22023',
              HINT = 'memory_recall also takes auto, its default: hybrid when part_texts are given, else vector.';
    END IF;
    IF mode = 'hybrid' AND part_texts IS NULL THEN
        RAISE EXCEPTION 'hybrid mode needs part_texts for word search' USING ERRCODE = '22004';
    END IF;
    IF mode = 'hybrid' AND array_position(part_texts, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'part_texts[%] is NULL: hybrid mode searches the words of every part', array_position(part_texts, NULL)
            USING ERRCODE = '22004', HINT = 'Give each part its text (the empty string for none), or search in vector mode.';
    END IF;
    IF candidates IS NULL OR candidates < 1 OR candidates > 1000 THEN
        RAISE EXCEPTION 'candidates must be between 1 and 1000, got %', coalesce(candidates::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF rrf_k IS NULL OR rrf_k < 0 OR rrf_k > 10000 THEN
        RAISE EXCEPTION 'rrf_k must be between 0 and 10000, got %', coalesce(rrf_k::text, 'NULL')
            USING ERRCODE = '22023', HINT = 'Reciprocal rank fusion adds 1 / (rrf_k + rank); 60 is usual.';
    END IF;
    IF ef_search IS NOT NULL AND (ef_search < 1 OR ef_search > 1000) THEN
        RAISE EXCEPTION 'ef_search must be between 1 and 1000, got %', ef_search USING ERRCODE = '22023';
    END IF;
    IF show IS NULL OR show < 1 OR show > 1000 THEN
        RAISE EXCEPTION 'show must be between 1 and 1000, got %', coalesce(show::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF metadata_filter IS NOT NULL AND jsonb_typeof(metadata_filter) <> 'object' THEN
        RAISE EXCEPTION 'metadata_filter must be a JSON object, got a JSON %', jsonb_typeof(metadata_filter)
            USING ERRCODE = '22023', HINT = 'A filter such as {"channel": "voice"} keeps turns whose metadata contains it.';
    END IF;
    IF octet_length(metadata_filter::text) > 4096 THEN
        RAISE EXCEPTION 'metadata_filter is % bytes as JSON text; at most 4,096', octet_length(metadata_filter::text)
            USING ERRCODE = '22023', HINT = 'Turn metadata itself is capped at 4,096 bytes: a larger filter can match nothing.';
    END IF;
    PERFORM pgmem.check_window(time_from, time_to, 'time_from', 'time_to');
    PERFORM pgmem.check_window(since, until, 'since', 'until');
    IF recency IS NULL OR NOT (recency >= 0 AND recency <= 1) THEN
        RAISE EXCEPTION 'recency is a cosine band between 0 and 1, got %', coalesce(recency::text, 'NULL') USING ERRCODE = '22023',
            HINT = 'Hits whose cosines differ by at most recency from the first hit''s rank the most recent first; 0 turns it off.';
    END IF;
    PERFORM pgmem.check_vectors(part_vectors, column_name, 'part_vectors');
    -- Query vectors from another model than the stored ones would rank noise: refuse, as writes do.
    -- (Row-level security: the scope row is visible inside the scope; elsewhere nothing is read.)
    IF model_id IS NOT NULL THEN
        SELECT m.model_id INTO bound_id
          FROM pgmem.scope s
          JOIN pgmem.embedding_model m
            ON m.model_key = CASE WHEN plane = 'fact' THEN s.fact_model_key ELSE s.piece_model_key END
         WHERE s.scope_id = check_recall_args.scope;
        IF bound_id IS NOT NULL AND bound_id <> model_id THEN
            RAISE EXCEPTION 'scope % stores % vectors from model %; this query was embedded with model %',
                scope, plane, bound_id, model_id
                USING ERRCODE = '22000',
                      -- A scope's facts keep the model they were stored with: pgmem reembed moves its
                      -- pieces only, and sent a fact recall's caller to it in vain (0114).
                      HINT = CASE WHEN plane = 'fact'
                                  THEN format('Recall the scope''s facts with their model (%s): pgmem reembed moves a scope''s pieces, not its facts, which keep the model they were stored with.', bound_id)
                                  ELSE format('Recall with the scope''s model (%s), or move the scope to this model (pgmem reembed --to MODEL --scope SCOPE).', bound_id) END;
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.check_recall_args(text, vector[], text[], integer, double precision, text, text, text, integer, integer, integer, integer, jsonb,
                                             timestamptz, timestamptz, timestamptz, timestamptz, double precision) IS
'Validate every recall argument in one place: raises 42501 when scope is not the transaction''s pgmem.scope (pgmem.check_scope: the read would see nothing), 22004 (a NULL scope, no part_vectors, or hybrid mode without part_texts or with a NULL one, since 0109), 22023 (part arrays not one-dimensional from 1, since 0109; NULL or out of range: at most 64 parts, x, candidates, ef_search and show 1..1000, rrf_k 0..10000, floor in [-1, 1], mode vector or hybrid, metadata_filter a JSON object of at most 4,096 bytes, a time window or since / until that is infinite or ends before it starts (pgmem.check_window), recency in [0, 1]) or 22000 (wrong dimension, or model_id other than the model of the scope''s stored vectors), naming the argument.';

-- Word search of a message's parts (hybrid recall), in three steps:
--  1. pgmem.word_lexemes: the english lexemes of the part's last 8,000 UTF-8 bytes (cut on a
--     character boundary), the same cap the client puts on a part's embedding input
--     (pgmem.recall.WHOLE_MESSAGE_BYTES); at most 256 of them, so any text gives a bounded query.
--  2. pgmem.message_words (pgmem.distinctive_words for one part): only the lexemes that are
--     distinctive where the search looks (the scope's memory pieces, or the thread's): found in
--     at least one piece and in at most `share` (default 10%) of them. A word most pieces share
--     ("turn", the label's month, "remind") ranks nothing apart and drowned the vector ranking
--     under plain RRF; a name, a number or an identifier does (docs/evaluation.md, section 2a).
--  3. pgmem.word_candidates: each part's pieces by the summed weights of its words they hold.
DROP FUNCTION IF EXISTS pgmem.word_query(text);

CREATE OR REPLACE FUNCTION pgmem.word_lexemes(part_text text)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    t text := coalesce(part_text, '');
    b bytea;
    s integer := 0;
BEGIN
    IF octet_length(t) > 8000 THEN
        b := convert_to(t, 'UTF8');
        b := substring(b FROM octet_length(b) - 7999);
        -- Skip UTF-8 continuation bytes (10xxxxxx) so the cut starts a character.
        WHILE s < 3 AND (get_byte(b, s) & 192) = 128 LOOP
            s := s + 1;
        END LOOP;
        t := convert_from(substring(b FROM s + 1), 'UTF8');
    END IF;
    RETURN (tsvector_to_array(to_tsvector('english'::regconfig, t)))[1:256];
END
$$;
COMMENT ON FUNCTION pgmem.word_lexemes(text) IS
'The english lexemes (to_tsvector, sorted, distinct) of a part''s last 8,000 UTF-8 bytes, at most 256: what hybrid recall may word-search for that part (pgmem.distinctive_words keeps the distinctive ones).';

-- One lexeme as a tsquery, taken as it is (no parsing or stemming): quoted, with tsquery's
-- escapes for a quote or a backslash.
CREATE OR REPLACE FUNCTION pgmem._lexeme(lex text)
RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
RETURN ('''' || replace(replace(lex, '\', '\\'), '''', '''''') || '''')::tsquery;
COMMENT ON FUNCTION pgmem._lexeme(text) IS
'A lexeme as a one-word tsquery, taken verbatim (quoted, quote and backslash escaped).';

DROP FUNCTION IF EXISTS pgmem.distinctive_word_query(text, text, text, double precision);

-- Earlier signature (before kind): dropped so that a call with four arguments is not ambiguous.
DROP FUNCTION IF EXISTS pgmem.distinctive_words(text, text, text, double precision);

-- The word side's sample of a searched set: its first 1,000 pieces by id, so the same pieces
-- give the same words whatever the table's layout or plan (unordered, the sample followed the
-- heap: one evaluation question moved with the number of other scopes stored beside the
-- searched one). Counted by pgmem._word_postings, or stored in the set's fold head by
-- pgmem.refresh_word_fold.
-- Migration 020 stored the words as text (lexemes): a return type cannot be replaced, so the
-- definition returning the tsvector is dropped first (once).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc
                WHERE oid = to_regprocedure('pgmem._word_sample(text, text, text)')
                  AND 'tsv' = ANY (proargnames)) THEN
        DROP FUNCTION pgmem._word_sample(text, text, text);
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION pgmem._word_sample(scope text, kind text, thread text DEFAULT NULL)
RETURNS TABLE (piece_id bigint, lexemes text)
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
-- Planned with the call's values (a generic plan cannot use the thread's index range).
SET plan_cache_mode = force_custom_plan
AS $$
    SELECT p.piece_id, p.lexemes FROM pgmem.piece_word p
     WHERE p.scope_id = _word_sample.scope AND p.kind = _word_sample.kind
       AND (_word_sample.thread IS NULL OR p.thread_id = _word_sample.thread)
     ORDER BY p.piece_id
     LIMIT 1000
$$;
COMMENT ON FUNCTION pgmem._word_sample(text, text, text) IS
'The word side''s sample: the first 1,000 pieces by id of the scope''s pieces of that kind (in the thread, when given), with their words. Rows of other scopes are never read (scope_id); under row-level security only the transaction''s scope has any.';

-- Until 0036 a helper shared by two maintenance refreshes; refresh_word_fold checks its own.
DROP FUNCTION IF EXISTS pgmem.check_word_maintenance(text, text, text);

-- The folded postings (pgmem.word_fold, 021): scope-wide, the word side reads one row a lexeme
-- with its pieces' ids instead of one heap row a piece through the word index (an 8-part message
-- on an 80,000-piece scope: 155 ms of reads through the index, 20 ms folded). Folded by index
-- maintenance (pgmem.refresh_word_fold, a row of pgmem.scope_index_plan). The pieces written
-- since (the tail, piece_id > through) are read directly. A fold holds every piece of its scope
-- and kind up to its last id while it exists: no piece with a lower id commits after it (the
-- refresh waits for the scope's writers in flight), and a delete of one of its pieces deletes
-- it (trigger piece_word_fold_on_delete). Read by pgmem._word_postings and the plan.
CREATE OR REPLACE FUNCTION pgmem._word_fold(scope text, kind text)
RETURNS TABLE (through bigint, pieces bigint, cap bigint, tail bigint, max_tail bigint)
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT h.through, h.pieces, h.cap, t.n, m.max_tail
      FROM pgmem.word_fold_head h
     -- The tail is read directly: about 18 us a piece, against the index's 38 us a word on a
     -- 2,000-piece scope and 1.5 ms on an 80,000-piece one.
     CROSS JOIN LATERAL (SELECT greatest(100, h.pieces / 50) AS max_tail) m
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM (
             SELECT 1 FROM pgmem.piece_word p
              WHERE p.scope_id = h.scope_id AND p.piece_id > h.through AND p.kind = h.kind
              LIMIT m.max_tail + 1) x) t
     WHERE h.scope_id = _word_fold.scope AND h.kind = _word_fold.kind
$$;
COMMENT ON FUNCTION pgmem._word_fold(text, text) IS
'The folded postings of the scope''s pieces of that kind (pgmem.word_fold_head), when there are: through, pieces, cap, and the tail (pieces of that kind written since, counted up to max_tail + 1) with max_tail, the most the word side reads directly (100, or a fiftieth of the fold). No row when there is no fold (none was made, or a piece of it was deleted).';

-- A forget of a folded piece deletes the fold of its scope (both kinds): the forgotten pieces'
-- words are not kept in it, and the word side reads the word index until the next refresh.
-- The scope's fold lock (shared) first: a refresh running meanwhile is waited for and its
-- fold deleted too.
CREATE OR REPLACE FUNCTION pgmem._word_fold_forget()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    r record;
    k record;
BEGIN
    FOR r IN SELECT g.scope_id, min(g.piece_id) AS first_id FROM gone g GROUP BY g.scope_id ORDER BY g.scope_id LOOP
        PERFORM pg_advisory_xact_lock_shared(pgmem._word_fold_lock(r.scope_id));
        DELETE FROM pgmem.word_fold_head h WHERE h.scope_id = r.scope_id AND h.through >= r.first_id;
        -- Under REPEATABLE READ or SERIALIZABLE a fold committed after the transaction's snapshot
        -- is not seen by the DELETE: inserting its key meets it, and that is a serialization
        -- failure (40001: the transaction runs again, pgmem's retries). A key that meets none is
        -- removed at once. A scope being deleted takes its folds with it (foreign key, cascade).
        IF current_setting('transaction_isolation') <> 'read committed'
           AND EXISTS (SELECT 1 FROM pgmem.scope s WHERE s.scope_id = r.scope_id) THEN
            FOR k IN SELECT DISTINCT g.kind FROM gone g WHERE g.scope_id = r.scope_id LOOP
                INSERT INTO pgmem.word_fold_head AS h (scope_id, kind, through, pieces, cap, sample)
                VALUES (r.scope_id, k.kind, -1, 0, 0, '{}') ON CONFLICT (scope_id, kind) DO NOTHING;
                DELETE FROM pgmem.word_fold_head h WHERE h.scope_id = r.scope_id AND h.kind = k.kind AND h.through = -1;
            END LOOP;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION pgmem._word_fold_forget() IS
'Trigger function: after pieces are deleted, deletes the folded postings (pgmem.word_fold_head, and its rows) of their scope that held any of them, under the scope''s fold lock (shared; pgmem.refresh_word_fold holds it exclusively).';
CREATE OR REPLACE TRIGGER piece_word_fold_on_delete AFTER DELETE ON pgmem.piece
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pgmem._word_fold_forget();
COMMENT ON TRIGGER piece_word_fold_on_delete ON pgmem.piece IS
'Deletes the folded postings that held a deleted piece (pgmem._word_fold_forget).';

-- The advisory lock key of a scope's folded postings.
CREATE OR REPLACE FUNCTION pgmem._word_fold_lock(scope text)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT (x'70676d66'::bigint << 32) | (hashtext(scope)::bigint & x'ffffffff'::bigint)
$$;
COMMENT ON FUNCTION pgmem._word_fold_lock(text) IS
'The advisory lock of a scope''s folded postings: held exclusively by pgmem.refresh_word_fold, shared by a delete of the scope''s pieces (trigger piece_word_fold_on_delete).';

CREATE OR REPLACE FUNCTION pgmem.refresh_word_fold(scope text, kind text DEFAULT 'memory')
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    prior text := current_setting('pgmem.scope', true);
    last_id bigint;
    n bigint;
    fold_cap bigint;
    stored integer := 0;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF kind IS NULL OR kind NOT IN ('memory', 'document') THEN
        RAISE EXCEPTION 'kind must be memory or document, got %', coalesce(kind, 'NULL') USING ERRCODE = '22023';
    END IF;
    -- Maintenance, as pgmem.scope_index_plan: a superuser or a login member of pgmem_owner.
    IF NOT (EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = session_user AND r.rolsuper)
            OR (pg_catalog.pg_has_role(session_user, 'pgmem_owner', 'USAGE')
                AND pg_catalog.pg_has_role(current_user, 'pgmem_owner', 'USAGE'))) THEN
        RAISE EXCEPTION 'refresh_word_fold is index maintenance, which % (as %) may not run', session_user, current_user
            USING ERRCODE = '42501',
                  HINT = 'Run it as the role that migrates pgmem (a login member of pgmem_owner) or as a superuser: pgmem.scope_index_plan''s words rows do (docs/scaling.md, "The folded postings").';
    END IF;
    -- The fold is read after the wait for the writers in flight (below), each statement with a
    -- snapshot of its own: READ COMMITTED only. Under REPEATABLE READ or SERIALIZABLE the
    -- transaction's snapshot predates the wait, so a writer that commits meanwhile (its ids below
    -- the fold's last) would be in neither the fold nor its tail: refused, before anything changes.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'refresh_word_fold must run in a READ COMMITTED transaction, not %',
            upper(current_setting('transaction_isolation'))
            USING ERRCODE = '25000',
                  HINT = 'Run it (or pgmem.index_large_scopes) in its own transaction at the default isolation level: its fold must see the pieces of the writers it waits for.';
    END IF;
    PERFORM set_config('pgmem.scope', scope, true);
    -- The fold's last piece: the scope's last piece id now, of any kind.
    SELECT max(p.piece_id) INTO last_id FROM pgmem.piece_word p WHERE p.scope_id = refresh_word_fold.scope;
    -- A writer that may still commit a lower id holds the scope row FOR SHARE from before it took
    -- its ids (pgmem.bind_scope_model): waited for here (FOR NO KEY UPDATE, released at once by
    -- rolling its subtransaction back); a later writer takes higher ids, which are the tail.
    -- Not in a transaction that holds pgmem.piece against writers (SHARE or stronger: a CREATE
    -- INDEX, index_large_scopes' lock): no writer can hold an id it has not committed then (the
    -- lock waited for every one), and a writer holding the scope row waits for this transaction
    -- at its first piece. Waiting for that writer deadlocked index_large_scopes with it (0106).
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                    WHERE l.locktype = 'relation' AND l.relation = 'pgmem.piece'::regclass
                      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
                      AND l.pid = pg_catalog.pg_backend_pid() AND l.granted
                      AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')) THEN
        BEGIN
            PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = refresh_word_fold.scope FOR NO KEY UPDATE;
            RAISE EXCEPTION 'released' USING ERRCODE = 'PMWF1';
        EXCEPTION WHEN SQLSTATE 'PMWF1' THEN
            NULL;
        END;
    END IF;
    -- Lock order (docs/architecture.md): the scope row (KEY SHARE, as the head's foreign key would
    -- take it), then the scope's fold lock: a delete of its pieces (forget_turn, a replaced turn,
    -- retention) waits for this transaction and then deletes the fold if it held them.
    PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = refresh_word_fold.scope FOR KEY SHARE;
    PERFORM pg_advisory_xact_lock(pgmem._word_fold_lock(refresh_word_fold.scope));
    DELETE FROM pgmem.word_fold_head h WHERE h.scope_id = refresh_word_fold.scope AND h.kind = refresh_word_fold.kind;
    SELECT count(*) INTO n FROM pgmem.piece_word p
     WHERE p.scope_id = refresh_word_fold.scope AND p.kind = refresh_word_fold.kind AND p.piece_id <= last_id;
    -- Only a set of more than 1,000 pieces is folded (a smaller one reads its few postings as
    -- fast), and only its words in more than 128 of them: a rarer word costs a few heap rows
    -- through the word index, and those words were over half of the fold's size (their ids
    -- stored inline, uncompressed).
    IF n > 1000 THEN
        -- The most pieces a searched word may be in at the default share while the fold is read
        -- (its tail at most max_tail, pgmem._word_fold): a word in more has its count only.
        fold_cap := greatest(3, floor(0.1 * least(n + greatest(100, n / 50), 100000)));
        -- The head, with the word side's sample of the set: the lexemes in more than 3 of its
        -- first 1,000 pieces by id, and their counts (all of them at most last_id, and theirs
        -- while the head exists).
        INSERT INTO pgmem.word_fold_head (scope_id, kind, through, pieces, cap, sample)
        SELECT refresh_word_fold.scope, refresh_word_fold.kind, last_id, n, fold_cap,
               coalesce(jsonb_object_agg(c.lex, c.c), '{}')
          FROM (SELECT x.lex, count(*)::integer AS c
                  FROM pgmem._word_sample(refresh_word_fold.scope, refresh_word_fold.kind) s
                 CROSS JOIN LATERAL unnest(string_to_array(s.lexemes, ' ')) AS x(lex)
                 GROUP BY x.lex
                HAVING count(*) > 3) c;
        INSERT INTO pgmem.word_fold (scope_id, kind, lexeme, pieces, ids)
        SELECT refresh_word_fold.scope, refresh_word_fold.kind, x.lex, count(*),
               CASE WHEN count(*) <= fold_cap THEN array_agg(p.piece_id ORDER BY p.piece_id) END
          FROM pgmem.piece_word p CROSS JOIN LATERAL unnest(string_to_array(p.lexemes, ' ')) AS x(lex)
         WHERE p.scope_id = refresh_word_fold.scope AND p.kind = refresh_word_fold.kind AND p.piece_id <= last_id
         GROUP BY x.lex
        HAVING count(*) > 128;
        GET DIAGNOSTICS stored = ROW_COUNT;
    END IF;
    PERFORM set_config('pgmem.scope', coalesce(prior, ''), true);
    RETURN stored;
END
$$;
COMMENT ON FUNCTION pgmem.refresh_word_fold(text, text) IS
'Index maintenance (a superuser or a login member of pgmem_owner; 42501 otherwise): folds the postings of the scope''s pieces of that kind (memory, the default, or document) written so far into pgmem.word_fold, one row a lexeme found in more than 128 of them with their ids, stores the word side''s sample of them in the head (pgmem.word_fold_head.sample: the lexemes in more than 3 of the first 1,000 pieces by id, with their counts), and returns how many lexemes it stored; a set of 1,000 pieces or fewer has no fold (its rows are removed, 0). Waits for the scope''s writers in flight (so that no lower piece id commits later; not when the transaction holds pgmem.piece in SHARE mode or stronger, which waited for them, 0106), then reads their pieces: READ COMMITTED only (25000 under REPEATABLE READ or SERIALIZABLE, whose snapshot predates the wait). pgmem.scope_index_plan returns a call for every set of more than 1,000 pieces whose fold is missing, stale or has a tail of half its max_tail, and for a fold of a smaller set.';

-- The words of a whole message at once: the parts of one message share the sample, and a
-- lexeme found in several parts is counted once (8 parts cost 8 samples before: 360 ms of
-- an 8-part recall's 370 on a 2,000-piece scope, docs/scaling.md).
CREATE OR REPLACE FUNCTION pgmem._word_postings(
    scope text,
    part_texts text[],
    thread text DEFAULT NULL,
    share double precision DEFAULT 0.1,
    kind text DEFAULT 'memory'
) RETURNS TABLE (part_no integer, lexeme text, pieces bigint, weight double precision, piece_ids bigint[])
LANGUAGE plpgsql STABLE PARALLEL SAFE
-- Definer: the words are in pgmem.piece_word, whose row-level security is not forced so that its
-- owner can use the word index (050_security.sql). This function checks its scope first and
-- reads only that scope's rows (scope_id, and the index key's scope number).
SECURITY DEFINER
SET search_path = pg_catalog, pgmem, pg_temp
-- Scope-wide, its statements are planned once a connection (planning them took about 1 ms a
-- call); in a thread, with the call's values (below).
SET plan_cache_mode = force_generic_plan
-- Never a sequential scan of the word table: a word's read stops after lim + 1 pieces, and for
-- a small scope in a table of many such scopes the planner expected a scan to find them early.
-- It then computed every row's word keys, for every word: 3.5 s for a 2-part question on a
-- 120-piece scope among 690 (19,000 pieces), 8.7 ms through the word index.
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    n bigint;
    lim bigint;
    -- In the sample of 1,000: how often a word may appear there and still be read.
    sample_lim bigint;
    -- The most pieces a searched word may be in (setting pgmem.word_postings_cap): in a large
    -- scope share alone lets a word in 10,000 of 100,000 pieces be read and scored (docs/scaling.md).
    cap bigint := coalesce(nullif(current_setting('pgmem.word_postings_cap', true), '')::bigint, 1000000000);
    -- The word index's key of a lexeme here (pgmem.scope_lexemes): scope number, kind, lexeme.
    key_prefix text;
    -- Scope-wide, the sample's counts are read from the fold's head while it exists.
    cached boolean := false;
    stored_sample jsonb;
    -- Scope-wide, the postings are read from their fold (pgmem.word_fold) while it holds the
    -- scope's pieces and its tail is short: its last piece id, and the most pieces a word of it may be in.
    folded boolean := false;
    fold_through bigint;
    fold_cap bigint;
BEGIN
    PERFORM pgmem.check_scope(_word_postings.scope);
    IF NOT (cap >= 3) THEN
        RAISE EXCEPTION 'pgmem.word_postings_cap must be at least 3, got %', cap USING ERRCODE = '22023';
    END IF;
    IF kind IS NULL OR kind NOT IN ('memory', 'document') THEN
        RAISE EXCEPTION 'kind must be memory or document, got %', coalesce(kind, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF share IS NULL OR NOT (share > 0 AND share <= 1) THEN
        RAISE EXCEPTION 'share must be in (0, 1], got %', coalesce(share::text, 'NULL') USING ERRCODE = '22023',
            HINT = 'share is the largest fraction of the searched pieces a word may appear in and still be searched.';
    END IF;
    IF cardinality(part_texts) > 64 THEN
        RAISE EXCEPTION 'at most 64 part texts, got %', cardinality(part_texts) USING ERRCODE = '22023',
            HINT = 'A message is split into at most 8 parts; memory_recall takes at most 64.';
    END IF;
    IF coalesce(cardinality(part_texts), 0) = 0 THEN
        RETURN;
    END IF;
    -- Read here, not through pgmem.scope_no: as the owner, pgmem.scope's forced policy hides the
    -- scope from a superuser's session that set none.
    key_prefix := (SELECT p.scope_no FROM pgmem.piece_word p WHERE p.scope_id = _word_postings.scope LIMIT 1)::text
                  || left(_word_postings.kind, 1) || '/';
    -- Scope-wide, the set's fold (index maintenance's): while it exists its sample is the set's,
    -- and its postings are read while its tail is short. Setting pgmem.word_fold = off reads
    -- every word through the index (the same rows; for measuring the fold, recall_ab --setting).
    IF _word_postings.thread IS NULL THEN
        SELECT f.through, f.cap, least(f.pieces + f.tail, 100000),
               f.tail <= f.max_tail AND coalesce(current_setting('pgmem.word_fold', true), '') <> 'off'
          INTO fold_through, fold_cap, n, folded
          FROM pgmem._word_fold(_word_postings.scope, _word_postings.kind) f;
        cached := FOUND;
        folded := cached AND folded;
    ELSE
        -- A generic plan cannot use the thread index for "thread IS NULL OR thread_id = thread"
        -- and scans the whole scope (10x slower in a thread): planned with the call's values
        -- (the function's own setting comes back on return).
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
    IF cached THEN
        -- Detoasted once here: the sample is stored out of line, and a variable holding the
        -- stored value holds a pointer to it, which every lookup below detoasted again (its
        -- whole 50 kB for each word: about 1 ms of a 3.5 ms call on a 2,000-piece scope).
        -- '{}' || sample returns the sample itself, read in full.
        SELECT '{}'::jsonb || h.sample INTO stored_sample FROM pgmem.word_fold_head h
         WHERE h.scope_id = _word_postings.scope AND h.kind = _word_postings.kind;
    END IF;
    -- The searched set's size, counted up to 100,000 pieces (so a word in at most 10,000 pieces
    -- of a larger scope still counts as distinctive at the default share); a valid fold and its
    -- tail are the same count.
    IF NOT folded THEN
        SELECT count(*) INTO n FROM (
            SELECT 1 FROM pgmem.piece_word p
             WHERE p.scope_id = _word_postings.scope AND p.kind = _word_postings.kind
               AND (_word_postings.thread IS NULL OR p.thread_id = _word_postings.thread)
             LIMIT 100000) c;
    END IF;
    -- At least 3: in a small set (under 30 pieces) a word in two or three of them still singles
    -- them out, and 10% would keep only words found once, however incidental.
    lim := greatest(3, floor(share * n));
    sample_lim := greatest(3, floor(share * least(n, 1000)));
    IF lim > cap THEN
        -- The cap binds: the sample's limit is the cap's share of the sample.
        lim := cap;
        sample_lim := greatest(3, floor(cap * least(n, 1000) / n));
    END IF;
    -- A word the fold keeps only the count of may be searched at a share above the default.
    folded := folded AND lim <= fold_cap;
    -- Each word has its pieces read through the word index, up to lim + 1 of them: the exact
    -- count, and the postings the word side ranks. In a set of more than 1,000 pieces a common
    -- word would cost lim + 1 rows, so every word is first counted in a sample of 1,000
    -- searched pieces, in one pass over the sample's lexemes (a lexeme-by-lexeme scan of the
    -- sample took 13x longer for a long message), and a word common there is dropped unread.
    -- Scope-wide, index maintenance stores those counts with the fold (pgmem.word_fold_head):
    -- read while it exists, they save counting the sample's lexemes, and give the same words.
    -- A smaller set needs no sample: reading at most lim + 1 rows a word is its exact count, as
    -- the sample of the whole set was (same words, a third of the cost on small scopes).
    RETURN QUERY
    WITH plex AS MATERIALIZED (
        SELECT t.i::integer AS part_no, l.lex
          FROM unnest(part_texts) WITH ORDINALITY AS t(txt, i)
         CROSS JOIN LATERAL unnest(pgmem.word_lexemes(t.txt)) AS l(lex)
    ), lex AS MATERIALIZED (
        SELECT DISTINCT x.lex FROM plex x
    ), sample AS MATERIALIZED (
        SELECT s.lexemes FROM pgmem._word_sample(_word_postings.scope, _word_postings.kind, _word_postings.thread) s
         WHERE n > 1000 AND NOT cached
    ), sampled AS (
        -- Each stored word list unnested in the select list (below, the same rows): a
        -- set-returning function in FROM stores each list's rows first, and took about 1.5 times
        -- as long for a thread's 300 pieces (0041).
        SELECT x.lex, count(*) AS c
          FROM (SELECT unnest(string_to_array(s.lexemes, ' ')) AS lex FROM sample s) x
         WHERE x.lex IN (SELECT lex.lex FROM lex)
         GROUP BY x.lex
        UNION ALL
        -- The same counts as stored by index maintenance: only lexemes in more than 3 of the
        -- sample's pieces are, and one in 3 or fewer is never dropped (sample_lim >= 3). Each
        -- word looked up by key in the head's sample, read once above (unnesting the whole
        -- sample, about 2,300 lexemes, took 1.5 ms of a 5.6 ms call on a 2,000-piece scope).
        SELECT lex.lex, (stored_sample ->> lex.lex)::bigint
          FROM lex
         WHERE cached AND stored_sample ? lex.lex
    ), rare AS (
        SELECT lex.lex, coalesce(sd.c, 0) AS c
          FROM lex LEFT JOIN sampled sd ON sd.lex = lex.lex
         WHERE n <= 1000 OR coalesce(sd.c, 0) <= sample_lim
    ), direct AS MATERIALIZED (
        -- In a thread, whether its pieces' words are read once (below) rather than each word's
        -- pieces through the word index. A thread piece read directly costs about 18 us; a word
        -- through the index about 38 us on a 2,000-piece scope and 519 us on a 100,000-piece
        -- one (its postings in the whole scope are ANDed with the thread's range), about 5 us
        -- more per 1,000 pieces of the scope. Directly, then, when the thread holds at most
        -- 2 + (scope pieces) / 3,600 pieces per word of the message: the scope is counted only as
        -- far as that needs, and never past 20,000 pieces (a larger need keeps the index). A fold
        -- of the scope holding that many is enough (its pieces are all still there: a delete of
        -- one deletes it), without counting (0098: the count read 4,935 index entries, about 1 ms
        -- of an 8-part message's 5 ms in a 300-piece thread of a 100,000-piece scope).
        SELECT _word_postings.thread IS NOT NULL AND g.words > 0 AND (
                   g.need <= 0
                   OR (g.need <= 20000
                       AND (coalesce((SELECT h.pieces FROM pgmem.word_fold_head h
                                       WHERE h.scope_id = _word_postings.scope AND h.kind = _word_postings.kind), 0) >= g.need
                            OR (SELECT count(*) FROM (SELECT 1 FROM pgmem.piece_word p
                                                       WHERE p.scope_id = _word_postings.scope AND p.kind = _word_postings.kind
                                                       LIMIT g.need) c) >= g.need))) AS d
          FROM (SELECT count(*) AS words,
                       ceil(3600 * (n::numeric / greatest(count(*), 1) - 2))::bigint AS need FROM lex) g
    ), fw AS MATERIALIZED (
        -- Scope-wide with a valid fold: each word's folded row, if it has one.
        SELECT r.lex, f.ids, f.lexeme IS NOT NULL AS in_fold
          FROM rare r
          LEFT JOIN pgmem.word_fold f ON f.scope_id = _word_postings.scope AND f.kind = _word_postings.kind
                                     AND f.lexeme = r.lex
         WHERE folded
    ), tail AS MATERIALIZED (
        -- The fold's tail: the pieces written since it, read directly (at most max_tail), for
        -- the words of the fold. A word's ids in no order (here and in a thread read directly,
        -- below): they are summed, and sorting them by (word, id) cost about 1 ms of an 8-part
        -- message's 5 in a 300-piece thread (0098); the rows are hashed by word instead.
        SELECT x.lex, array_agg(x.piece_id) AS ids
          FROM (SELECT p.piece_id, unnest(string_to_array(p.lexemes, ' ')) AS lex FROM pgmem.piece_word p
                 WHERE folded AND p.scope_id = _word_postings.scope AND p.piece_id > fold_through
                   AND p.kind = _word_postings.kind) x
         WHERE x.lex IN (SELECT fw.lex FROM fw WHERE fw.in_fold)
         GROUP BY x.lex
    ), read AS MATERIALIZED (
        -- Through the word index keyed by scope (pgmem.scope_lexemes, piece_word_words_idx): only
        -- this scope's pieces of this kind holding the word are read. The key names the scope and
        -- the kind, so scope-wide neither is a condition here: with them the planner ANDed the
        -- word's postings with a scan of the scope's whole (scope_id, kind) index range for every
        -- word (2,000 entries a word on a 2,000-piece scope, 100,000 on a 100,000-piece one). In a
        -- thread they are, so that the postings can be ANDed with the thread's own range of
        -- piece_word_scope_kind_idx (without them an 8-part message in a thread of a 2,000-piece
        -- scope took 149 ms against 43 ms).
        SELECT r.lex, ARRAY(
                   SELECT p.piece_id FROM pgmem.piece_word p
                    WHERE pgmem.scope_lexemes(p.scope_no, p.kind, p.lexemes) @> ARRAY[key_prefix || r.lex]
                      AND (_word_postings.thread IS NULL
                           OR (p.scope_id = _word_postings.scope AND p.kind = _word_postings.kind
                               AND p.thread_id = _word_postings.thread))
                    LIMIT lim + 1) AS ids
          FROM rare r
         WHERE NOT (SELECT dr.d FROM direct dr)
           AND (NOT folded OR r.lex IN (SELECT fw.lex FROM fw WHERE NOT fw.in_fold))
        UNION ALL
        -- A thread read directly (direct, above): its pieces' words are read once (the same
        -- words and pieces; only the cost differs). The reads of an 8-part message (124 words)
        -- in a 300-piece thread took 64.39 ms through the index in a 100,000-piece scope against
        -- 5.4 this way (4.78 against 5.36 in a 2,000-piece one). A word's pieces are then all of
        -- them, and one in more than lim is dropped below all the same.
        SELECT x.lex, array_agg(x.piece_id)
          FROM (SELECT p.piece_id, unnest(string_to_array(p.lexemes, ' ')) AS lex FROM pgmem.piece_word p
                 WHERE (SELECT dr.d FROM direct dr)
                   AND p.scope_id = _word_postings.scope AND p.kind = _word_postings.kind
                   AND p.thread_id = _word_postings.thread) x
         WHERE x.lex IN (SELECT r.lex FROM rare r)
         GROUP BY x.lex
        UNION ALL
        -- Scope-wide with a valid fold: each folded word's ids and those of its tail (the same
        -- pieces as through the index). A word the fold has the count of only is in more than
        -- lim pieces: NULL, dropped below. A word not in the fold (in at most 128 of its pieces,
        -- or in none) is read through the index, above.
        SELECT fw.lex, CASE WHEN fw.ids IS NOT NULL THEN fw.ids || coalesce(t.ids, '{}') END
          FROM fw LEFT JOIN tail t ON t.lex = fw.lex
         WHERE fw.in_fold
    )
    -- BM25's inverse document frequency: a word in fewer pieces weighs more.
    SELECT x.part_no, d.lex, cardinality(d.ids)::bigint,
           ln(1 + (n - cardinality(d.ids) + 0.5) / (cardinality(d.ids) + 0.5))::double precision, d.ids
      FROM plex x JOIN read d ON d.lex = x.lex
     WHERE cardinality(d.ids) BETWEEN 1 AND lim
     ORDER BY 1, 2;
END
$$;
COMMENT ON FUNCTION pgmem._word_postings(text, text[], text, double precision, text) IS
'pgmem.message_words with each word''s pieces (piece_ids, in no order since 0098, at most share of the searched pieces): the one implementation of the word side''s rule, read by message_words and word_candidates. Checks its scope (42501) and arguments itself. SECURITY DEFINER: it reads pgmem.piece_word through its word index, which row-level security would keep from being used (no GIN operator is leakproof); it returns only the words and piece ids of the scope it checked.';

CREATE OR REPLACE FUNCTION pgmem.message_words(
    scope text,
    part_texts text[],
    thread text DEFAULT NULL,
    share double precision DEFAULT 0.1,
    kind text DEFAULT 'memory'
) RETURNS TABLE (part_no integer, lexeme text, pieces bigint, weight double precision)
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT w.part_no, w.lexeme, w.pieces, w.weight
      FROM pgmem._word_postings(scope, part_texts, thread, share, kind) w
     ORDER BY 1, 2
$$;
COMMENT ON FUNCTION pgmem.message_words(text, text[], text, double precision, text) IS
'The words hybrid recall (and hybrid document search, kind document) searches for, for every part of a message at once (at most 64 parts; part_no is the 1-based position in part_texts): each part''s lexemes (pgmem.word_lexemes) found in at least one and at most share (default 0.1, and at least 3) of the pieces of that kind (memory, the default, or document units) searched (the scope''s, or the thread''s when thread is given; the scope counted up to 100,000 pieces), with the number of pieces each is in and its weight, BM25''s inverse document frequency ln(1 + (n - pieces + 0.5) / (pieces + 0.5)). A piece''s word score for a part is the sum of the weights of the part''s words it contains (pgmem.word_candidates). Words common in the first 1,000 searched pieces by id (all of them in a smaller set) are dropped without an exact count. The parts share that sample and each distinct word is counted once. A part without distinctive words has no rows: its group is then its vector ranking. scope must be the transaction''s pgmem.scope (42501 otherwise).';

-- One part: the same words as its message_words row set.
CREATE OR REPLACE FUNCTION pgmem.distinctive_words(
    scope text,
    part_text text,
    thread text DEFAULT NULL,
    share double precision DEFAULT 0.1,
    kind text DEFAULT 'memory'
) RETURNS TABLE (lexeme text, pieces bigint, weight double precision)
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT w.lexeme, w.pieces, w.weight
      FROM pgmem.message_words(scope, ARRAY[part_text], thread, share, kind) w
     ORDER BY w.lexeme
$$;
COMMENT ON FUNCTION pgmem.distinctive_words(text, text, text, double precision, text) IS
'The distinctive words of one part (pgmem.message_words of a one-part message): lexeme, the number of searched pieces holding it, and its weight. scope must be the transaction''s pgmem.scope (42501 otherwise).';

-- The word side's candidates, shared by memory_recall and document_search: each distinct word's
-- pieces are read once through the word index whatever the number of parts holding it, then
-- summed per part (the work is the postings of the distinctive words, each in at most share of
-- the pieces, not every matched piece times every word: 4x slower for a long message).
CREATE OR REPLACE FUNCTION pgmem.word_candidates(
    scope text,
    part_texts text[],
    k integer DEFAULT 20,
    thread text DEFAULT NULL,
    share double precision DEFAULT 0.1,
    kind text DEFAULT 'memory',
    metadata_filter jsonb DEFAULT NULL
) RETURNS TABLE (part_no integer, piece_id bigint, score double precision, word_rank integer)
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
SET plan_cache_mode = force_custom_plan
-- A long message on a large scope scores a few hundred thousand (part, piece) rows: at the
-- default 4 MB they spilled to disk in three places (docs/scaling.md).
SET work_mem = '32MB'
AS $$
#variable_conflict use_column
DECLARE
    filt jsonb := nullif(metadata_filter, '{}'::jsonb);
    gone bigint[] := '{}';
BEGIN
    IF k IS NULL OR k NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, got %', coalesce(k::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF filt IS NOT NULL AND jsonb_typeof(filt) <> 'object' THEN
        RAISE EXCEPTION 'metadata_filter must be a JSON object, got %', jsonb_typeof(filt) USING ERRCODE = '22023';
    END IF;
    IF kind = 'memory' THEN
        -- Left out (0100); planned with the call's value. A call, not a probe here: this
        -- function's statements are planned on every call, the call's once a connection.
        gone := pgmem.expired_item_pieces(scope);
    END IF;
    -- MATERIALIZED throughout: the words are found once, then their postings once. A scope the
    -- planner's statistics do not know yet (new since the last ANALYZE) is estimated at one row,
    -- and the planner then looped the word search once per piece of the scope: 47 s instead of
    -- 0.06 s for a 2-part question on an 804-piece scope.
    RETURN QUERY
    WITH w AS MATERIALIZED (
        -- Each weight in whole nano-units, so a piece's sum is exact whatever the order: a sum
        -- of the raw weights' last bit follows the order the plan adds the words in, and it broke
        -- ties by plan (8 of 236 pooled evaluation questions moved with the other scopes stored
        -- in the table). Whole numbers held as double precision add exactly below 2^53, and a
        -- part's sum stays under 256 lexemes x 1.2e10 (a weight is at most about 11.1, the
        -- searched set counted up to 100,000 pieces): the same sums as bigint, faster (sum(bigint)
        -- accumulates 128-bit integers and makes every piece's sum a numeric): 8-part hybrid
        -- recall on a 100,000-piece scope took 0.84 of the time (docs/bench/recall-ab-0034.txt).
        -- A numeric sum took 4x as long.
        SELECT x.part_no, round(x.weight * 1e9) AS nano, x.piece_ids
          FROM pgmem._word_postings(word_candidates.scope, part_texts, word_candidates.thread, share, kind) x
    ), allowed AS MATERIALIZED (
        -- Only with a metadata filter: the pieces among the postings whose turn's metadata holds it.
        SELECT a.id FROM (SELECT DISTINCT u.id FROM w CROSS JOIN LATERAL unnest(w.piece_ids) AS u(id)) a
         WHERE (SELECT t.metadata FROM pgmem.piece p
                  JOIN pgmem.turn t ON t.scope_id = p.scope_id AND t.thread_id = p.thread_id AND t.turn_index = p.turn_index
                 WHERE p.scope_id = word_candidates.scope AND p.piece_id = a.id) @> filt
    )
    -- Each part on its own, and only its top k sorted (a bounded heap). Ranking every (part,
    -- piece) sum of a message in one window sorted them all: on a 100,000-piece scope an 8-part
    -- message has over a hundred thousand, and the sort cost more than the sums. Pieces with the
    -- same words tie on their score, and the older piece ranks first.
    SELECT pt.part_no, t.piece_id, (t.score::bigint / 1e9)::double precision,
           (row_number() OVER (PARTITION BY pt.part_no ORDER BY t.score DESC, t.piece_id))::integer
      FROM (SELECT DISTINCT w.part_no FROM w) pt
     -- The postings unnested in the select list (a set-returning function in FROM stores each
     -- array's rows first): 19% less time on 282,813 postings of an 8-part message on a
     -- 100,000-piece scope.
     CROSS JOIN LATERAL (
        SELECT u.id AS piece_id, sum(u.nano) AS score
          FROM (SELECT unnest(ww.piece_ids) AS id, ww.nano FROM w ww WHERE ww.part_no = pt.part_no) u
         WHERE (filt IS NULL OR u.id IN (SELECT a.id FROM allowed a))
           AND (cardinality(gone) = 0 OR u.id <> ALL (gone))
         GROUP BY u.id
         ORDER BY 2 DESC, 1
         LIMIT k) t
     ORDER BY 1, 4;
END
$$;
COMMENT ON FUNCTION pgmem.word_candidates(text, text[], integer, text, double precision, text, jsonb) IS
'The word side of hybrid recall and hybrid document search: for each part of a message (part_no, 1-based), up to k pieces of that kind (memory or document) holding its distinctive words (pgmem.message_words), by score (the sum of the weights of the part''s words the piece holds; ties: the older piece first) with their rank in the part. Within the thread when given, and among pieces of turns whose metadata contains metadata_filter when given. scope must be the transaction''s pgmem.scope (42501 otherwise).';

CREATE OR REPLACE FUNCTION pgmem.empty_recall_reason(scope text, thread text DEFAULT NULL, metadata_filter jsonb DEFAULT NULL,
                                                     plane text DEFAULT 'memory')
RETURNS TABLE (reason text, message text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
-- Planned with each call's values: a generic plan of "thread IS NULL OR thread_id = thread" (or of
-- the time bounds) reads the whole scope (tests/test_plan_cache.py).
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    filt jsonb := nullif(metadata_filter, '{}'::jsonb);
    gone bigint[];
BEGIN
    PERFORM pgmem.check_scope(empty_recall_reason.scope);
    IF plane IS NULL OR plane NOT IN ('memory', 'fact', 'document') THEN
        RAISE EXCEPTION 'plane must be memory, fact or document, got %', plane USING ERRCODE = '22023';
    END IF;
    -- A filter memory_recall refuses (check_recall_args) is refused here too: filter_empty, "no
    -- turn has metadata containing [1]", answered for a recall that could not have run (0111).
    IF metadata_filter IS NOT NULL AND jsonb_typeof(metadata_filter) <> 'object' THEN
        RAISE EXCEPTION 'metadata_filter must be a JSON object, got a JSON %', jsonb_typeof(metadata_filter)
            USING ERRCODE = '22023';
    END IF;
    IF octet_length(metadata_filter::text) > 4096 THEN
        RAISE EXCEPTION 'metadata_filter is % bytes as JSON text; at most 4,096', octet_length(metadata_filter::text)
            USING ERRCODE = '22023';
    END IF;
    IF plane = 'document' THEN
        -- document_search takes neither: a reason naming them would answer another search.
        IF empty_recall_reason.thread IS NOT NULL OR filt IS NOT NULL THEN
            RAISE EXCEPTION 'a document search has no thread or metadata filter' USING ERRCODE = '22023';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pgmem.piece p WHERE p.scope_id = empty_recall_reason.scope AND p.kind = 'document') THEN
            RETURN QUERY SELECT 'scope_empty'::text, format('scope %s holds no documents (check the scope name)', empty_recall_reason.scope);
        ELSE
            RETURN QUERY SELECT 'below_floor'::text, 'no document above the floor: the scope holds documents, none close enough'::text;
        END IF;
        RETURN;
    END IF;
    IF plane = 'fact' THEN
        -- fact_recall takes no metadata filter (a fact has no metadata): a reason for a filtered
        -- fact recall answered for another one, the filter ignored (0114).
        IF filt IS NOT NULL THEN
            RAISE EXCEPTION 'a fact recall has no metadata filter' USING ERRCODE = '22023';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pgmem.fact f WHERE f.scope_id = empty_recall_reason.scope) THEN
            RETURN QUERY SELECT 'scope_empty'::text, format('scope %s holds no facts (check the scope name)', empty_recall_reason.scope);
        ELSIF empty_recall_reason.thread IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM pgmem.fact f WHERE f.scope_id = empty_recall_reason.scope AND f.thread_id = empty_recall_reason.thread) THEN
            RETURN QUERY SELECT 'thread_empty'::text,
                format('thread %s has no facts in scope %s (check the thread name)', empty_recall_reason.thread, empty_recall_reason.scope);
        ELSE
            RETURN QUERY SELECT 'below_floor'::text, 'no fact above the floor: the scope holds facts, none close enough'::text;
        END IF;
        RETURN;
    END IF;
    -- Under row-level security a scope of another tenant looks like an empty one: the answer
    -- never tells a login whether a scope it may not read exists. The pieces of expired store
    -- items are not there for a recall (pgmem.expired_item_pieces, 0100), so not here either.
    gone := pgmem.expired_item_pieces(empty_recall_reason.scope);
    IF NOT EXISTS (SELECT 1 FROM pgmem.piece p WHERE p.scope_id = empty_recall_reason.scope AND p.kind = 'memory'
                      AND (cardinality(gone) = 0 OR p.piece_id <> ALL (gone))) THEN
        RETURN QUERY SELECT 'scope_empty'::text, format('scope %s holds no memory (check the scope name)', empty_recall_reason.scope);
    ELSIF empty_recall_reason.thread IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM pgmem.piece p WHERE p.scope_id = empty_recall_reason.scope AND p.kind = 'memory'
               AND p.thread_id = empty_recall_reason.thread AND (cardinality(gone) = 0 OR p.piece_id <> ALL (gone))) THEN
        RETURN QUERY SELECT 'thread_empty'::text,
            format('thread %s has no turns in scope %s (check the thread name)', empty_recall_reason.thread, empty_recall_reason.scope);
    ELSIF filt IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM pgmem.turn t WHERE t.scope_id = empty_recall_reason.scope
               AND (empty_recall_reason.thread IS NULL OR t.thread_id = empty_recall_reason.thread)
               AND t.metadata @> filt) THEN
        RETURN QUERY SELECT 'filter_empty'::text,
            format('no turn of scope %s%s has metadata containing %s', empty_recall_reason.scope,
                   CASE WHEN empty_recall_reason.thread IS NULL THEN '' ELSE format(' (thread %s)', empty_recall_reason.thread) END,
                   filt::text);
    ELSE
        RETURN QUERY SELECT 'below_floor'::text, 'no memory above the floor: the scope holds turns, none close enough'::text;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.empty_recall_reason(text, text, jsonb, text) IS
'Why a memory (or, with plane => ''fact'', a fact) recall, or (plane => ''document'', without thread or filter) a document search, returned nothing: scope_empty (the scope holds no memory, facts or documents, or is not visible to this login), thread_empty (the thread filter names no stored turn), filter_empty (no turn''s metadata contains the filter), or below_floor (there were turns, none scored above the floor). memory_recall raises it as a NOTICE when it returns no row (through pgmem.empty_memory_recall_reason, which knows since / until); the Python Recall carries it as empty_reason. fact_recall does the same for the fact plane (which takes no metadata filter: 22023, since 0114). A metadata_filter memory_recall refuses (not a JSON object, over 4,096 bytes) raises 22023 here too (0111). The scope must be the transaction''s pgmem.scope.';

-- since / until are a hard filter: a recall whose bounds keep no turn returned nothing, and
-- empty_recall_reason (which takes no bounds) said below_floor, "the scope holds turns, none close
-- enough", sending the person debugging to the floor. This one answers for a memory recall with
-- its bounds: empty_recall_reason's reason, unless that is below_floor and no turn of the scope
-- (thread, filter) lies within since / until: bounds_empty (0111).
CREATE OR REPLACE FUNCTION pgmem.empty_memory_recall_reason(scope text, thread text DEFAULT NULL, metadata_filter jsonb DEFAULT NULL,
                                                            since timestamptz DEFAULT NULL, until timestamptz DEFAULT NULL)
RETURNS TABLE (reason text, message text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    filt jsonb := nullif(metadata_filter, '{}'::jsonb);
    code text;
    msg text;
    gone bigint[];
BEGIN
    PERFORM pgmem.check_window(since, until, 'since', 'until');
    SELECT e.reason, e.message INTO code, msg
      FROM pgmem.empty_recall_reason(empty_memory_recall_reason.scope, empty_memory_recall_reason.thread, metadata_filter) e;
    IF code = 'below_floor' AND (since IS NOT NULL OR until IS NOT NULL) THEN
        gone := pgmem.expired_item_pieces(empty_memory_recall_reason.scope);
        IF NOT EXISTS (
                SELECT 1 FROM pgmem.turn t
                  JOIN pgmem.piece p ON p.scope_id = t.scope_id AND p.thread_id = t.thread_id
                                    AND p.turn_index = t.turn_index AND p.kind = 'memory'
                 WHERE t.scope_id = empty_memory_recall_reason.scope
                   AND (empty_memory_recall_reason.thread IS NULL OR t.thread_id = empty_memory_recall_reason.thread)
                   AND (filt IS NULL OR t.metadata @> filt)
                   AND (since IS NULL OR t.turn_time >= since) AND (until IS NULL OR t.turn_time < until)
                   AND (cardinality(gone) = 0 OR p.piece_id <> ALL (gone))) THEN
            code := 'bounds_empty';
            msg := format('no turn of scope %s%s%s has a time within since %s / until %s (a turn without a time is in none)',
                          empty_memory_recall_reason.scope,
                          CASE WHEN empty_memory_recall_reason.thread IS NULL THEN '' ELSE format(' (thread %s)', empty_memory_recall_reason.thread) END,
                          CASE WHEN filt IS NULL THEN '' ELSE format(' with metadata containing %s', filt::text) END,
                          -- In UTC, whatever the session's TimeZone: the message reads the same everywhere.
                          coalesce(to_char(since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '(open)'),
                          coalesce(to_char(until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '(open)'));
        END IF;
    END IF;
    RETURN QUERY SELECT code, msg;
END
$$;
COMMENT ON FUNCTION pgmem.empty_memory_recall_reason(text, text, jsonb, timestamptz, timestamptz) IS
'Why a memory recall with since / until returned nothing: pgmem.empty_recall_reason''s reason (scope_empty, thread_empty, filter_empty, below_floor), except bounds_empty when that is below_floor and no turn of the scope (in the thread, matching the filter) has a turn_time within since / until (turn_time >= since and < until; a turn without a time is in none) (0111). memory_recall raises it as a NOTICE when it returns no row; the Python Recall carries it as empty_reason. The scope must be the transaction''s pgmem.scope.';

-- Earlier signatures (before exact / ef_search, then model_id were added): dropped so named calls
-- stay unambiguous and an old signature without the model check cannot be called.
DROP FUNCTION IF EXISTS pgmem.memory_recall(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, text, text, integer, integer);
DROP FUNCTION IF EXISTS pgmem.fact_recall(text, @VECTOR_SCHEMA@.vector[], integer, double precision, text);
DROP FUNCTION IF EXISTS pgmem.memory_recall(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, text, text, integer, integer, boolean, integer);
DROP FUNCTION IF EXISTS pgmem.fact_recall(text, @VECTOR_SCHEMA@.vector[], integer, double precision, text, boolean, integer);
DROP FUNCTION IF EXISTS pgmem.explain_recall(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, text, integer);

-- Before metadata_filter was added.
DROP FUNCTION IF EXISTS pgmem._memory_candidates(text, @VECTOR_SCHEMA@.vector[], integer, text, boolean, integer);
DROP FUNCTION IF EXISTS pgmem.memory_recall(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, text, text, integer, integer, boolean, integer, text);
DROP FUNCTION IF EXISTS pgmem.explain_recall(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, text, integer, text);
DROP FUNCTION IF EXISTS pgmem.log_recall(text, text, text, text[], @VECTOR_SCHEMA@.vector[], integer, double precision, text, text, jsonb);

-- Before the time window, recency and since / until.
DROP FUNCTION IF EXISTS pgmem.memory_recall(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, text, text, integer, integer, boolean, integer, text, jsonb);

-- An expired LangGraph store item is recalled nowhere (0100). The store hid it from its own get
-- and search at once (0072), but its turn and pieces stay in the namespace's scope until the
-- sweep, and that scope is an ordinary one: memory_recall (pgmem.recall, the MCP server's recall)
-- returned its text, in one of the x places of its part. Its pieces are left out of every
-- ranking (the vector side, the word side, the time window) before the ranks are counted, as if
-- the sweep had removed them. Expiry is judged by the clock when the recall reads (the rule of
-- store_get), through store_item_scope_expires (081_store_search.sql): a scope without an
-- expired item costs one index probe, and every statement then runs as before.
CREATE OR REPLACE FUNCTION pgmem.expired_item_pieces(scope text)
RETURNS bigint[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
-- Planned once a connection: replanned on every call (an expiry bound the generic plan cannot
-- estimate), the call took 100-190 us where the plan runs in 15. Each statement has one plan
-- that fits: the scope's expired items through store_item_scope_expires, then their pieces by
-- thread through the piece index.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    -- A variable, so that the expiry bounds the index scan (clock_timestamp() is volatile).
    at timestamptz := pg_catalog.clock_timestamp();
    threads text[];
BEGIN
    PERFORM pgmem.check_scope(expired_item_pieces.scope);
    threads := ARRAY(SELECT i.thread_id FROM pgmem.store_item i
                      WHERE i.scope_id = expired_item_pieces.scope AND i.expires_at <= at AND i.thread_id IS NOT NULL);
    IF cardinality(threads) = 0 THEN
        RETURN '{}';
    END IF;
    RETURN ARRAY(SELECT p.piece_id FROM pgmem.piece p
                  WHERE p.scope_id = expired_item_pieces.scope AND p.kind = 'memory' AND p.thread_id = ANY (threads)
                  ORDER BY 1);
END
$$;
COMMENT ON FUNCTION pgmem.expired_item_pieces(text) IS
'The memory pieces of the transaction''s scope''s LangGraph store items that have expired (expires_at <= clock_timestamp(), the rule of store_get) and are not swept yet, sorted; empty when there are none. memory_recall, its candidate functions (_memory_candidates, _window_candidates, word_candidates) and empty_recall_reason leave them out, as if pgmem.expire_items had removed them (0100). The scope must be the transaction''s pgmem.scope.';

-- Candidate search, the one place that chooses between exact and index search.
-- Vectors are unit length on both sides (put_turn and add_facts store unit vectors; the query
-- parts are normalised here), so ordering by inner product (<#>) is ordering by cosine and costs a
-- third of a cosine distance. A scope with a valid partial ANN index (060_indexes.sql) is searched
-- through it; every other scope, and every thread-filtered search, is an exact scan within the
-- scope (the "+ 0" keeps the planner from using an ANN index there). Sequential and bitmap scans
-- are off inside these functions only: the exact scan must read the covering index
-- (060_indexes.sql) index-only, which the default random_page_cost = 4 makes look dearer than a
-- sequential scan of the whole table for scopes of a few thousand rows.
--
-- A metadata filter (turn.metadata @> filter) never makes a group short:
--   * when at most 5,000 pieces match (found through the GIN index on turn.metadata), they
--     are searched exactly, whatever the scope's size: a selective filter
--     would make an index scan discard almost everything it reads;
--   * otherwise, on a scope with an ANN index, the index is scanned with the filter applied to
--     each row it returns, and pgvector's iterative index scan (hnsw.iterative_scan =
--     strict_order, ivfflat.iterative_scan = relaxed_order) keeps reading the graph until each
--     part has k rows or hnsw.max_scan_tuples / ivfflat.max_probes is reached; a part still
--     short after that (more than 5,000 pieces match, so k <= 1,000 always exist) is searched
--     again exactly;
--   * on a scope without an index, the exact scan applies the filter.
CREATE OR REPLACE FUNCTION pgmem._memory_candidates(
    scope text,
    unit_vectors vector[],
    k integer,
    thread text DEFAULT NULL,
    exact boolean DEFAULT false,
    ef_search integer DEFAULT NULL,
    metadata_filter jsonb DEFAULT NULL
) RETURNS TABLE (part_no integer, piece_id bigint, ip double precision)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
SET jit = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET hnsw.ef_search = 64
SET hnsw.iterative_scan = strict_order
SET ivfflat.probes = 10
SET ivfflat.iterative_scan = off
AS $$
#variable_conflict use_column
DECLARE
    ann regclass;
    through bigint;
    ef integer;
    filt jsonb := nullif(metadata_filter, '{}'::jsonb);
    cap constant integer := 5000;
    ids bigint[];
    r_part integer[];
    r_piece bigint[];
    r_ip double precision[];
    -- The pieces of expired store items (pgmem.expired_item_pieces, 0100), left out of every path
    -- below; none: every statement as before (the dynamic ones get no condition at all). In the
    -- static statements, kept generic for the connection, as NOT IN a subquery, which is hashed:
    -- "<> ALL (gone)" compared every piece with every expired one (a literal array is hashed, a
    -- parameter is not), 8 parts over a scope's pieces, each against the expired ones.
    at timestamptz := pg_catalog.clock_timestamp();
    gone bigint[] := '{}';
    none_gone boolean;
    skip text := '';
BEGIN
    -- Callable on its own (900_grants.sql): the same caps as memory_recall.
    PERFORM pgmem.check_recall_args(scope, unit_vectors, NULL, k, 0, 'vector', 'piece.embedding', ef_search => ef_search,
                                    metadata_filter => metadata_filter);
    -- Asked only of a scope holding an expired item: this probe (store_item_scope_expires,
    -- planned once a connection under memory_recall) costs half of what the call does.
    IF EXISTS (SELECT 1 FROM pgmem.store_item i WHERE i.scope_id = _memory_candidates.scope AND i.expires_at <= at) THEN
        gone := pgmem.expired_item_pieces(scope);
    END IF;
    none_gone := cardinality(gone) = 0;
    IF NOT none_gone THEN
        skip := format(' AND c.piece_id <> ALL (%L::bigint[])', gone);
    END IF;
    IF filt IS NOT NULL THEN
        -- The matching pieces, at most cap + 1 of them. GIN indexes are read by bitmap scans
        -- only: allowed for this query (the SET clause above restores the setting on return).
        PERFORM set_config('enable_bitmapscan', 'on', true);
        ids := ARRAY(
            SELECT p.piece_id
              FROM pgmem.turn t
              JOIN pgmem.piece p ON p.scope_id = t.scope_id AND p.thread_id = t.thread_id AND p.turn_index = t.turn_index
             WHERE t.scope_id = _memory_candidates.scope AND t.metadata @> filt
               AND (_memory_candidates.thread IS NULL OR t.thread_id = _memory_candidates.thread)
               AND p.kind = 'memory' AND (none_gone OR p.piece_id NOT IN (SELECT unnest(gone)))
             LIMIT cap + 1);
        PERFORM set_config('enable_bitmapscan', 'off', true);
        IF cardinality(ids) <= cap THEN
            RETURN QUERY
            WITH m AS MATERIALIZED (
                SELECT c.piece_id, c.embedding FROM pgmem.piece c
                 WHERE c.scope_id = _memory_candidates.scope AND c.piece_id = ANY (ids))
            SELECT q.part_no::integer, h.piece_id, h.ip
              FROM unnest(unit_vectors) WITH ORDINALITY AS q(vec, part_no)
              CROSS JOIN LATERAL (
                    SELECT m.piece_id, (m.embedding <#> q.vec) + 0 AS ip FROM m ORDER BY 2, 1 LIMIT k) h;
            RETURN;
        END IF;
        -- Many match: the search width of the index path below, unless the caller gave one.
        -- A filter makes the graph's nearest region the wrong one for some queries (a query
        -- about zephyr filtered to atlas): measured on an 8,000-piece scope, 64 candidates kept
        -- 48% of the exact filtered hits for such queries, 200 kept 83%, 1,000 kept all
        -- (docs/scaling.md). Unfiltered searches keep their width.
        IF ef_search IS NULL THEN
            ef_search := coalesce(nullif(current_setting('pgmem.filter_ef_search', true), '')::integer, 1000);
        END IF;
    END IF;
    IF thread IS NULL AND NOT coalesce(exact, false) THEN
        ann := pgmem.scope_ann_index('piece', scope);
    END IF;
    IF ann IS NOT NULL THEN
        IF NOT none_gone THEN
            -- An IVFFlat scan that drops rows must read on to fill k (HNSW's strict_order, set above, does).
            PERFORM set_config('ivfflat.iterative_scan', 'relaxed_order', true);
        END IF;
        -- Search width: the argument, else the pgmem.ef_search setting, else the default.
        ef := greatest(coalesce(ef_search, nullif(current_setting('pgmem.ef_search', true), '')::integer,
                                pgmem.default_ef_search()), k);
        PERFORM set_config('hnsw.ef_search', least(ef, 1000)::text, true);  -- restored on return (SET above)
        PERFORM set_config('ivfflat.probes', coalesce(nullif(current_setting('pgmem.ivfflat_probes', true), ''), '10'), true);
        -- The write tail (060_indexes.sql): pieces after the index's last piece_id are not in the
        -- graph. Each part's top k from the index and from an exact scan of the tail (read once,
        -- through the primary key) are merged; an index built without a tail holds everything.
        through := pgmem.ann_index_through(ann);
        IF filt IS NULL AND through IS NULL THEN
            -- The scope as a literal, so the planner can prove the partial index applies.
            RETURN QUERY EXECUTE format(
                $q$SELECT q.part_no::integer, h.piece_id, h.ip
                     FROM unnest($1) WITH ORDINALITY AS q(vec, part_no)
                     CROSS JOIN LATERAL (
                           SELECT c.piece_id, c.embedding <#> q.vec AS ip
                             FROM pgmem.piece c
                            WHERE c.scope_id = %L AND c.scope_no = %s AND c.kind = 'memory'%s
                            ORDER BY c.embedding <#> q.vec
                            LIMIT $2) h$q$, scope, pgmem.scope_no(scope), skip)
            USING unit_vectors, k;
            RETURN;
        ELSIF filt IS NULL THEN
            RETURN QUERY EXECUTE format(
                $q$WITH tail AS MATERIALIZED (
                       SELECT c.piece_id, c.embedding FROM pgmem.piece c
                        WHERE c.scope_id = %1$L AND c.piece_id > %3$s AND c.kind = 'memory'%4$s)
                   SELECT m.part_no, m.piece_id, m.ip FROM (
                       SELECT q.part_no::integer AS part_no, h.piece_id, h.ip,
                              row_number() OVER (PARTITION BY q.part_no ORDER BY h.ip, h.piece_id) AS rn
                         FROM unnest($1) WITH ORDINALITY AS q(vec, part_no)
                        CROSS JOIN LATERAL (
                              (SELECT c.piece_id, c.embedding <#> q.vec AS ip
                                 FROM pgmem.piece c
                                WHERE c.scope_id = %1$L AND c.scope_no = %2$s AND c.kind = 'memory' AND c.piece_id <= %3$s%4$s
                                ORDER BY c.embedding <#> q.vec
                                LIMIT $2)
                              UNION ALL
                              (SELECT t.piece_id, (t.embedding <#> q.vec) + 0 FROM tail t ORDER BY 2, 1 LIMIT $2)) h) m
                    WHERE m.rn <= $2$q$, scope, pgmem.scope_no(scope), through, skip)
            USING unit_vectors, k;
            RETURN;
        END IF;
        PERFORM set_config('ivfflat.iterative_scan', 'relaxed_order', true);
        -- The filter is a scalar subquery on the turn's primary key, so it stays a filter on the
        -- index scan node, which the iterative scan feeds until LIMIT is met.
        -- With a tail, the tail's matching pieces are ranked exactly beside the index scan.
        EXECUTE format(
            $q$WITH tail AS MATERIALIZED (
                   SELECT c.piece_id, c.embedding FROM pgmem.piece c
                    WHERE c.scope_id = %1$L AND c.piece_id > %3$s AND c.kind = 'memory'%5$s
                      AND (SELECT t.metadata FROM pgmem.turn t
                            WHERE t.scope_id = c.scope_id AND t.thread_id = c.thread_id
                              AND t.turn_index = c.turn_index) @> $3)
               SELECT array_agg(m.part_no), array_agg(m.piece_id), array_agg(m.ip) FROM (
                   SELECT q.part_no::integer AS part_no, h.piece_id, h.ip,
                          row_number() OVER (PARTITION BY q.part_no ORDER BY h.ip, h.piece_id) AS rn
                     FROM unnest($1) WITH ORDINALITY AS q(vec, part_no)
                     CROSS JOIN LATERAL (
                           (SELECT c.piece_id, c.embedding <#> q.vec AS ip
                              FROM pgmem.piece c
                             WHERE c.scope_id = %1$L AND c.scope_no = %2$s AND c.kind = 'memory'%4$s%5$s
                               AND (SELECT t.metadata FROM pgmem.turn t
                                     WHERE t.scope_id = c.scope_id AND t.thread_id = c.thread_id
                                       AND t.turn_index = c.turn_index) @> $3
                             ORDER BY c.embedding <#> q.vec
                             LIMIT $2)
                           UNION ALL
                           (SELECT t.piece_id, (t.embedding <#> q.vec) + 0 FROM tail t ORDER BY 2, 1 LIMIT $2)) h) m
                WHERE m.rn <= $2$q$, scope, pgmem.scope_no(scope), coalesce(through, 9223372036854775807),
                CASE WHEN through IS NULL THEN '' ELSE format(' AND c.piece_id <= %s', through) END, skip)
        INTO r_part, r_piece, r_ip
        USING unit_vectors, k, filt;
        IF NOT EXISTS (SELECT 1 FROM generate_series(1, cardinality(unit_vectors)) AS g(i)
                        WHERE (SELECT count(*) FROM unnest(r_part) AS u(p) WHERE u.p = g.i) < k) THEN
            RETURN QUERY SELECT u.p, u.id, u.ip FROM unnest(r_part, r_piece, r_ip) AS u(p, id, ip);
            RETURN;
        END IF;
        RAISE DEBUG 'pgmem: the filtered index scan came back short; searching scope % exactly', scope;
    END IF;
    -- The scope and a thread are two statements: PL/pgSQL keeps a statement's generic plan after
    -- five calls, and one for "thread IS NULL OR thread_id = thread" reads the whole scope, so a
    -- connection that had searched scope-wide then paid the scope for every thread
    -- (tests/test_plan_cache.py; 358.95 ms for 8 parts in a 300-piece thread of a
    -- 100,000-piece scope, 2.14 apart: docs/bench/recall-ab-0027.txt).
    IF filt IS NULL AND thread IS NULL THEN
        RETURN QUERY
        SELECT q.part_no::integer, h.piece_id, h.ip
          FROM unnest(unit_vectors) WITH ORDINALITY AS q(vec, part_no)
          CROSS JOIN LATERAL (
                SELECT c.piece_id, (c.embedding <#> q.vec) + 0 AS ip
                  FROM pgmem.piece c
                 WHERE c.scope_id = _memory_candidates.scope AND c.kind = 'memory'
                   AND (none_gone OR c.piece_id NOT IN (SELECT unnest(gone)))
                 ORDER BY 2, 1
                 LIMIT k) h;
    ELSIF filt IS NULL THEN
        RETURN QUERY
        SELECT q.part_no::integer, h.piece_id, h.ip
          FROM unnest(unit_vectors) WITH ORDINALITY AS q(vec, part_no)
          CROSS JOIN LATERAL (
                SELECT c.piece_id, (c.embedding <#> q.vec) + 0 AS ip
                  FROM pgmem.piece c
                 WHERE c.scope_id = _memory_candidates.scope AND c.kind = 'memory'
                   AND c.thread_id = _memory_candidates.thread
                   AND (none_gone OR c.piece_id NOT IN (SELECT unnest(gone)))
                 ORDER BY 2, 1
                 LIMIT k) h;
    ELSE
        -- Many matching pieces and no index (or a thread filter, or exact, or a short index
        -- result): the matching pieces are read once, then each part ranks them.
        PERFORM set_config('enable_bitmapscan', 'on', true);
        RETURN QUERY
        WITH m AS MATERIALIZED (
            SELECT c.piece_id, c.embedding
              FROM pgmem.turn t
              JOIN pgmem.piece c ON c.scope_id = t.scope_id AND c.thread_id = t.thread_id AND c.turn_index = t.turn_index
             WHERE t.scope_id = _memory_candidates.scope AND t.metadata @> filt AND c.kind = 'memory'
               AND (_memory_candidates.thread IS NULL OR t.thread_id = _memory_candidates.thread)
               AND (none_gone OR c.piece_id NOT IN (SELECT unnest(gone))))
        SELECT q.part_no::integer, h.piece_id, h.ip
          FROM unnest(unit_vectors) WITH ORDINALITY AS q(vec, part_no)
          CROSS JOIN LATERAL (
                SELECT m.piece_id, (m.embedding <#> q.vec) + 0 AS ip FROM m ORDER BY 2, 1 LIMIT k) h;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._memory_candidates(text, vector[], integer, text, boolean, integer, jsonb) IS
'Top-k memory pieces per unit query vector by inner product (at most 64 vectors, k <= 1000, checked by check_recall_args): exact within the scope, or through the scope''s partial ANN index when it has one (no thread filter, exact = false), merged with an exact search of the scope''s write tail (the pieces written since the index was built, pgmem.ann_index_through). ef_search: argument, else the pgmem.ef_search setting, else pgmem.default_ef_search() (64). metadata_filter keeps pieces of turns whose metadata contains it: exact over the matching pieces when at most 5,000 match, else the index with pgvector''s iterative scan, searched again exactly if a part comes back short.';

-- The pieces of turns inside a time window, searched exactly: the time window's own ranking in
-- memory_recall (it boosts them), and the vector side under since / until (a hard filter). A
-- turn without a time is in no window.
CREATE OR REPLACE FUNCTION pgmem._window_candidates(
    scope text,
    unit_vectors vector[],
    k integer,
    thread text DEFAULT NULL,
    time_from timestamptz DEFAULT NULL,
    time_to timestamptz DEFAULT NULL,
    metadata_filter jsonb DEFAULT NULL
) RETURNS TABLE (part_no integer, piece_id bigint, ip double precision)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
-- Planned with each call's values: a generic plan of "thread IS NULL OR thread_id = thread" (or of
-- the time bounds) reads the whole scope (tests/test_plan_cache.py).
SET plan_cache_mode = force_custom_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    filt jsonb := nullif(metadata_filter, '{}'::jsonb);
    gone bigint[] := '{}';
BEGIN
    -- Callable on its own (900_grants.sql): the same caps as memory_recall.
    PERFORM pgmem.check_recall_args(scope, unit_vectors, NULL, k, 0, 'vector', 'piece.embedding',
                                    metadata_filter => metadata_filter, time_from => time_from, time_to => time_to);
    -- Left out (0100); planned with the call's value. A call, not a probe here: this function's
    -- statements are planned on every call, the call's once a connection.
    gone := pgmem.expired_item_pieces(scope);
    RETURN QUERY
    WITH m AS MATERIALIZED (
        SELECT c.piece_id, c.embedding
          FROM pgmem.turn t
          JOIN pgmem.piece c ON c.scope_id = t.scope_id AND c.thread_id = t.thread_id AND c.turn_index = t.turn_index
         WHERE t.scope_id = _window_candidates.scope AND c.kind = 'memory'
           AND (_window_candidates.thread IS NULL OR t.thread_id = _window_candidates.thread)
           AND (_window_candidates.time_from IS NULL OR t.turn_time >= _window_candidates.time_from)
           AND (_window_candidates.time_to IS NULL OR t.turn_time < _window_candidates.time_to)
           AND t.turn_time IS NOT NULL
           AND (filt IS NULL OR t.metadata @> filt)
           AND (cardinality(gone) = 0 OR c.piece_id <> ALL (gone)))
    SELECT q.part_no::integer, h.piece_id, h.ip
      FROM unnest(unit_vectors) WITH ORDINALITY AS q(vec, part_no)
      CROSS JOIN LATERAL (
            SELECT m.piece_id, (m.embedding <#> q.vec) + 0 AS ip FROM m ORDER BY 2, 1 LIMIT k) h;
END
$$;
COMMENT ON FUNCTION pgmem._window_candidates(text, vector[], integer, text, timestamptz, timestamptz, jsonb) IS
'Top-k memory pieces per unit query vector by inner product among the turns with turn_time >= time_from and < time_to (an end NULL: open; a turn without a time is never inside), exact, within the thread and metadata filter when given. memory_recall''s time window ranking and its since / until vector side.';

CREATE OR REPLACE FUNCTION pgmem.memory_recall(
    scope text,
    part_vectors vector[],
    part_texts text[] DEFAULT NULL,
    x integer DEFAULT 5,
    floor double precision DEFAULT NULL,
    thread text DEFAULT NULL,
    mode text DEFAULT 'auto',
    candidates integer DEFAULT 20,
    rrf_k integer DEFAULT 60,
    exact boolean DEFAULT false,
    ef_search integer DEFAULT NULL,
    model_id text DEFAULT NULL,
    metadata_filter jsonb DEFAULT NULL,
    time_from timestamptz DEFAULT NULL,
    time_to timestamptz DEFAULT NULL,
    recency double precision DEFAULT 0.05,
    since timestamptz DEFAULT NULL,
    until timestamptz DEFAULT NULL
) RETURNS SETOF pgmem.recall_hit
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
-- Its statements are planned once a connection: a mode, a window or bounds switch branches at
-- run time, and nothing here reads a range a parameter would narrow (the candidate functions
-- it calls set their own plan_cache_mode or keep a statement per shape). Planned with each
-- call's values, the hybrid statement was replanned on every call: planned once, hybrid recall
-- takes 0.65 to 0.98 of the time, with the same rows (docs/bench/recall-ab-0031.txt).
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    vecs vector[];
    filt jsonb := nullif(metadata_filter, '{}'::jsonb);
    -- Hybrid tuning (settings, like pgmem.ef_search): the largest share of the searched pieces
    -- a word may appear in and still be searched, and the word side's weight in the fusion.
    word_share double precision := coalesce(nullif(current_setting('pgmem.word_share', true), '')::double precision, 0.1);
    -- Unset: the model's (pgmem.model_settings), as is the floor when the caller gives none.
    word_weight double precision := nullif(current_setting('pgmem.word_weight', true), '')::double precision;
    model_floor double precision;
    model_weight double precision;
    -- Time-aware recall (settings too): the time window's weight in the fusion, and the floor's
    -- exception for a strong word hit (kept under the floor when its word rank is at most
    -- keep_rank and its cosine at most keep_margin under the floor; keep_rank 0: no exception).
    -- Tuning half, pooled oracle store: 2 kept top-1 and raised temporal MRR; 4 lost top-1.
    time_weight double precision := coalesce(nullif(current_setting('pgmem.time_weight', true), '')::double precision, 2.0);
    -- Measured (docs/evaluation.md, "Time-aware recall"): rank 1 within 0.05 of the floor keeps
    -- the demo's dogs turn; as many unrelated questions came back empty as without it on the
    -- tuning half, 3 of 115 fewer on the confirmation half.
    -- Unset: the model's (pgmem.model_settings: a margin follows the model's cosine scale).
    keep_rank integer := nullif(current_setting('pgmem.word_keep_rank', true), '')::integer;
    keep_margin double precision := nullif(current_setting('pgmem.word_keep_margin', true), '')::double precision;
    -- A part with a piece above the floor keeps the fused ranking's first floor_head pieces
    -- whatever their cosine (docs/evaluation.md, "The floor's exception for a related part": at
    -- 1, unrelated questions stay as empty as before by construction; no tuning question moved,
    -- one confirmation question won top-1 above the floor).
    floor_head integer := coalesce(nullif(current_setting('pgmem.floor_head', true), '')::integer, 1);
    -- With a time window, the fused ranking's first window_head pieces that the window found
    -- (inside it) are kept whatever their cosine: the message named the time they are from
    -- (docs/evaluation.md, "The floor's exception for a named time": at 1 no tuning question
    -- moved; on the confirmation half two temporal questions won top-1 above the floor and one
    -- unrelated question came back with a hit).
    window_head integer := coalesce(nullif(current_setting('pgmem.window_head', true), '')::integer, 1);
    -- Recency looks at the part's first recency_depth hits (measured: 2; at 10 it lost top-1).
    recency_depth integer := coalesce(nullif(current_setting('pgmem.recency_depth', true), '')::integer, 2);
    -- The window that boosts, within the hard since / until bounds; windowed: there is one.
    w_from timestamptz;
    w_to timestamptz;
    windowed boolean;
    bounded boolean := since IS NOT NULL OR until IS NOT NULL;
    n_rows bigint;
    why text;
    why_code text;
BEGIN
    SELECT m.floor, m.word_weight, coalesce(keep_rank, m.word_keep_rank), coalesce(keep_margin, m.word_keep_margin)
      INTO model_floor, model_weight, keep_rank, keep_margin
      FROM pgmem.scope_model_settings(memory_recall.scope, memory_recall.model_id) m;
    floor := coalesce(memory_recall.floor, model_floor);
    word_weight := coalesce(word_weight, model_weight);
    -- auto (the default): hybrid when the caller gives the parts' texts, the mode measured best on
    -- every development suite (docs/evaluation.md, section 2a); vector when it cannot search words.
    IF mode = 'auto' THEN
        mode := CASE WHEN part_texts IS NULL THEN 'vector' ELSE 'hybrid' END;
    END IF;
    IF NOT (word_weight >= 0 AND word_weight <= 100) THEN
        RAISE EXCEPTION 'pgmem.word_weight must be between 0 and 100, got %', word_weight USING ERRCODE = '22023';
    END IF;
    IF NOT (time_weight >= 0 AND time_weight <= 100) THEN
        RAISE EXCEPTION 'pgmem.time_weight must be between 0 and 100, got %', time_weight USING ERRCODE = '22023';
    END IF;
    IF NOT (keep_rank BETWEEN 0 AND 1000 AND keep_margin >= 0 AND keep_margin <= 2 AND recency_depth BETWEEN 1 AND 1000
            AND floor_head BETWEEN 0 AND 1000 AND window_head BETWEEN 0 AND 1000) THEN
        RAISE EXCEPTION 'pgmem.word_keep_rank must be 0..1000, pgmem.word_keep_margin 0..2, pgmem.recency_depth 1..1000, pgmem.floor_head and pgmem.window_head 0..1000, got %, %, %, % and %',
            keep_rank, keep_margin, recency_depth, floor_head, window_head USING ERRCODE = '22023';
    END IF;
    PERFORM pgmem.check_recall_args(scope, part_vectors, part_texts, x, floor, mode, 'piece.embedding',
                                    model_id => model_id, candidates => candidates, rrf_k => rrf_k,
                                    ef_search => ef_search, metadata_filter => metadata_filter,
                                    time_from => time_from, time_to => time_to, since => since, until => until,
                                    recency => recency);
    vecs := ARRAY(SELECT l2_normalize(v) FROM unnest(part_vectors) WITH ORDINALITY AS u(v, i) ORDER BY i);
    -- GREATEST and LEAST skip NULLs: the window cut to the hard bounds, none when that is empty.
    w_from := greatest(time_from, since);
    w_to := least(time_to, until);
    windowed := (time_from IS NOT NULL OR time_to IS NOT NULL) AND time_weight > 0
                AND (w_from IS NULL OR w_to IS NULL OR w_from < w_to);
    -- A time window says which time the caller means: the most recent no longer comes first.
    IF windowed THEN
        recency := 0;
    END IF;
    IF mode = 'vector' AND (windowed OR bounded) THEN
        -- Vector recall with a window or bounds is the fused ranking below without the word
        -- side (its own query, at a fifth of the cost, when only recency is asked for).
        part_texts := NULL;
        mode := 'fused';
    END IF;
    IF mode = 'vector' THEN
        -- Each part: its own top-x within the scope's memory pieces, then the floor.
        -- Document units share the plane and are excluded by kind = 'memory'.
        -- Recency as in the fused ranking below (band, its first recency_depth hits).
        RETURN QUERY
        WITH ranked AS MATERIALIZED (
            SELECT c.part_no, c.piece_id, c.ip,
                   row_number() OVER (PARTITION BY c.part_no ORDER BY c.ip, c.piece_id) AS rnk0
              FROM pgmem._memory_candidates(memory_recall.scope, vecs, x, memory_recall.thread, exact, ef_search, filt) c
             WHERE -c.ip >= floor
        ), top AS (
            -- Recency's candidates, each part's first recency_depth hits, with their turn's time,
            -- as in the fused ranking below.
            SELECT r.part_no, r.piece_id, r.ip, r.rnk0, tt.turn_time
              FROM ranked r
              -- Joined as tables, the planner hashed the scope's every turn (316 ms on a 100,000-piece scope).
              CROSS JOIN LATERAL (
                  SELECT th.turn_time FROM pgmem.piece p
                    JOIN pgmem.turn th ON th.scope_id = p.scope_id AND th.thread_id = p.thread_id
                                      AND th.turn_index = p.turn_index
                   WHERE p.scope_id = memory_recall.scope AND p.piece_id = r.piece_id
                  OFFSET 0) tt
             WHERE recency > 0 AND r.rnk0 <= recency_depth
        ), band AS (
            SELECT r.part_no, r.piece_id,
                   row_number() OVER (PARTITION BY r.part_no ORDER BY r.rnk0) AS pos,
                   row_number() OVER (PARTITION BY r.part_no ORDER BY r.turn_time DESC NULLS LAST, r.rnk0) AS newest, r.rnk0
              FROM top r JOIN top t1 ON t1.part_no = r.part_no AND t1.rnk0 = 1
             WHERE abs(t1.ip - r.ip) <= recency
        )
        SELECT r.part_no, coalesce(s.rnk0, r.rnk0)::integer, p.piece_id, p.thread_id, p.turn_index, p.label, p.body,
               -r.ip, (1 - r.ip) / 2, NULL::integer
          FROM ranked r
          JOIN pgmem.piece p ON p.scope_id = memory_recall.scope AND p.piece_id = r.piece_id
          LEFT JOIN band b ON b.part_no = r.part_no AND b.piece_id = r.piece_id
          LEFT JOIN band s ON s.part_no = b.part_no AND s.pos = b.newest
         ORDER BY 1, 2;
    ELSE
        -- Hybrid: the part's vector candidates and word candidates (its distinctive words,
        -- pgmem.word_candidates; a piece's word score is the sum of the weights of the words it
        -- contains), fused by reciprocal rank; every hit must still clear the cosine floor.
        RETURN QUERY
        WITH q AS (
            SELECT v.vec, v.part_no FROM unnest(vecs) WITH ORDINALITY AS v(vec, part_no)
        ), vec AS (
            -- Within since / until, the vector side searches only the pieces of turns in them.
            SELECT c.part_no, c.piece_id, 1 + c.ip AS dist,
                   row_number() OVER (PARTITION BY c.part_no ORDER BY c.ip, c.piece_id) AS vrank
              FROM (SELECT * FROM pgmem._memory_candidates(memory_recall.scope, vecs, greatest(candidates, x),
                                                           memory_recall.thread, exact, ef_search, filt)
                     WHERE NOT bounded
                    UNION ALL
                    SELECT * FROM pgmem._window_candidates(memory_recall.scope, vecs, greatest(candidates, x),
                                                           memory_recall.thread, since, until, filt)
                     WHERE bounded) c
        ), win AS (
            -- The time window's own ranking: each part's nearest pieces among the turns inside it.
            SELECT c.part_no, c.piece_id, 1 + c.ip AS dist,
                   row_number() OVER (PARTITION BY c.part_no ORDER BY c.ip, c.piece_id) AS trank
              FROM pgmem._window_candidates(memory_recall.scope, vecs, greatest(candidates, x),
                                            memory_recall.thread, w_from, w_to, filt) c
             WHERE windowed
        ), word AS (
            -- pgmem.word_candidates: each part's pieces by their summed word weights (ties: the
            -- older piece first). Sharing the rank instead, so the vector side orders the tied
            -- pieces, lost 1.7 points top-1 on the oracle and pooled sets (docs/evaluation.md, 2a).
            SELECT h.part_no, h.piece_id, 1 + (p.embedding <#> q.vec) AS dist, h.word_rank AS wrank
              FROM pgmem.word_candidates(memory_recall.scope, part_texts, greatest(candidates, x), memory_recall.thread,
                                         word_share, 'memory', filt) h
              JOIN q ON q.part_no = h.part_no
              JOIN pgmem.piece p ON p.scope_id = memory_recall.scope AND p.piece_id = h.piece_id
        ), fused AS (
            -- The word rank counts word_weight times a vector rank for a piece the vector side
            -- found too, and at most as much as a vector rank for a piece only the word side
            -- found: a word-only first hit no longer outranks the vector side's first. At
            -- weight 2 for both, the 30-question coverage store lost 7.2 points against weight
            -- 1; this way it gains 1.6 on weight 1, and the LongMemEval sets keep weight 2's
            -- gain (docs/evaluation.md, section 2a, "Word-only hits"). The time window's rank
            -- adds the same way, time_weight times (at most once for a piece only it found): a
            -- piece inside the window gains, no piece outside it is dropped.
            -- One grouping of the three rankings' rows (each holds a piece at most once a part),
            -- not a join of each ranking to their union: the same values, and a plan made once
            -- fits every size (joined, the once-made plan was 1.14 to 1.23 times slower for 8 parts).
            SELECT k.part_no, k.piece_id, coalesce(k.vdist, k.wdist, k.tdist) AS dist, k.wrank, k.trank,
                   coalesce(1.0 / (rrf_k + k.vrank), 0)
                   + (CASE WHEN k.vrank IS NULL THEN least(word_weight, 1.0) ELSE word_weight END)
                     * coalesce(1.0 / (rrf_k + k.wrank), 0)
                   + (CASE WHEN k.vrank IS NULL AND k.wrank IS NULL THEN least(time_weight, 1.0) ELSE time_weight END)
                     * coalesce(1.0 / (rrf_k + k.trank), 0) AS rrf
              FROM (SELECT u.part_no, u.piece_id,
                           min(u.dist) FILTER (WHERE u.src = 1) AS vdist, min(u.r) FILTER (WHERE u.src = 1) AS vrank,
                           min(u.dist) FILTER (WHERE u.src = 2) AS wdist, min(u.r) FILTER (WHERE u.src = 2) AS wrank,
                           min(u.dist) FILTER (WHERE u.src = 3) AS tdist, min(u.r) FILTER (WHERE u.src = 3) AS trank
                      FROM (SELECT v.part_no, v.piece_id, v.dist, v.vrank AS r, 1 AS src FROM vec v
                            UNION ALL
                            SELECT w.part_no, w.piece_id, w.dist, w.wrank, 2 FROM word w
                            UNION ALL
                            SELECT t.part_no, t.piece_id, t.dist, t.trank, 3 FROM win t) u
                     GROUP BY u.part_no, u.piece_id) k
        ), ranked AS MATERIALIZED (
            -- The floor, with three exceptions: a piece the word side ranks in its first keep_rank
            -- on the part's distinctive words whose cosine is at most keep_margin under it, and
            -- the fused ranking's first floor_head pieces of a part that has a piece above the
            -- floor (that part is related, so the floor no longer decides; a part with nothing
            -- above it comes back as empty as before); and, with a time window, the fused
            -- ranking's first window_head pieces that the window found. since / until hold for
            -- the word side's pieces too (a turn without a time is outside them).
            SELECT a.*, row_number() OVER (PARTITION BY a.part_no ORDER BY a.rrf DESC, a.dist, a.piece_id) AS rnk0
              FROM (SELECT f.*,
                           row_number() OVER (PARTITION BY f.part_no ORDER BY f.rrf DESC, f.dist, f.piece_id) AS frank,
                           max(1 - f.dist) OVER (PARTITION BY f.part_no) AS best
                      FROM fused f
                     -- Only within since / until: each fused piece's turn looked up by key (a few
                     -- hundred lookups; joined as tables, the planner hashed every piece and turn
                     -- of the scope). Without bounds no turn is read here: looking up every
                     -- fused piece's was most of what 0027 took off an 8-part recall on a
                     -- 2,000-piece scope (22.4 ms before, 16.98 after: docs/bench/recall-ab-0027.txt).
                     WHERE NOT bounded
                        OR EXISTS (SELECT 1 FROM pgmem.piece p
                                     JOIN pgmem.turn th ON th.scope_id = p.scope_id AND th.thread_id = p.thread_id
                                                       AND th.turn_index = p.turn_index
                                    WHERE p.scope_id = memory_recall.scope AND p.piece_id = f.piece_id
                                      AND (since IS NULL OR th.turn_time >= since) AND (until IS NULL OR th.turn_time < until))) a
             WHERE 1 - a.dist >= floor OR (a.wrank <= keep_rank AND 1 - a.dist >= floor - keep_margin)
                OR (a.frank <= floor_head AND a.best >= floor)
                OR (a.frank <= window_head AND a.trank IS NOT NULL)
        ), top AS (
            -- Recency's candidates, each part's first recency_depth hits, with their turn's time
            -- (looked up for these few pieces only).
            SELECT r.part_no, r.piece_id, r.dist, r.rnk0, tt.turn_time
              FROM ranked r
              -- Joined as tables, the planner hashed the scope's every turn (316 ms on a 100,000-piece scope).
              CROSS JOIN LATERAL (
                  SELECT th.turn_time FROM pgmem.piece p
                    JOIN pgmem.turn th ON th.scope_id = p.scope_id AND th.thread_id = p.thread_id
                                      AND th.turn_index = p.turn_index
                   WHERE p.scope_id = memory_recall.scope AND p.piece_id = r.piece_id
                  OFFSET 0) tt
             WHERE recency > 0 AND r.rnk0 <= recency_depth
        ), band AS (
            -- Recency: among a part's first recency_depth hits, those whose cosine is within recency of the
            -- first hit's answer the part alike; they keep the ranks they hold, the most recent
            -- turn taking the best of them (same time or none: the fused order).
            SELECT r.part_no, r.piece_id, r.rnk0,
                   row_number() OVER (PARTITION BY r.part_no ORDER BY r.rnk0) AS pos,
                   row_number() OVER (PARTITION BY r.part_no ORDER BY r.turn_time DESC NULLS LAST, r.rnk0) AS newest
              FROM top r JOIN top t1 ON t1.part_no = r.part_no AND t1.rnk0 = 1
             WHERE abs(t1.dist - r.dist) <= recency
        ), reranked AS (
            SELECT r.part_no, r.piece_id, r.dist, r.wrank, coalesce(s.rnk0, r.rnk0) AS rnk
              FROM ranked r
              LEFT JOIN band b ON b.part_no = r.part_no AND b.piece_id = r.piece_id
              LEFT JOIN band s ON s.part_no = b.part_no AND s.pos = b.newest
        )
        SELECT r.part_no::integer, r.rnk::integer, p.piece_id, p.thread_id, p.turn_index, p.label, p.body,
               1 - r.dist, (2 - r.dist) / 2, r.wrank::integer
          FROM reranked r JOIN pgmem.piece p ON p.scope_id = memory_recall.scope AND p.piece_id = r.piece_id
         WHERE r.rnk <= x
         ORDER BY 1, 2;
    END IF;
    -- An empty answer says why (a misspelt scope or thread is not "nothing above the floor").
    GET DIAGNOSTICS n_rows = ROW_COUNT;
    IF n_rows = 0 THEN
        SELECT e.reason, e.message INTO why_code, why
          FROM pgmem.empty_memory_recall_reason(memory_recall.scope, memory_recall.thread, filt, since, until) e;
        RAISE NOTICE 'memory_recall: %', why USING DETAIL = 'empty_recall_reason: ' || why_code;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.memory_recall(text, vector[], text[], integer, double precision, text, text, integer, integer, boolean, integer, text, jsonb,
                                         timestamptz, timestamptz, double precision, timestamptz, timestamptz) IS
'Per-part memory recall. One row per hit: part number (1-based), rank in the part, piece, raw cosine and (1+cosine)/2 score. Each part keeps up to x hits with cosine >= floor (default: the floor of the scope''s model, pgmem.model_settings: 0.2 for MiniLM, 0.82 for e5-small); groups are never merged, padded or deduplicated across parts. Reads memory pieces only (document units excluded by kind). mode: auto (the default: hybrid when part_texts are given, else vector), vector, or hybrid (vector + word search on the part''s distinctive words, pgmem.word_candidates, a piece scored by the summed weights of the words it contains, fused by reciprocal rank; settings pgmem.word_share (default 0.1: a word in more than that share of the searched pieces is not searched) and pgmem.word_weight (unset: the model''s word_weight from pgmem.model_settings, 2 for MiniLM: the word rank''s weight in the fusion, 0..100, for a piece the vector side found too; a piece only the word side found counts its word rank at most once)). Exact within the scope unless the scope has a partial ANN index (pgmem.index_large_scopes; recall >= 0.99 measured, docs/scaling.md); exact = true forces the exact scan; ef_search overrides the pgmem.ef_search setting (default pgmem.default_ef_search(), 64). model_id, when given, must be the model of the scope''s stored pieces (22000 naming both otherwise). metadata_filter (a JSON object) keeps only pieces of turns whose metadata contains it (turn.metadata @> metadata_filter), in the exact and the index path alike, without short groups (docs/scaling.md). Time: time_from / time_to (turn_time >= time_from and < time_to, an end NULL when open) is a window that boosts: each part''s nearest pieces among the turns inside it (pgmem._window_candidates) are a third ranking in the fusion, weighted by the setting pgmem.time_weight (default 2; at most once for a piece only the window found), so pieces inside rank higher and none outside is dropped; since / until are the same bounds as a filter (only turns inside them; a turn without a time is in none); recency (a cosine band in [0, 1], default 0.05, 0: off; no effect with a time window) reorders the part''s first pgmem.recency_depth (2) hits whose cosines are within recency of the first hit''s: they keep the ranks they hold, the most recent turn taking the best. The floor keeps a piece under it that the word side ranks in its first pgmem.word_keep_rank when its cosine is at most pgmem.word_keep_margin under the floor (unset: the model''s word_keep_rank and word_keep_margin, pgmem.model_settings: 1 and 0.05 for MiniLM; rank 0: none), in a part with a piece above the floor, the fused ranking''s first pgmem.floor_head pieces (default 1; 0: none), and, with a time window, the fused ranking''s first pgmem.window_head pieces (default 1; 0: none) that the window found. scope must be the transaction''s pgmem.scope (42501 otherwise). Every argument is checked by pgmem.check_recall_args.';

CREATE OR REPLACE FUNCTION pgmem._fact_candidates(
    scope text,
    unit_vectors vector[],
    k integer,
    thread text DEFAULT NULL,
    exact boolean DEFAULT false,
    ef_search integer DEFAULT NULL
) RETURNS TABLE (part_no integer, fact_id bigint, ip double precision)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
SET jit = off
SET enable_seqscan = off
SET enable_bitmapscan = off
SET hnsw.ef_search = 64
SET hnsw.iterative_scan = strict_order
SET ivfflat.probes = 10
AS $$
#variable_conflict use_column
DECLARE
    ann regclass;
    ef integer;
BEGIN
    -- Callable on its own (900_grants.sql): the same caps as fact_recall.
    PERFORM pgmem.check_recall_args(scope, unit_vectors, NULL, k, 0, 'vector', 'fact.embedding', ef_search => ef_search);
    IF thread IS NULL AND NOT coalesce(exact, false) THEN
        ann := pgmem.scope_ann_index('fact', scope);
    END IF;
    -- The scope and a thread are two statements, as in _memory_candidates (a plan kept for the
    -- connection would read the whole scope for a thread).
    IF ann IS NULL AND thread IS NULL THEN
        RETURN QUERY
        SELECT q.part_no::integer, h.fact_id, h.ip
          FROM unnest(unit_vectors::halfvec[]) WITH ORDINALITY AS q(vec, part_no)
          CROSS JOIN LATERAL (
                SELECT f.fact_id, (f.embedding <#> q.vec) + 0 AS ip
                  FROM pgmem.fact f
                 WHERE f.scope_id = _fact_candidates.scope
                 ORDER BY 2, 1
                 LIMIT k) h;
    ELSIF ann IS NULL THEN
        RETURN QUERY
        SELECT q.part_no::integer, h.fact_id, h.ip
          FROM unnest(unit_vectors::halfvec[]) WITH ORDINALITY AS q(vec, part_no)
          CROSS JOIN LATERAL (
                SELECT f.fact_id, (f.embedding <#> q.vec) + 0 AS ip
                  FROM pgmem.fact f
                 WHERE f.scope_id = _fact_candidates.scope AND f.thread_id = _fact_candidates.thread
                 ORDER BY 2, 1
                 LIMIT k) h;
    ELSE
        -- Search width: the argument, else the pgmem.ef_search setting, else the default.
        ef := greatest(coalesce(ef_search, nullif(current_setting('pgmem.ef_search', true), '')::integer,
                                pgmem.default_ef_search()), k);
        PERFORM set_config('hnsw.ef_search', least(ef, 1000)::text, true);
        PERFORM set_config('ivfflat.probes', coalesce(nullif(current_setting('pgmem.ivfflat_probes', true), ''), '10'), true);
        RETURN QUERY EXECUTE format(
            $q$SELECT q.part_no::integer, h.fact_id, h.ip
                 FROM unnest($1::halfvec[]) WITH ORDINALITY AS q(vec, part_no)
                 CROSS JOIN LATERAL (
                       SELECT f.fact_id, f.embedding <#> q.vec AS ip
                         FROM pgmem.fact f
                        WHERE f.scope_id = %L AND f.scope_no = %s
                        ORDER BY f.embedding <#> q.vec
                        LIMIT $2) h$q$, scope, pgmem.scope_no(scope))
        USING unit_vectors, k;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._fact_candidates(text, vector[], integer, text, boolean, integer) IS
'Top-k facts per unit query vector by inner product (the plane is halfvec: queries are cast to it): exact within the scope, or through the scope''s partial ANN index.';

CREATE OR REPLACE FUNCTION pgmem.fact_recall(
    scope text,
    part_vectors vector[],
    x integer DEFAULT 5,
    floor double precision DEFAULT 0.35,
    thread text DEFAULT NULL,
    exact boolean DEFAULT false,
    ef_search integer DEFAULT NULL,
    model_id text DEFAULT NULL
) RETURNS SETOF pgmem.fact_hit
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    vecs vector[];
    n_rows bigint;
    why text;
    why_code text;
BEGIN
    PERFORM pgmem.check_recall_args(scope, part_vectors, NULL, x, floor, 'vector', 'fact.embedding',
                                    model_id => model_id, ef_search => ef_search);
    vecs := ARRAY(SELECT l2_normalize(v) FROM unnest(part_vectors) WITH ORDINALITY AS u(v, i) ORDER BY i);
    RETURN QUERY
    SELECT c.part_no, (row_number() OVER (PARTITION BY c.part_no ORDER BY c.ip, c.fact_id))::integer,
           f.fact_id, f.thread_id, f.turn_index, f.section, f.body, -c.ip, (1 - c.ip) / 2
      FROM pgmem._fact_candidates(fact_recall.scope, vecs, x, fact_recall.thread, exact, ef_search) c
      JOIN pgmem.fact f ON f.scope_id = fact_recall.scope AND f.fact_id = c.fact_id
     WHERE -c.ip >= floor
     ORDER BY 1, 2;
    GET DIAGNOSTICS n_rows = ROW_COUNT;
    IF n_rows = 0 THEN
        SELECT e.reason, e.message INTO why_code, why
          FROM pgmem.empty_recall_reason(fact_recall.scope, fact_recall.thread, NULL, 'fact') e;
        RAISE NOTICE 'fact_recall: %', why USING DETAIL = 'empty_recall_reason: ' || why_code;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.fact_recall(text, vector[], integer, double precision, text, boolean, integer, text) IS
'Per-part fact recall: like memory_recall over the fact plane (seed: x = 5, cosine >= 0.35); exact within the scope unless the scope has a partial ANN index on the fact plane. model_id, when given, must be the model of the scope''s stored facts.';

-- Before since / until (0049): explain_logged_recall explained a bounded recall over every turn.
DROP FUNCTION IF EXISTS pgmem.explain_recall(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, text, integer, text, jsonb);

CREATE OR REPLACE FUNCTION pgmem.explain_recall(
    scope text,
    part_vectors vector[],
    part_texts text[] DEFAULT NULL,
    x integer DEFAULT 5,
    floor double precision DEFAULT NULL,
    thread text DEFAULT NULL,
    show integer DEFAULT 10,
    model_id text DEFAULT NULL,
    metadata_filter jsonb DEFAULT NULL,
    since timestamptz DEFAULT NULL,
    until timestamptz DEFAULT NULL
) RETURNS TABLE (part_no integer, part_text text, candidate integer, piece_id bigint, label text,
                 cosine double precision, score double precision, cosine_floor double precision, verdict text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    vecs vector[];
    ann regclass;
    found_ids bigint[] := '{}';
    filt jsonb := nullif(metadata_filter, '{}'::jsonb);
    -- The pieces of expired store items, left out as memory_recall leaves them out (0105).
    gone bigint[];
    n_rows bigint;
    why text;
    why_code text;
BEGIN
    IF explain_recall.floor IS NULL THEN
        SELECT m.floor INTO explain_recall.floor FROM pgmem.scope_model_settings(explain_recall.scope, explain_recall.model_id) m;
    END IF;
    PERFORM pgmem.check_recall_args(scope, part_vectors, part_texts, x, explain_recall.floor, 'vector', 'piece.embedding',
                                    model_id => model_id, show => show, metadata_filter => metadata_filter,
                                    since => since, until => until);
    vecs := ARRAY(SELECT l2_normalize(v) FROM unnest(part_vectors) WITH ORDINALITY AS u(v, i) ORDER BY i);
    gone := pgmem.expired_item_pieces(scope);
    -- A bounded recall searches exactly (memory_recall: pgmem._window_candidates), as a thread does.
    IF thread IS NULL AND since IS NULL AND until IS NULL THEN
        ann := pgmem.scope_ann_index('piece', scope);
    END IF;
    IF ann IS NOT NULL THEN
        -- What the index path really returned, as part_no * 2^40 + piece_id keys.
        found_ids := ARRAY(SELECT c.part_no::bigint * 1099511627776 + c.piece_id
                             FROM pgmem._memory_candidates(explain_recall.scope, vecs, x, metadata_filter => filt) c);
    END IF;
    -- The exact candidates of each part (what memory_recall would return with exact => true).
    RETURN QUERY
    SELECT q.part_no::integer, part_texts[q.part_no], c.n::integer, c.piece_id, c.label,
           -c.ip, (1 - c.ip) / 2, explain_recall.floor,
           CASE WHEN -c.ip < explain_recall.floor THEN 'cut: below floor'
                WHEN c.n > x THEN 'cut: beyond x'
                WHEN ann IS NOT NULL AND NOT (q.part_no * 1099511627776 + c.piece_id = ANY (found_ids))
                    THEN 'cut: missed by the approximate index ' || ann::text
                ELSE 'kept' END
      FROM unnest(vecs) WITH ORDINALITY AS q(vec, part_no)
      CROSS JOIN LATERAL (
            SELECT p.piece_id, p.label, (p.embedding <#> q.vec) + 0 AS ip,
                   row_number() OVER (ORDER BY (p.embedding <#> q.vec) + 0, p.piece_id) AS n
              FROM pgmem.piece p
             WHERE p.scope_id = explain_recall.scope AND p.kind = 'memory'
               AND (explain_recall.thread IS NULL OR p.thread_id = explain_recall.thread)
               AND (cardinality(gone) = 0 OR p.piece_id NOT IN (SELECT unnest(gone)))
               AND (filt IS NULL
                    OR (SELECT t.metadata FROM pgmem.turn t
                         WHERE t.scope_id = p.scope_id AND t.thread_id = p.thread_id AND t.turn_index = p.turn_index) @> filt)
               -- A turn without a time is outside any bound, as in memory_recall.
               AND (since IS NULL AND until IS NULL
                    OR EXISTS (SELECT 1 FROM pgmem.turn t
                                WHERE t.scope_id = p.scope_id AND t.thread_id = p.thread_id AND t.turn_index = p.turn_index
                                  AND (since IS NULL OR t.turn_time >= since) AND (until IS NULL OR t.turn_time < until)))
             ORDER BY 3, 1
             LIMIT greatest(show, x)) c
     ORDER BY 1, 3;
    -- No candidate at all (a cut one is a row): nothing was searched, and the NOTICE says why, as
    -- memory_recall's does (until 0111, no rows and no word: a misspelt thread looked like this).
    GET DIAGNOSTICS n_rows = ROW_COUNT;
    IF n_rows = 0 THEN
        SELECT e.reason, e.message INTO why_code, why
          FROM pgmem.empty_memory_recall_reason(explain_recall.scope, explain_recall.thread, filt, since, until) e;
        RAISE NOTICE 'explain_recall: %', why USING DETAIL = 'empty_recall_reason: ' || why_code;
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.explain_recall(text, vector[], text[], integer, double precision, text, integer, text, jsonb,
                                          timestamptz, timestamptz) IS
'For debugging in psql: each part''s nearest candidates (exact search in the scope, the pieces of expired store items left out as memory_recall leaves them (0105), among turns whose metadata contains metadata_filter when one is given and whose turn_time is within since / until when they are: turn_time >= since and < until, a turn without a time in none) with cosine, the floor (default: the model''s, pgmem.model_settings), and whether each was kept or cut (below floor, beyond x, or missed by the scope''s approximate index). No candidate at all raises a NOTICE saying why (pgmem.empty_memory_recall_reason, as memory_recall, since 0111).';

-- A recall is logged in its own statement after it ran, so what it returned may have been
-- forgotten in between. log_recall locks what its hits name (documents, then threads: the lock
-- order of docs/architecture.md) and drops, at any depth of the results, the hit objects whose
-- turn or document is gone: a forget that committed first is not undone by the log, and one
-- that starts later waits for the log row and deletes it.
CREATE OR REPLACE FUNCTION pgmem._drop_gone_hits(scope text, plane text, v jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
BEGIN
    IF jsonb_typeof(v) = 'array' THEN
        RETURN coalesce((SELECT jsonb_agg(pgmem._drop_gone_hits(scope, plane, a.e) ORDER BY a.n)
                           FROM jsonb_array_elements(v) WITH ORDINALITY AS a(e, n)
                          WHERE NOT (jsonb_typeof(a.e) = 'object' AND (
                                (plane = 'memory' AND a.e ? 'thread_id' AND jsonb_typeof(a.e -> 'turn_index') = 'number'
                                 AND NOT EXISTS (SELECT 1 FROM pgmem.turn t
                                                  WHERE t.scope_id = _drop_gone_hits.scope
                                                    AND t.thread_id = a.e ->> 'thread_id'
                                                    AND t.turn_index = (a.e ->> 'turn_index')::numeric))
                                OR (plane = 'document' AND a.e ? 'document_id'
                                    AND NOT EXISTS (SELECT 1 FROM pgmem.document d
                                                     WHERE d.scope_id = _drop_gone_hits.scope
                                                       AND d.document_id = a.e ->> 'document_id'))
                                -- 0040: a forgotten fact's hit (its body) was kept.
                                -- 0114: or its piece_id, as Python's fact_recall names a fact.
                                OR (plane = 'fact'
                                    AND jsonb_typeof(coalesce(a.e -> 'fact_id', a.e -> 'piece_id')) IS NOT DISTINCT FROM 'number'
                                    AND NOT EXISTS (SELECT 1 FROM pgmem.fact f
                                                     WHERE f.scope_id = _drop_gone_hits.scope
                                                       AND f.fact_id = (coalesce(a.e -> 'fact_id', a.e -> 'piece_id') #>> '{}')::numeric))))),
                        '[]'::jsonb);
    ELSIF jsonb_typeof(v) = 'object' THEN
        RETURN coalesce((SELECT jsonb_object_agg(o.k, pgmem._drop_gone_hits(scope, plane, o.e)) FROM jsonb_each(v) AS o(k, e)),
                        '{}'::jsonb);
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION pgmem._drop_gone_hits(text, text, jsonb) IS
'Internal to log_recall: the results with every hit object (at any depth of an array) removed whose turn (memory plane), document (document plane) or fact (fact plane: its fact_id, or its piece_id when it has none, as Python''s fact_recall names a fact, 0114) is no longer stored in the scope.';

-- The session settings that change what a memory recall returns (read by memory_recall and the
-- functions it calls): log_recall records those the caller's session set (0057), and the replays
-- of a logged recall run under them. Not pgmem.word_fold, which reads the same rows either way.
CREATE OR REPLACE FUNCTION pgmem._recall_setting_names()
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT ARRAY['pgmem.word_share', 'pgmem.word_weight', 'pgmem.time_weight', 'pgmem.word_keep_rank',
                 'pgmem.word_keep_margin', 'pgmem.floor_head', 'pgmem.window_head', 'pgmem.recency_depth',
                 'pgmem.word_postings_cap', 'pgmem.ef_search', 'pgmem.filter_ef_search', 'pgmem.ivfflat_probes']
$$;
COMMENT ON FUNCTION pgmem._recall_setting_names() IS
'The session settings that change what a memory recall returns: those log_recall records (pgmem._recall_settings) and a replay of a logged recall runs under (pgmem._apply_recall_settings).';

CREATE OR REPLACE FUNCTION pgmem._recall_settings()
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    SELECT coalesce(jsonb_object_agg(n, current_setting(n, true)) FILTER (WHERE current_setting(n, true) <> ''), '{}')
      FROM unnest(pgmem._recall_setting_names()) AS n
$$;
COMMENT ON FUNCTION pgmem._recall_settings() IS
'The recall settings (pgmem._recall_setting_names) this session has set, name to value: what log_recall records with a recall.';

-- STABLE: it writes nothing in the database, only the transaction's settings, and the replays
-- that call it are STABLE (the read-only role runs them).
CREATE OR REPLACE FUNCTION pgmem._apply_recall_settings(settings jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    before jsonb := '{}';
    n text;
BEGIN
    -- For the rest of the transaction (set_config's is_local), each recall setting is the one of
    -- settings, or unset (its default) when settings has none; a subtransaction rolled back, or
    -- the transaction's end, restores the session's, and so does applying what this returns.
    FOREACH n IN ARRAY pgmem._recall_setting_names() LOOP
        before := before || jsonb_build_object(n, coalesce(current_setting(n, true), ''));
        PERFORM set_config(n, coalesce(settings ->> n, ''), true);
    END LOOP;
    RETURN before;
END
$$;
COMMENT ON FUNCTION pgmem._apply_recall_settings(jsonb) IS
'Internal to replay_logged_recall and explain_logged_recall: set each recall setting (pgmem._recall_setting_names) to its value in settings, or unset it when settings has none, local to the transaction; returns the values it replaced, to be applied back.';

-- Before the time arguments.
DROP FUNCTION IF EXISTS pgmem.log_recall(text, text, text, text[], @VECTOR_SCHEMA@.vector[], integer, double precision, text, text, jsonb, jsonb);

CREATE OR REPLACE FUNCTION pgmem.log_recall(scope text, plane text, message text, part_texts text[], part_vectors vector[],
                                            x integer, floor double precision, thread text, mode text, results jsonb,
                                            metadata_filter jsonb DEFAULT NULL,
                                            time_from timestamptz DEFAULT NULL, time_to timestamptz DEFAULT NULL,
                                            recency double precision DEFAULT NULL,
                                            since timestamptz DEFAULT NULL, until timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id bigint;
BEGIN
    IF plane IS NULL OR plane NOT IN ('memory', 'fact', 'document') THEN
        RAISE EXCEPTION 'plane must be memory, fact or document, got %', coalesce(plane, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF part_texts IS NULL THEN
        RAISE EXCEPTION 'part_texts must not be NULL: a logged recall is explained part by part' USING ERRCODE = '22004';
    END IF;
    IF results IS NULL THEN
        RAISE EXCEPTION 'results must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- What a recall returns: its groups (an array; pgmem.recall logs one), or an object.
    IF jsonb_typeof(results) NOT IN ('array', 'object') THEN
        RAISE EXCEPTION 'results must be a JSON array (the recall''s groups) or object, got a JSON %', jsonb_typeof(results)
            USING ERRCODE = '22023';
    END IF;
    -- A log row of bounded size (0048; before, any size was stored): the message and its parts
    -- as the MCP server bounds a query (100,000 bytes), the thread as a thread id is bounded, the
    -- results at 16,000,000 bytes, above what a recall returns (8 parts of 1,000 hits of
    -- 1,200-byte pieces: about 12 MB as JSON).
    IF octet_length(message) > 100000 THEN
        RAISE EXCEPTION 'message is % bytes; at most 100,000', octet_length(message) USING ERRCODE = '22023',
            HINT = 'Log a recall of a shorter message, or recall it without logging.';
    END IF;
    IF (SELECT sum(octet_length(t)) FROM unnest(part_texts) AS t) > 100000 THEN
        RAISE EXCEPTION 'part_texts are % bytes together; at most 100,000',
            (SELECT sum(octet_length(t)) FROM unnest(part_texts) AS t) USING ERRCODE = '22023',
            HINT = 'Log a recall of a shorter message, or recall it without logging.';
    END IF;
    IF length(thread) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'thread must be 1 to 200 characters, got %', length(thread) USING ERRCODE = '22023';
    END IF;
    IF octet_length(results::text) > 16000000 THEN
        RAISE EXCEPTION 'results is % bytes as JSON text; at most 16,000,000', octet_length(results::text)
            USING ERRCODE = '22023', HINT = 'Log a recall with fewer hits (a smaller x).';
    END IF;
    -- Nested as put_item bounds a value (0103): results are read recursively
    -- (pgmem._drop_gone_hits), and an array nested 1,000 deep failed with 54001, "stack depth
    -- limit exceeded", whose hint says to raise max_stack_depth. A recall's results nest 4 deep.
    IF jsonb_path_exists(results, 'strict $.**{64 to last}') THEN
        RAISE EXCEPTION 'results nests deeper than 64 levels' USING ERRCODE = '22023',
            HINT = 'Log what the recall returned: its groups, their hits.';
    END IF;
    -- A write, bound to the transaction's scope like every write (and usable from a superuser's
    -- psql session with no scope set, as put_turn is): row-level security then admits the row.
    PERFORM set_config('pgmem.scope', pgmem._write_scope(log_recall.scope), true);
    PERFORM pgmem._check_scope_name(log_recall.scope, 'log_recall');  -- it may create the scope's row (0091)
    -- No floor given: the one the recall used (the model's), so the log replays it.
    IF log_recall.floor IS NULL AND plane <> 'fact' THEN
        SELECT m.floor INTO log_recall.floor FROM pgmem.scope_model_settings(log_recall.scope) m;
    END IF;
    -- What is logged must be replayable: the same checks as the recall it records.
    PERFORM pgmem.check_recall_args(scope, part_vectors, part_texts, x, log_recall.floor, mode,
                                    CASE WHEN plane = 'fact' THEN 'fact.embedding' ELSE 'piece.embedding' END,
                                    metadata_filter => metadata_filter, time_from => time_from, time_to => time_to,
                                    since => since, until => until, recency => coalesce(recency, 0));
    -- The scope row first (0040), held FOR KEY SHARE, as every writer takes it (pgmem._lock_scope,
    -- which waits for a writer inserting it and for a forget_scope in flight). A scope with no row
    -- holds nothing a recall could return: nothing is logged (NULL, 0113). Until 0113 the row was
    -- inserted, so `pgmem recall --log` of a misspelt scope left that scope behind, and a log
    -- written while its scope was forgotten made the scope again, holding the message.
    IF NOT pgmem._lock_scope(log_recall.scope) THEN
        RETURN NULL;
    END IF;
    -- Then what the results name, documents then threads (sorted: one order for every writer),
    -- then drop hits forgotten since the recall ran (pgmem._drop_gone_hits).
    PERFORM 1 FROM pgmem.document d
     WHERE d.scope_id = log_recall.scope
       AND d.document_id IN (SELECT o.v ->> 'document_id' FROM jsonb_path_query(results, 'strict $.**') AS o(v)
                              WHERE jsonb_typeof(o.v) = 'object' AND o.v ? 'document_id')
     ORDER BY d.document_id FOR KEY SHARE;
    PERFORM 1 FROM pgmem.thread th
     WHERE th.scope_id = log_recall.scope
       AND (th.thread_id = log_recall.thread
            OR th.thread_id IN (SELECT o.v ->> 'thread_id' FROM jsonb_path_query(results, 'strict $.**') AS o(v)
                                 WHERE jsonb_typeof(o.v) = 'object' AND o.v ? 'thread_id'))
     ORDER BY th.thread_id FOR KEY SHARE;
    -- The facts a fact-plane log names, after their threads (the lock order): a forget_fact in
    -- flight is waited for, and its fact's hit dropped below.
    PERFORM 1 FROM pgmem.fact f
     WHERE plane = 'fact' AND f.scope_id = log_recall.scope
       AND f.fact_id IN (SELECT (coalesce(o.v -> 'fact_id', o.v -> 'piece_id') #>> '{}')::numeric
                           FROM jsonb_path_query(results, 'strict $.**') AS o(v)
                          WHERE jsonb_typeof(o.v) = 'object'
                            AND jsonb_typeof(coalesce(o.v -> 'fact_id', o.v -> 'piece_id')) = 'number')
     ORDER BY f.fact_id FOR KEY SHARE;
    results := pgmem._drop_gone_hits(log_recall.scope, plane, results);
    -- With the recall settings this session set (0057): a replay runs under them. And (0116)
    -- the model of the query vectors under the key 'model', which is no setting's name (they
    -- are all pgmem.*, so _apply_recall_settings never reads it): the scope's model of the
    -- plane, which the recall was checked against when given its model_id (the Python API
    -- does). log_recall has no model argument, so that is the scope's model now: a flip that
    -- committed between the recall and its log is not seen. A replay after a model change
    -- (pgmem reembed) is refused by it, not run with the old model's vectors against the new
    -- one's pieces. A scope with no model yet logs none.
    INSERT INTO pgmem.recall_log AS l (scope_id, plane, message, part_texts, part_vectors, x, floor, thread_id, mode, results,
                                       metadata_filter, time_from, time_to, recency, since, until, settings)
    VALUES (log_recall.scope, log_recall.plane, log_recall.message, log_recall.part_texts, log_recall.part_vectors,
            log_recall.x, log_recall.floor, log_recall.thread, log_recall.mode, log_recall.results,
            nullif(log_recall.metadata_filter, '{}'::jsonb), log_recall.time_from, log_recall.time_to, log_recall.recency,
            log_recall.since, log_recall.until,
            pgmem._recall_settings()
            || coalesce((SELECT jsonb_build_object('model', jsonb_build_object('model_id', m.model_id, 'dims', m.dims))
                           FROM pgmem.scope s
                           JOIN pgmem.embedding_model m
                             ON m.model_key = CASE WHEN log_recall.plane = 'fact' THEN s.fact_model_key ELSE s.piece_model_key END
                          WHERE s.scope_id = log_recall.scope), '{}'))
    RETURNING l.recall_id INTO id;
    RETURN id;
END
$$;
COMMENT ON FUNCTION pgmem.log_recall(text, text, text, text[], vector[], integer, double precision, text, text, jsonb, jsonb,
                                      timestamptz, timestamptz, double precision, timestamptz, timestamptz) IS
'Record a recall request (its metadata filter and time arguments included) and its results, so it can be explained or replayed from psql. Arguments are checked as the recall functions check them (pgmem.check_recall_args); results must be a JSON array or object of at most 16,000,000 bytes as JSON text nested at most 64 levels (since 0103), message at most 100,000 bytes and part_texts at most 100,000 bytes together, thread 1 to 200 characters (22023 naming the argument). Returns the log row''s recall_id, or NULL when the scope has no row (never written, or forgotten meanwhile): nothing is logged and no scope is made (0113). The row''s settings hold the recall settings the session set and (0116), under the key model, the scope''s model of the plane ({model_id, dims}; none while the scope has no model), which the replays check.';

-- A logged recall's query vectors are of the model its log names (settings -> 'model', since
-- 0116): a model change since (pgmem reembed's flip, or a write with reembed => true, rebinds the
-- scope) refuses its replay in one line, instead of ranking the new model's pieces with the old
-- model's vectors. A row logged before 0116 names no model, and runs as before.
CREATE OR REPLACE FUNCTION pgmem._check_logged_model(scope text, recall_id bigint, settings jsonb, verb text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    now_model record;
BEGIN
    IF jsonb_typeof(settings -> 'model') IS DISTINCT FROM 'object' THEN
        RETURN;
    END IF;
    SELECT m.model_id, m.dims INTO now_model
      FROM pgmem.scope s JOIN pgmem.embedding_model m ON m.model_key = s.piece_model_key
     WHERE s.scope_id = _check_logged_model.scope;
    IF now_model.model_id IS NOT NULL
       AND (now_model.model_id, now_model.dims::text)
           IS DISTINCT FROM (settings -> 'model' ->> 'model_id', settings -> 'model' ->> 'dims') THEN
        RAISE EXCEPTION 'recall % was logged under model % (% dimensions); scope % now uses model % (% dimensions): its logged query vectors cannot search the new model''s pieces',
            recall_id, settings -> 'model' ->> 'model_id', settings -> 'model' ->> 'dims', scope,
            now_model.model_id, now_model.dims
            USING ERRCODE = '22000',
                  HINT = format('The scope''s embedding model changed since the recall was logged (pgmem reembed). Record it again under the scope''s model (its message, with log=True or pgmem recall --log) and %s that recall_id.', verb);
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem._check_logged_model(text, bigint, jsonb, text) IS
'Internal to explain_logged_recall and replay_logged_recall (0116): raise 22000 naming both models when a logged recall''s model (settings -> model, {model_id, dims}) is not the scope''s piece model now; a row without one (logged before 0116) passes. verb names the call in the hint.';

CREATE OR REPLACE FUNCTION pgmem.explain_logged_recall(scope text, recall_id bigint, show integer DEFAULT 10)
RETURNS TABLE (part_no integer, part_text text, candidate integer, piece_id bigint, label text,
               cosine double precision, score double precision, cosine_floor double precision, verdict text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    l record;
    session_settings jsonb;
BEGIN
    IF scope IS NULL OR recall_id IS NULL THEN
        RAISE EXCEPTION 'scope and recall_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM pgmem.check_scope(scope);
    IF recall_id < 1 THEN
        RAISE EXCEPTION 'recall_id must be a positive id from the recall log, got %', recall_id USING ERRCODE = '22023';
    END IF;
    SELECT * INTO l FROM pgmem.recall_log r
     WHERE r.scope_id = explain_logged_recall.scope AND r.recall_id = explain_logged_recall.recall_id;
    -- As replay_logged_recall: no rows must mean "no candidate now", never "no such log row"
    -- (until 0068 an id not logged, or forgotten with a turn it returned, gave no rows).
    IF NOT FOUND THEN
        RAISE EXCEPTION 'recall % is not in the recall log of scope %', recall_id, scope USING ERRCODE = 'P0002',
            HINT = 'A recall is logged with log=True or pgmem recall --log (its recall_id); a log row is deleted with a turn, fact or document it returned (the forget functions) and by the scope''s log retention (log_keep_days, log_keep_rows).';
    END IF;
    IF l.plane <> 'memory' THEN
        RAISE EXCEPTION 'recall % searched the % plane; only memory recalls can be explained', recall_id, l.plane
            USING ERRCODE = '22023';
    END IF;
    -- Never the query vectors of one model ranked against the pieces of another (0116).
    PERFORM pgmem._check_logged_model(l.scope_id, recall_id, l.settings, 'explain');
    -- Under the caller's recall settings (logged since 0057; the search width among them), then
    -- this session's again.
    IF l.settings IS NOT NULL THEN
        session_settings := pgmem._apply_recall_settings(l.settings);
    END IF;
    RETURN QUERY
    SELECT e.* FROM pgmem.explain_recall(l.scope_id, l.part_vectors, l.part_texts, l.x, l.floor, l.thread_id, show,
                                         metadata_filter => l.metadata_filter, since => l.since, until => l.until) e;
    IF l.settings IS NOT NULL THEN
        PERFORM pgmem._apply_recall_settings(session_settings);
    END IF;
END
$$;
COMMENT ON FUNCTION pgmem.explain_logged_recall(text, bigint, integer) IS
'Replay a logged recall (pgmem.recall_log) through explain_recall, with its x, floor, thread, metadata filter and since / until bounds (what decides which turns it searched), under the recall settings the caller''s session had set (as replay_logged_recall): what each part found now, and why hits were cut. explain_recall ranks by cosine: the logged mode, time window and recency, which reorder hits, are in the row but not applied. scope must be the transaction''s pgmem.scope (42501 otherwise); a recall_id not in the scope''s log raises P0002 (22004 for NULL arguments, 22023 for an id below 1 or a recall of another plane). A recall logged under another model than the scope''s now (settings -> model, since 0116: a model change, pgmem reembed, came between) raises 22000 naming both models, with a hint to record it again; a row logged before 0116 (no model) runs as before.';

-- explain_logged_recall ranks by cosine; this is the recall itself, run again with what the log
-- holds, so a person in psql sees what the caller would get now, ranked as the caller got it,
-- and what changed since.
CREATE OR REPLACE FUNCTION pgmem.replay_logged_recall(scope text, recall_id bigint)
RETURNS TABLE (part_no integer, rank integer, piece_id bigint, thread_id text, turn_index integer, label text, body text,
               cosine double precision, score double precision, word_rank integer, logged_rank integer, change text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    l pgmem.recall_log;
    now_hits pgmem.recall_hit[];
    session_settings jsonb;
BEGIN
    IF scope IS NULL OR recall_id IS NULL THEN
        RAISE EXCEPTION 'scope and recall_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM pgmem.check_scope(scope);
    IF recall_id < 1 THEN
        RAISE EXCEPTION 'recall_id must be a positive id from the recall log, got %', recall_id USING ERRCODE = '22023';
    END IF;
    SELECT * INTO l FROM pgmem.recall_log r
     WHERE r.scope_id = replay_logged_recall.scope AND r.recall_id = replay_logged_recall.recall_id;
    -- An empty replay must mean "nothing is found now", never "no such log row".
    IF NOT FOUND THEN
        RAISE EXCEPTION 'recall % is not in the recall log of scope %', recall_id, scope USING ERRCODE = 'P0002',
            HINT = 'A recall is logged with log=True or pgmem recall --log (its recall_id); a log row is deleted with a turn, fact or document it returned (the forget functions) and by the scope''s log retention (log_keep_days, log_keep_rows).';
    END IF;
    IF l.plane <> 'memory' THEN
        RAISE EXCEPTION 'recall % searched the % plane; only memory recalls can be replayed', recall_id, l.plane
            USING ERRCODE = '22023';
    END IF;
    -- Never the query vectors of one model ranked against the pieces of another (0116).
    PERFORM pgmem._check_logged_model(l.scope_id, recall_id, l.settings, 'replay');
    -- Under the recall settings the caller's session had set (logged since 0057; a row logged
    -- before has none, and runs under this session's), then this session's again.
    IF l.settings IS NOT NULL THEN
        session_settings := pgmem._apply_recall_settings(l.settings);
    END IF;
    -- Every logged argument. A NULL recency was not given by the caller: memory_recall's default
    -- is what the caller got, so it is left out rather than passed (memory_recall refuses NULL).
    IF l.recency IS NULL THEN
        now_hits := ARRAY(SELECT h FROM pgmem.memory_recall(l.scope_id, l.part_vectors, l.part_texts, l.x, l.floor, l.thread_id,
                                                        l.mode, metadata_filter => l.metadata_filter,
                                                        time_from => l.time_from, time_to => l.time_to,
                                                        since => l.since, until => l.until) h);
    ELSE
        now_hits := ARRAY(SELECT h FROM pgmem.memory_recall(l.scope_id, l.part_vectors, l.part_texts, l.x, l.floor, l.thread_id,
                                                        l.mode, metadata_filter => l.metadata_filter,
                                                        time_from => l.time_from, time_to => l.time_to,
                                                        recency => l.recency, since => l.since, until => l.until) h);
    END IF;
    IF l.settings IS NOT NULL THEN
        PERFORM pgmem._apply_recall_settings(session_settings);
    END IF;
    RETURN QUERY
    WITH logged AS (
        -- The logged hits (results: the recall's groups, each {part_no, hits: [{rank, piece_id, ...}]}),
        -- read defensively: a row log_recall took from a caller may hold any JSON.
        SELECT DISTINCT ON (g.part_no, h.piece_id) g.part_no, h.piece_id, h.rank, h.e
          FROM (SELECT (a.e ->> 'part_no')::numeric AS part_no, a.e -> 'hits' AS hits
                  FROM jsonb_array_elements(CASE WHEN jsonb_typeof(l.results) = 'array' THEN l.results ELSE '[]' END) AS a(e)
                 WHERE jsonb_typeof(a.e -> 'part_no') = 'number' AND jsonb_typeof(a.e -> 'hits') = 'array') g
          CROSS JOIN LATERAL (
                SELECT (b.e ->> 'piece_id')::numeric AS piece_id, (b.e ->> 'rank')::numeric AS rank, b.e
                  FROM jsonb_array_elements(g.hits) AS b(e)
                 WHERE jsonb_typeof(b.e -> 'piece_id') = 'number' AND jsonb_typeof(b.e -> 'rank') = 'number') h
         WHERE g.part_no BETWEEN 1 AND 64 AND h.rank BETWEEN 1 AND 1000
           AND h.piece_id BETWEEN 1 AND 9223372036854775807
         ORDER BY g.part_no, h.piece_id, h.rank
    )
    SELECT coalesce(n.part_no, g.part_no::integer), n.rank, coalesce(n.piece_id, g.piece_id::bigint),
           CASE WHEN n.piece_id IS NULL THEN g.e ->> 'thread_id' ELSE n.thread_id END,
           CASE WHEN n.piece_id IS NOT NULL THEN n.turn_index
                WHEN jsonb_typeof(g.e -> 'turn_index') = 'number'
                     AND (g.e ->> 'turn_index')::numeric BETWEEN -2147483648 AND 2147483647
                    THEN (g.e ->> 'turn_index')::numeric::integer END,
           coalesce(n.label, g.e ->> 'label'), coalesce(n.body, g.e ->> 'body'),
           n.cosine, n.score, n.word_rank, g.rank::integer,
           CASE WHEN g.piece_id IS NULL THEN 'new' WHEN n.piece_id IS NULL THEN 'missing'
                WHEN g.rank = n.rank THEN 'same' ELSE 'moved' END
      FROM unnest(now_hits) AS n
      FULL JOIN logged g ON g.part_no = n.part_no AND g.piece_id = n.piece_id
     ORDER BY 1, n.rank NULLS LAST, g.rank, 3;
END
$$;
COMMENT ON FUNCTION pgmem.replay_logged_recall(text, bigint) IS
'Run a logged recall (pgmem.recall_log, memory plane) again through memory_recall with every argument the log holds: parts and their texts, x, floor, thread, mode (vector or hybrid), metadata filter, time window (time_from / time_to), recency (its default when none was logged) and since / until, under the recall settings the caller''s session had set (recall_log.settings, pgmem._recall_setting_names: pgmem.word_weight, pgmem.time_weight, pgmem.ef_search and the others; a setting the caller did not set is unset for the replay, so the defaults and the model registry of now apply; a row logged before 0057 runs under this session''s). One row per hit now, memory_recall''s columns, ranked as the caller got them, plus logged_rank (the hit''s rank in the logged results, NULL when it was not among them) and change: same, moved (another rank then), new (not a logged hit) or missing (a logged hit not returned now: rank, cosine, score and word_rank NULL, its piece, thread, turn, label and body as logged; listed after its part''s hits). candidates, rrf_k and exact are memory_recall''s defaults. This session''s settings are as they were after the call. scope must be the transaction''s pgmem.scope (42501 otherwise); a recall_id not in the scope''s log raises P0002 (22004 for NULL arguments, 22023 for an id below 1 or a recall of another plane). A recall logged under another model than the scope''s now (settings -> model, since 0116: a model change, pgmem reembed, came between) raises 22000 naming both models, with a hint to record it again; a row logged before 0116 (no model) runs as before.';
