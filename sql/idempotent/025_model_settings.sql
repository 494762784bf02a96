-- Per-model recall settings (pgmem.model_setting, sql/incremental/012_model_settings.sql and
-- 013_model_keep_settings.sql).

-- 013 added word_keep_rank and word_keep_margin to the rows these return: a return type
-- cannot be replaced, so the older definitions are dropped first (once).
DO $$
BEGIN
    IF to_regprocedure('pgmem.model_settings(text)') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_proc
                        WHERE oid = to_regprocedure('pgmem.model_settings(text)')
                          AND 'word_keep_margin' = ANY (proargnames)) THEN
        DROP FUNCTION IF EXISTS pgmem.scope_model_settings(text, text);
        DROP FUNCTION pgmem.model_settings(text);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgmem.model_settings(model_id text)
RETURNS TABLE (model_id text, floor double precision, word_weight double precision,
               subject_cosine double precision, known boolean,
               word_keep_rank integer, word_keep_margin double precision)
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    -- A model without a row (or no model: an empty scope) gets MiniLM's measured values, the
    -- defaults the functions had before the registry, and known = false.
    SELECT model_settings.model_id, coalesce(s.floor, 0.2), coalesce(s.word_weight, 2.0),
           CASE WHEN s.model_id IS NULL THEN 0.25 ELSE s.subject_cosine END, s.model_id IS NOT NULL,
           coalesce(s.word_keep_rank, 1), coalesce(s.word_keep_margin, 0.05)
      FROM (SELECT 1) one
      LEFT JOIN pgmem.model_setting s ON s.model_id = model_settings.model_id
$$;
COMMENT ON FUNCTION pgmem.model_settings(text) IS
'The recall settings of an embedding model (pgmem.model_setting): the floor memory_recall, explain_recall, log_recall and document_search use when the caller gives none, hybrid recall''s word weight when the pgmem.word_weight setting is unset, the cosine at which the Python client merges two parts of a message into one subject (NULL: never), and memory_recall''s floor exception for a strong word hit when the pgmem.word_keep_rank / word_keep_margin settings are unset (a hit the word side ranks in its first word_keep_rank is kept up to word_keep_margin under the floor). One row always: a model without a row, or NULL, gets the defaults (floor 0.2, word weight 2, subject cosine 0.25, keep rank 1, keep margin 0.05, measured on MiniLM) and known = false.';

CREATE OR REPLACE FUNCTION pgmem.scope_model_settings(scope text, model_id text DEFAULT NULL)
RETURNS TABLE (model_id text, floor double precision, word_weight double precision,
               subject_cosine double precision, known boolean,
               word_keep_rank integer, word_keep_margin double precision)
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgmem, pg_temp
AS $$
    -- Row-level security: the scope row is visible inside the scope only; elsewhere the
    -- model is unknown and the defaults apply (check_recall_args refuses the read anyway).
    SELECT m.* FROM pgmem.model_settings(coalesce(scope_model_settings.model_id, (
        SELECT e.model_id FROM pgmem.scope s JOIN pgmem.embedding_model e ON e.model_key = s.piece_model_key
         WHERE s.scope_id = scope_model_settings.scope))) m
$$;
COMMENT ON FUNCTION pgmem.scope_model_settings(text, text) IS
'pgmem.model_settings of model_id when given, else of the model of the scope''s stored pieces (the defaults while the scope holds none). What the recall functions read when the caller gives no floor.';
