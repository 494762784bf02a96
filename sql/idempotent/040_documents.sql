-- Documents: chunks and their derived search units, stored in the per-scope piece plane
-- as kind = 'document' rows, and document_search. Re-runnable.

CREATE OR REPLACE FUNCTION pgmem.document_hashes(scope text, document_ids text[])
RETURNS TABLE (document_id text, content_hash bytea)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pgmem.check_scope(document_hashes.scope);  -- 42501 outside the transaction's scope
    RETURN QUERY
    SELECT d.document_id, d.content_hash FROM pgmem.document d
     WHERE d.scope_id = document_hashes.scope AND d.document_id = ANY (document_ids);
END
$$;
COMMENT ON FUNCTION pgmem.document_hashes(text, text[]) IS
'Stored content hashes of the given documents: the client skips (and never embeds) documents whose hash is unchanged.';

CREATE OR REPLACE FUNCTION pgmem.document_titles(scope text)
RETURNS TABLE (document_id text, title text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pgmem.check_scope(document_titles.scope);  -- 42501 outside the transaction's scope
    RETURN QUERY
    SELECT d.document_id, d.title FROM pgmem.document d WHERE d.scope_id = document_titles.scope
     ORDER BY d.document_id;
END
$$;
COMMENT ON FUNCTION pgmem.document_titles(text) IS
'Id and title of every document of a scope: what transclusions ([[target]]) are resolved against.';

CREATE OR REPLACE FUNCTION pgmem._link_slug(name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
DECLARE
    n text := regexp_replace(name, '^.*/', '');
BEGIN
    -- As pgmem.documents.units.slug_of: the file name without its folders and without .markdown,
    -- then .md (case-insensitive), stripped and lowercased.
    IF lower(n) LIKE '%.markdown' THEN
        n := left(n, -9);
    END IF;
    IF lower(n) LIKE '%.md' THEN
        n := left(n, -3);
    END IF;
    RETURN lower(regexp_replace(n, '^\s+|\s+$', '', 'g'));
END
$$;
COMMENT ON FUNCTION pgmem._link_slug(text) IS
'Internal (0115): what a [[target]] names and what a document id answers to, as pgmem.documents.units.slug_of: the file name without folders and .markdown / .md, stripped, lowercased.';

CREATE OR REPLACE FUNCTION pgmem._relink_documents(scope text, slug text, old_title text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    new_title text;
    old_end text := ' → ' || left(old_title, 200);
    new_end text;
    n integer;
BEGIN
    IF coalesce(old_title, '') = '' THEN
        RETURN 0;
    END IF;
    -- A slug resolves to the title of the last of its documents by id, as the client's map of
    -- pgmem.document_titles (pgmem.documents.store) does; none left: no such document.
    SELECT d.title INTO new_title FROM pgmem.document d
     WHERE d.scope_id = _relink_documents.scope AND pgmem._link_slug(d.document_id) = _relink_documents.slug
     ORDER BY d.document_id DESC LIMIT 1;
    new_end := ' → ' || coalesce(left(nullif(new_title, ''), 200), '(no such document)');
    IF new_end = old_end THEN
        RETURN 0;
    END IF;
    -- The units that resolved this slug to the old title (a unit's text ends "→ <title>", its
    -- span in its chunk is the [[link]]). Units a writer of their document holds are skipped:
    -- that writer replaces them (waiting for it here would wait in a cycle with a writer that
    -- relinks this document's units in turn).
    WITH t AS (
        SELECT p.piece_id FROM pgmem.piece p
          JOIN pgmem.chunk ch ON ch.scope_id = p.scope_id AND ch.chunk_id = p.chunk_id
         WHERE p.scope_id = _relink_documents.scope AND p.kind = 'document' AND p.unit_kind = 'transclusion'
           AND right(p.body, char_length(old_end)) = old_end
           AND pgmem._link_slug(regexp_replace(
                   substring(substr(ch.body, p.span_start + 1, p.span_end - p.span_start) FROM '^!?\[\[([^][|#\n]+)'),
                   '^\s+|\s+$', '', 'g')) = _relink_documents.slug
           FOR UPDATE OF p SKIP LOCKED
    )
    UPDATE pgmem.piece p SET body = left(p.body, char_length(p.body) - char_length(old_end)) || new_end
      FROM t WHERE p.scope_id = _relink_documents.scope AND p.piece_id = t.piece_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION pgmem._relink_documents(text, text, text) IS
'Internal to put_document and forget_document (0115): after a document of this slug was retitled or removed, rewrite the text of the scope''s transclusion units that resolved the slug to its old title ("… → Old Title") to what the slug resolves to now (the title of its last document by id, or "(no such document)"); units a concurrent writer holds are skipped. The units keep their vectors and words until their document is added again (its content hash covers what its links resolve to, so that add embeds them again). Returns the units rewritten.';

CREATE OR REPLACE FUNCTION pgmem.put_document(
    scope text,
    document_id text,
    title text,
    body text,
    content_hash bytea,
    model_id text,
    chunk_heading_paths jsonb,
    chunk_bodies text[],
    unit_chunks integer[],
    unit_kinds text[],
    unit_indexes integer[],
    span_starts integer[],
    span_ends integer[],
    labels text[],
    bodies text[],
    vectors vector[],
    weight double precision DEFAULT 0.8,
    reembed boolean DEFAULT false,
    force boolean DEFAULT false
) RETURNS pgmem.put_result
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer := coalesce(array_length(vectors, 1), 0);
    nchunks integer := coalesce(array_length(chunk_bodies, 1), 0);
    key smallint;
    old_hash bytea;
    old_title text;
    status text := 'inserted';
    bad integer;
    bad_arg text;
    -- Each chunk body's length, once (0040): read per unit, a multi-megabyte body was copied and
    -- counted again for each of its units (a 4 MB code block: 20 s; 21 MB: 488 s).
    lens integer[];
BEGIN
    IF scope IS NULL OR document_id IS NULL OR title IS NULL OR body IS NULL OR content_hash IS NULL
       OR model_id IS NULL OR chunk_heading_paths IS NULL THEN
        RAISE EXCEPTION 'put_document: scope, document_id, title, body, content_hash, model_id and chunk_heading_paths must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(put_document.scope), true);
    PERFORM pgmem._check_scope_name(put_document.scope, 'put_document');
    -- The document table's check as one line (not a 23514), and Python's check_name (0091): a
    -- blank id could not be removed or searched for through Python, which refuses the name first.
    IF char_length(document_id) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'put_document: document_id must be 1 to 1000 characters, got %', char_length(document_id)
            USING ERRCODE = '22023';
    ELSIF pgmem._blank(document_id) THEN
        RAISE EXCEPTION 'put_document: document_id must be a non-empty string, got only whitespace' USING ERRCODE = '22023',
            HINT = 'A document id needs a character that is not whitespace.';
    END IF;
    IF weight IS NULL OR weight < 0 OR weight > 1 THEN
        RAISE EXCEPTION 'put_document: weight must be between 0 and 1, got %', weight USING ERRCODE = '22023';
    END IF;
    IF nchunks = 0 OR n = 0 THEN
        RAISE EXCEPTION 'put_document: document % needs at least one chunk and one unit', document_id
            USING ERRCODE = '22023', HINT = 'An empty document has nothing to store.';
    END IF;
    IF jsonb_typeof(chunk_heading_paths) <> 'array' OR jsonb_array_length(chunk_heading_paths) <> nchunks THEN
        RAISE EXCEPTION 'put_document: chunk_heading_paths must be a JSON array with one array of headings per chunk (% chunks)', nchunks
            USING ERRCODE = '22023';
    END IF;
    -- Each chunk's path a list of strings: an element of another type was stored as its JSON
    -- text (a NULL came back as "None"), a path that is no list failed with "cannot extract
    -- elements from a scalar" (0053).
    SELECT h.o INTO bad FROM jsonb_array_elements(chunk_heading_paths) WITH ORDINALITY AS h(path, o)
     WHERE jsonb_typeof(h.path) <> 'array'
        OR EXISTS (SELECT 1 FROM jsonb_array_elements(h.path) AS e(x) WHERE jsonb_typeof(e.x) <> 'string')
     ORDER BY h.o LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'put_document: chunk_heading_paths[%] must be a JSON array of strings, got %', bad - 1,
            left((chunk_heading_paths -> (bad - 1)::integer)::text, 200)
            USING ERRCODE = '22023';
    END IF;
    -- Each chunk stores its whole path, so one long heading is stored once for every section
    -- under it: a 205 kB document with a 200,000-character title over 300 sections stored 57 MB
    -- of paths (0056). pgmem.documents.chunking cuts a heading to this many characters.
    SELECT h.o INTO bad FROM jsonb_array_elements(chunk_heading_paths) WITH ORDINALITY AS h(path, o)
     WHERE jsonb_array_length(h.path) > 32
        OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(h.path) AS e(x) WHERE length(e.x) > 500)
     ORDER BY h.o LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'put_document: chunk_heading_paths[%] has more than 32 headings or one of more than 500 characters', bad - 1
            USING ERRCODE = '22023', HINT = 'Cut each heading of a path to 500 characters, as pgmem''s Markdown chunking does.';
    END IF;
    -- Entry i of each array is unit i (chunk i): an array with other bounds or more dimensions
    -- was read by position from 1, so its checks below read other entries than those stored (0053).
    bad_arg := CASE WHEN pgmem._not_a_list(chunk_bodies) THEN 'chunk_bodies'
                    WHEN pgmem._not_a_list(unit_chunks) THEN 'unit_chunks'
                    WHEN pgmem._not_a_list(unit_kinds) THEN 'unit_kinds'
                    WHEN pgmem._not_a_list(unit_indexes) THEN 'unit_indexes'
                    WHEN pgmem._not_a_list(span_starts) THEN 'span_starts'
                    WHEN pgmem._not_a_list(span_ends) THEN 'span_ends'
                    WHEN pgmem._not_a_list(labels) THEN 'labels'
                    WHEN pgmem._not_a_list(bodies) THEN 'bodies'
                    WHEN pgmem._not_a_list(vectors) THEN 'vectors' END;
    IF bad_arg IS NOT NULL THEN
        RAISE EXCEPTION 'put_document: % must be a one-dimensional array indexed from 1', bad_arg
            USING ERRCODE = '22023', HINT = 'ARRAY[...] and a client''s list are; ''[0:1]={...}'' and ''{{...}}'' are not.';
    END IF;
    SELECT c.o INTO bad FROM unnest(chunk_bodies) WITH ORDINALITY AS c(body, o) WHERE c.body IS NULL ORDER BY c.o LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'put_document: chunk_bodies[%] is NULL', bad USING ERRCODE = '22023',
            HINT = 'A chunk with no text has an empty body.';
    END IF;
    IF coalesce(array_length(unit_chunks, 1), 0) <> n OR coalesce(array_length(unit_kinds, 1), 0) <> n
       OR coalesce(array_length(unit_indexes, 1), 0) <> n OR coalesce(array_length(span_starts, 1), 0) <> n
       OR coalesce(array_length(span_ends, 1), 0) <> n OR coalesce(array_length(labels, 1), 0) <> n
       OR coalesce(array_length(bodies, 1), 0) <> n THEN
        RAISE EXCEPTION 'put_document: unit_chunks, unit_kinds, unit_indexes, span_starts, span_ends, labels, bodies and vectors must have the same length (% vectors)', n
            USING ERRCODE = '22023';
    END IF;
    -- Each array read once, in order (0108): an element of a text array subscripted in a query
    -- (unit_kinds[u.i]) is found by walking the array from its start, so the checks of 40,000
    -- units took 15 s, four times as long for twice the units.
    SELECT k.o INTO bad FROM unnest(unit_kinds) WITH ORDINALITY AS k(kind, o)
     WHERE k.kind IS NULL OR k.kind NOT IN ('heading', 'prose', 'code', 'list', 'transclusion', 'chunk')
     ORDER BY k.o LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'put_document: unit_kinds[%] is %, not a document unit kind', bad, coalesce(unit_kinds[bad], 'NULL')
            USING ERRCODE = '22023', HINT = 'Use heading, prose, code, list, transclusion or chunk.';
    END IF;
    SELECT u.o INTO bad FROM unnest(unit_chunks) WITH ORDINALITY AS u(ch, o)
     WHERE u.ch IS NULL OR u.ch < 0 OR u.ch >= nchunks
     ORDER BY u.o LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'put_document: unit_chunks[%] = % is not a chunk ordinal (0 .. %)', bad, unit_chunks[bad], nchunks - 1
            USING ERRCODE = '22023';
    END IF;
    SELECT u.o INTO bad FROM unnest(unit_indexes, labels, bodies) WITH ORDINALITY AS u(idx, label, body, o)
     WHERE u.idx IS NULL OR u.idx < 0 OR u.label IS NULL OR u.body IS NULL
     ORDER BY u.o LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'put_document: unit % has %', bad,
            CASE WHEN unit_indexes[bad] IS NULL THEN 'a NULL unit_indexes entry'
                 WHEN unit_indexes[bad] < 0 THEN format('unit_indexes %s, not a position (0 or more)', unit_indexes[bad])
                 WHEN labels[bad] IS NULL THEN 'a NULL label (an empty one is '''')'
                 ELSE 'a NULL body (an empty one is '''')' END
            USING ERRCODE = '22023';
    END IF;
    lens := ARRAY(SELECT coalesce(char_length(b.body), 0) FROM unnest(chunk_bodies) WITH ORDINALITY AS b(body, o) ORDER BY b.o);
    SELECT u.o INTO bad FROM unnest(unit_chunks, span_starts, span_ends) WITH ORDINALITY AS u(ch, s, e, o)
     WHERE u.s IS NULL OR u.e IS NULL OR u.s < 0 OR u.e < u.s OR u.e > lens[u.ch + 1]
     ORDER BY u.o LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'put_document: unit % has span [%, %) outside its chunk body (% characters)',
            bad, span_starts[bad], span_ends[bad], lens[unit_chunks[bad] + 1]
            USING ERRCODE = '22023';
    END IF;
    -- No invisible chunk: every chunk must have at least one search unit.
    SELECT min(c.o) INTO bad FROM (SELECT generate_series(0, nchunks - 1) EXCEPT SELECT unnest(unit_chunks)) AS c(o);
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'put_document: chunk % of % has no search unit and could never be found', bad, document_id
            USING ERRCODE = '22023', HINT = 'A chunk with an empty body embeds its heading path.';
    END IF;
    PERFORM pgmem.check_vectors(vectors, 'piece.embedding', 'vectors');
    key := pgmem.bind_scope_model(scope, model_id, vector_dims(vectors[1]), 'piece', reembed);

    -- Then the document (the lock order: docs/architecture.md). A new document is inserted at
    -- once, so a concurrent writer of the same new document waits on its key and finds it
    -- stored (never two sets of chunks); a stored one is locked FOR UPDATE, so concurrent
    -- writers of one document serialise here.
    LOOP
        INSERT INTO pgmem.document AS d (scope_id, document_id, title, body, content_hash)
        VALUES (scope, document_id, title, body, content_hash)
        ON CONFLICT (scope_id, document_id) DO NOTHING;
        EXIT WHEN FOUND;
        SELECT d.content_hash, d.title INTO old_hash, old_title FROM pgmem.document d
         WHERE d.scope_id = put_document.scope AND d.document_id = put_document.document_id
           FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        IF old_hash = put_document.content_hash AND NOT coalesce(force, false) THEN
            RETURN ROW('unchanged', 0)::pgmem.put_result;
        END IF;
        status := 'replaced';
        -- Chunks cascade to their units.
        DELETE FROM pgmem.chunk c WHERE c.scope_id = put_document.scope AND c.document_id = put_document.document_id;
        UPDATE pgmem.document d
           SET title = put_document.title, body = put_document.body, content_hash = put_document.content_hash,
               updated_at = now()
         WHERE d.scope_id = put_document.scope AND d.document_id = put_document.document_id;
        EXIT;
    END LOOP;

    WITH new_chunks AS (
        INSERT INTO pgmem.chunk AS c (scope_id, document_id, ordinal, heading_path, body)
        SELECT put_document.scope, put_document.document_id, (h.o - 1)::integer,
               ARRAY(SELECT jsonb_array_elements_text(h.path)), b.body
          FROM jsonb_array_elements(chunk_heading_paths) WITH ORDINALITY AS h(path, o)
          JOIN unnest(chunk_bodies) WITH ORDINALITY AS b(body, o) ON b.o = h.o
        RETURNING c.chunk_id, c.ordinal
    ), u AS (
        SELECT * FROM unnest(unit_chunks, unit_kinds, unit_indexes, span_starts, span_ends, labels, bodies, vectors)
               WITH ORDINALITY AS u(ch, kind, idx, s, e, label, body, v, ord)
    ), ctx AS (
        -- A chunk's context vector: unit(mean of its units' unit vectors), as a turn's is of its pieces.
        SELECT u.ch, pgmem.unit_mean(array_agg(u.v)) AS c FROM u GROUP BY u.ch
    )
    INSERT INTO pgmem.piece (scope_id, kind, unit_kind, source_index, seq, chunk_id, span_start, span_end,
                             label, body, raw_embedding, embedding, model_key)
    SELECT put_document.scope, 'document', u.kind, u.idx,
           (row_number() OVER (PARTITION BY u.ch, u.idx ORDER BY u.ord))::integer - 1,
           nc.chunk_id, u.s, u.e, u.label, u.body, l2_normalize(u.v),
           CASE WHEN weight = 1 THEN l2_normalize(u.v) ELSE pgmem.blend(u.v, ctx.c, weight) END, key
      FROM u JOIN new_chunks nc ON nc.ordinal = u.ch JOIN ctx ON ctx.ch = u.ch
     ORDER BY u.ord;
    -- A retitled document: the links of the scope that named its old title name the new one
    -- (0115; they kept the old title until the linking document was added again).
    IF old_title IS DISTINCT FROM put_document.title THEN
        PERFORM pgmem._relink_documents(put_document.scope, pgmem._link_slug(put_document.document_id), old_title);
    END IF;
    RETURN ROW(status, n)::pgmem.put_result;
END
$$;
COMMENT ON FUNCTION pgmem.put_document(text, text, text, text, bytea, text, jsonb, text[], integer[], text[], integer[], integer[], integer[], text[], text[], vector[], double precision, boolean, boolean) IS
'Store one Markdown document atomically (document_id 1 to 1,000 characters, not only whitespace: 22023, 0091): its chunks (heading path, a JSON array of strings, + body) and their search units (kind, position in its chunk, span in the chunk body, label, body, vector) as kind = document pieces; every array is one-dimensional from 1 and holds no NULL (22023 naming the argument or the unit). Unchanged hash = no write (unless force); changed = chunks and units replaced in this one transaction. Refuses a chunk without a unit. weight < 1 blends each unit with its chunk context unit(mean of the chunk''s unit vectors).';

CREATE OR REPLACE FUNCTION pgmem.remove_document(scope text, document_id text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    n integer;
BEGIN
    IF scope IS NULL OR document_id IS NULL THEN
        RAISE EXCEPTION 'remove_document: scope and document_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(remove_document.scope), true);
    -- A stored document only (0097). forget_document also forgets the facts about an id the scope
    -- holds no document of (facts may name a document before it is stored): through it, a remove
    -- of such an id deleted those facts, a conversation's among them, and returned false, which
    -- the CLI printed as "no document". The document row is locked first, as forget_document
    -- locks it (070_forget.sql), so it cannot go between this look and the forget.
    IF NOT pgmem._lock_document(remove_document.scope, remove_document.document_id) THEN
        RETURN false;
    END IF;
    -- Its facts and recall-log rows go too (070_forget.sql).
    SELECT f.documents INTO n FROM pgmem.forget_document(remove_document.scope, remove_document.document_id) f;
    RETURN n > 0;
END
$$;
COMMENT ON FUNCTION pgmem.remove_document(text, text) IS
'Remove a stored document with its chunks and search units, the facts whose section is its id (or id#anchor, as pgmem.forget_document decides) and the recall-log rows that returned them (pgmem.forget_document); false, and nothing removed, when the scope has no such document (0097: facts about an id no document has are forgotten by forget_document only).';

CREATE OR REPLACE FUNCTION pgmem.reblend_documents(scope text, weight double precision DEFAULT 0.8)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
-- The scope's units and their chunks' contexts, joined whole: hashed whatever the statistics
-- (0095). Planned on statistics older than the scope (tables analyzed empty, or never), the
-- planner took each side for a row or two and joined them in a nested loop, rereading every
-- chunk's context once a unit: 3,000 units took 57 s against 0.3 s.
SET enable_nestloop = off
AS $$
#variable_conflict use_column
DECLARE
    n bigint;
BEGIN
    IF scope IS NULL THEN
        RAISE EXCEPTION 'reblend_documents: scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM set_config('pgmem.scope', pgmem._write_scope(reblend_documents.scope), true);
    IF weight IS NULL OR weight < 0 OR weight > 1 THEN
        RAISE EXCEPTION 'reblend_documents: weight must be between 0 and 1, got %', weight USING ERRCODE = '22023';
    END IF;
    -- Lock order (0040), as reblend: the scope row FOR SHARE (a model change commits first or
    -- waits, so raw vectors and chunk contexts are read of one model), then the documents FOR
    -- UPDATE in key order, as put_document and forget_document take them before their units.
    PERFORM 1 FROM pgmem.scope s WHERE s.scope_id = reblend_documents.scope FOR SHARE;
    PERFORM 1 FROM pgmem.document d WHERE d.scope_id = reblend_documents.scope ORDER BY d.document_id FOR UPDATE;
    WITH ctx AS (
        SELECT p.chunk_id, pgmem.unit_mean(array_agg(p.raw_embedding)) AS c FROM pgmem.piece p
         WHERE p.scope_id = reblend_documents.scope AND p.kind = 'document' GROUP BY p.chunk_id
    )
    UPDATE pgmem.piece p
       SET embedding = CASE WHEN weight = 1 THEN p.raw_embedding ELSE pgmem.blend(p.raw_embedding, ctx.c, weight) END
      FROM ctx
     WHERE p.scope_id = reblend_documents.scope AND p.kind = 'document' AND p.chunk_id = ctx.chunk_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION pgmem.reblend_documents(text, double precision) IS
'Rewrite the search vectors of a scope''s document units: weight 1 = the unit alone, else blended with its chunk context (unit mean of the chunk''s raw unit vectors). No embedding call. Returns the units rewritten.';

-- Earlier signatures (before model_id, before mode): dropped so the model check cannot be gone
-- around and a call stays unambiguous.
DROP FUNCTION IF EXISTS pgmem.document_search(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, integer);
DROP FUNCTION IF EXISTS pgmem.document_search(text, @VECTOR_SCHEMA@.vector[], text[], integer, double precision, integer, text);

CREATE OR REPLACE FUNCTION pgmem.document_search(
    scope text,
    part_vectors vector[],
    part_texts text[] DEFAULT NULL,
    x integer DEFAULT 5,
    floor double precision DEFAULT NULL,
    candidates integer DEFAULT 50,
    model_id text DEFAULT NULL,
    mode text DEFAULT 'auto',
    rrf_k integer DEFAULT 60
) RETURNS SETOF pgmem.document_hit
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgmem, @VECTOR_SCHEMA@, pg_temp
-- Planned once a connection, as memory_recall (0031): its fusion is one grouping of the two
-- rankings' rows, whose plan fits every size. Planned with each call's values it took 1.1 to
-- 3.4 times as long, the same rows (docs/bench/recall-ab-0032.txt).
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    -- The word side's settings for documents, apart from memory's (chosen on the documents
    -- sets' tuning halves, docs/documents.md).
    word_share double precision := coalesce(nullif(current_setting('pgmem.doc_word_share', true), '')::double precision, 0.1);
    word_weight double precision := coalesce(nullif(current_setting('pgmem.doc_word_weight', true), '')::double precision, 1.0);
    n_cand integer;
    hits pgmem.document_hit[] := '{}';
    found pgmem.document_hit[];
    full_parts integer[];
    crowded integer[];  -- the parts searched again; NULL: every part (the first pass)
BEGIN
    IF mode = 'auto' THEN
        mode := CASE WHEN part_texts IS NULL THEN 'vector' ELSE 'hybrid' END;
    END IF;
    IF NOT (word_weight >= 0 AND word_weight <= 100) THEN
        RAISE EXCEPTION 'pgmem.doc_word_weight must be between 0 and 100, got %', word_weight USING ERRCODE = '22023';
    END IF;
    -- No floor given: the model's (pgmem.model_settings), on the cosine scale of its vectors.
    IF document_search.floor IS NULL THEN
        SELECT m.floor INTO document_search.floor FROM pgmem.scope_model_settings(document_search.scope, document_search.model_id) m;
    END IF;
    PERFORM pgmem.check_recall_args(scope, part_vectors, part_texts, x, floor, mode, 'piece.embedding',
                                    model_id => model_id, candidates => candidates, rrf_k => rrf_k);
    -- Each part: its nearest units and, in hybrid mode, the units holding its distinctive words
    -- (pgmem.word_candidates over the scope's units), fused by reciprocal rank as memory recall
    -- fuses them; then each chunk once (by its best unit), top x chunks over the floor. Memory
    -- pieces share the plane and are excluded by kind = 'document'.
    -- Crowding (0097): the nearest units of one chunk (a long table or code block is packed into
    -- tens or hundreds of units of one span) could fill all `candidates`, so a part returned that
    -- one chunk while x chunks were above the floor (asked for 5, 1 returned; 8 notes of cosine
    -- 0.8 left out). A part that returns fewer than x chunks while its candidate-th nearest unit
    -- is still over the floor (so nearer units may lie beyond) is searched again with 8 times the
    -- candidates, up to 1,000: the same ranks for the units found before, more units. The other
    -- parts keep their hits of the first pass.
    n_cand := greatest(candidates, x);
    LOOP
    WITH q AS (
        SELECT v.vec, v.part_no FROM unnest(part_vectors) WITH ORDINALITY AS v(vec, part_no)
         WHERE crowded IS NULL OR v.part_no = ANY (crowded)
    ), vec AS (
        SELECT q.part_no, h.piece_id, h.dist,
               row_number() OVER (PARTITION BY q.part_no ORDER BY h.dist, h.piece_id) AS vrank
          FROM q CROSS JOIN LATERAL (
                SELECT p.piece_id, p.embedding <=> q.vec AS dist
                  FROM pgmem.piece p
                 WHERE p.scope_id = document_search.scope AND p.kind = 'document'
                 ORDER BY p.embedding <=> q.vec, p.piece_id
                 LIMIT n_cand) h
    ), word AS (
        -- The word side of memory recall over the scope's units (pgmem.word_candidates).
        SELECT h.part_no, h.piece_id, p.embedding <=> q.vec AS dist, h.word_rank AS wrank
          FROM pgmem.word_candidates(document_search.scope, CASE WHEN mode = 'hybrid' THEN part_texts END,
                                     n_cand, NULL, word_share, 'document') h
          JOIN q ON q.part_no = h.part_no
          JOIN pgmem.piece p ON p.scope_id = document_search.scope AND p.piece_id = h.piece_id
    ), fused AS (
        -- As in memory_recall: a word rank counts word_weight times a vector rank for a unit the
        -- vector side found too, and at most once for a unit only the word side found.
        SELECT k.part_no, k.piece_id, coalesce(k.vdist, k.wdist) AS dist,
               coalesce(1.0 / (rrf_k + k.vrank), 0)
               + (CASE WHEN k.vrank IS NULL THEN least(word_weight, 1.0) ELSE word_weight END)
                 * coalesce(1.0 / (rrf_k + k.wrank), 0) AS rrf
          FROM (SELECT u.part_no, u.piece_id,
                       min(u.dist) FILTER (WHERE u.src = 1) AS vdist, min(u.r) FILTER (WHERE u.src = 1) AS vrank,
                       min(u.dist) FILTER (WHERE u.src = 2) AS wdist, min(u.r) FILTER (WHERE u.src = 2) AS wrank
                  FROM (SELECT v.part_no, v.piece_id, v.dist, v.vrank AS r, 1 AS src FROM vec v
                        UNION ALL
                        SELECT w.part_no, w.piece_id, w.dist, w.wrank, 2 FROM word w) u
                 GROUP BY u.part_no, u.piece_id) k
    ), c AS (
        SELECT f.part_no, f.piece_id, p.chunk_id, p.unit_kind, p.span_start, p.span_end, f.dist, f.rrf
          FROM fused f JOIN pgmem.piece p ON p.scope_id = document_search.scope AND p.piece_id = f.piece_id
    ), best AS (
        -- The floor first, then each chunk's best unit: a chunk with a unit above the floor
        -- is found by it even when a unit of it under the floor ranks higher (its word hit).
        -- Until 0059 the best unit was chosen first and the floor then cut its whole chunk:
        -- hybrid search lost a chunk that vector search returned.
        SELECT DISTINCT ON (c.part_no, c.chunk_id) c.* FROM c
         WHERE 1 - c.dist >= floor
         ORDER BY c.part_no, c.chunk_id, c.rrf DESC, c.dist, c.piece_id
    ), ranked AS (
        SELECT b.*, row_number() OVER (PARTITION BY b.part_no ORDER BY b.rrf DESC, b.dist, b.piece_id) AS rnk
          FROM best b
    )
    -- The hits without their chunk's text (document, heading path, body: read once, below):
    -- copied into the array and out again, the bodies cost a one-part search 1.23 times its
    -- time before the passes (docs/bench/recall-ab-0097.txt).
    SELECT ARRAY(SELECT ROW(r.part_no::integer, r.rnk::integer, r.chunk_id, NULL, NULL, NULL,
                            r.piece_id, r.unit_kind, r.span_start, r.span_end, 1 - r.dist, (2 - r.dist) / 2)::pgmem.document_hit
                   FROM ranked r
                  WHERE r.rnk <= x
                  ORDER BY r.part_no, r.rnk),
           -- The parts whose last vector candidate is over the floor: more may lie beyond it.
           ARRAY(SELECT v.part_no::integer FROM vec v WHERE v.vrank = n_cand AND 1 - v.dist >= floor)
      INTO found, full_parts;
    -- This pass's hits replace those of the parts it searched.
    hits := ARRAY(SELECT hits[i] FROM generate_subscripts(hits, 1) AS i
                   WHERE NOT ((hits[i]).part_no = ANY (coalesce(crowded, '{}'))))
            || found;
    crowded := ARRAY(SELECT fp.part_no FROM unnest(full_parts) AS fp(part_no)
                      WHERE (SELECT count(*) FROM unnest(found) AS h WHERE h.part_no = fp.part_no) < x);
    EXIT WHEN n_cand >= 1000 OR cardinality(crowded) = 0;
    n_cand := least(n_cand * 8, 1000);
    END LOOP;
    RETURN QUERY
    SELECT h.part_no, h.rank, h.chunk_id, ch.document_id, ch.heading_path, ch.body, h.piece_id, h.unit_kind,
           h.span_start, h.span_end, h.cosine, h.score
      FROM unnest(hits) AS h JOIN pgmem.chunk ch ON ch.scope_id = document_search.scope AND ch.chunk_id = h.chunk_id
     ORDER BY 1, 2;
END
$$;
COMMENT ON FUNCTION pgmem.document_search(text, vector[], text[], integer, double precision, integer, text, text, integer) IS
'Per-part document search. Each part searches the scope''s document units (up to `candidates` nearest and, in hybrid mode, up to `candidates` units holding its distinctive words, pgmem.word_candidates with kind document, fused by reciprocal rank with constant rrf_k as memory_recall fuses them; settings pgmem.doc_word_share, default 0.1, and pgmem.doc_word_weight, default 1), resolves every unit hit with cosine >= floor (default: the floor of the scope''s model, pgmem.model_settings) to its whole chunk, keeps each chunk once per part (by its best such unit: a unit under the floor never hides its chunk) and returns up to x chunks (a part left with fewer than x chunks while its candidate-th nearest unit is over the floor, crowded by the units of a few chunks, is searched again with 8 times the candidates, up to 1,000: 0097): the chunk body, and the matched unit''s kind and character span in it. mode: auto (the default: hybrid when part_texts are given, else vector; chosen on the tuning halves of the documents sets, docs/documents.md), vector or hybrid. Groups are never merged across parts. Never reads memory pieces. candidates: 1 to 1000. model_id, when given, must be the model of the scope''s stored units (22000 naming both otherwise).';
