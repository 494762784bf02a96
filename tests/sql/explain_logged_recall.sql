-- Explaining a past recall from psql alone: the recall log keeps the parts, their vectors, the
-- settings (metadata filter and time bounds included) and the results; explain_logged_recall replays it.
CREATE FUNCTION pg_temp.e(i integer) RETURNS vector LANGUAGE sql AS $$
    SELECT l2_normalize(array_agg(CASE WHEN g = i THEN 1.0 WHEN g = i + 1 THEN 0.25 ELSE 0 END ORDER BY g)::real[]::vector)
    FROM generate_series(1, 384) AS g $$;

SELECT status FROM pgmem.put_turn(
    scope => 'demo', thread => 'ops', turn_index => 1, turn_time => '2026-10-15 16:40+00',
    messages => '[{"role": "user", "content": "The staging deploy failed."}]', content_hash => '\x01',
    model_id => 'psql-example', unit_kinds => ARRAY['user', 'assistant'], source_indexes => ARRAY[0, 1],
    labels => ARRAY['[Turn 1 · User · Oct 15, 4:40 PM]', '[Turn 1 · Assistant step 1 · Oct 15, 4:40 PM]'],
    bodies => ARRAY['The staging deploy failed.', 'DEPLOY_TOKEN goes in .env.local.'],
    vectors => ARRAY[pg_temp.e(1), pg_temp.e(2)], metadata => '{"channel": "voice"}');
SELECT status FROM pgmem.put_turn(
    scope => 'demo', thread => 'ops', turn_index => 2, turn_time => '2026-10-18 08:30+00',
    messages => '[{"role": "user", "content": "Biscuit needs a booster."}]', content_hash => '\x02',
    model_id => 'psql-example', unit_kinds => ARRAY['user'], source_indexes => ARRAY[0],
    labels => ARRAY['[Turn 2 · User · Oct 18, 8:30 AM]'], bodies => ARRAY['Biscuit needs a booster.'],
    vectors => ARRAY[pg_temp.e(10)], metadata => '{"channel": "chat"}');

-- A service logs what it recalled (here: two parts, x = 1).
SELECT pgmem.log_recall('demo', 'memory', 'Why did the deploy fail? And the dog?', ARRAY['Why did the deploy fail?', 'And the dog?'],
                        ARRAY[pg_temp.e(1), pg_temp.e(10)], 1, 0.2, NULL, 'vector', '[]') AS recall_id \gset
-- Later, in psql: what each part found, and why the others were cut.
SELECT part_no, part_text, candidate, label, round(cosine::numeric, 3) AS cosine, verdict
  FROM pgmem.explain_logged_recall('demo', :recall_id, show => 3);

-- A logged recall with a metadata filter is replayed with it.
SELECT pgmem.log_recall('demo', 'memory', 'deploy?', ARRAY['deploy?'], ARRAY[pg_temp.e(10)], 1, 0.2, NULL, 'vector', '[]',
                        metadata_filter => '{"channel": "voice"}') AS filtered_id \gset
SELECT part_no, candidate, label, round(cosine::numeric, 3) AS cosine, verdict
  FROM pgmem.explain_logged_recall('demo', :filtered_id);

-- And one bounded by since / until is replayed inside them: turn 2 (Oct 18) is not listed.
SELECT pgmem.log_recall('demo', 'memory', 'deploy?', ARRAY['deploy?'], ARRAY[pg_temp.e(1)], 1, 0.2, NULL, 'vector', '[]',
                        until => '2026-10-16 00:00+00') AS bounded_id \gset
SELECT part_no, candidate, label, round(cosine::numeric, 3) AS cosine, verdict
  FROM pgmem.explain_logged_recall('demo', :bounded_id);

-- An id that was never logged (or is another scope's): no rows.
SELECT count(*) FROM pgmem.explain_logged_recall('demo', 999999);
-- Errors.
\set SHOW_CONTEXT never
SELECT pgmem.log_recall('demo', 'fact', 'q', ARRAY['q'], ARRAY[pg_temp.e(1)], 1, 0.2, NULL, 'vector', '[]') AS fact_id \gset
SELECT * FROM pgmem.explain_logged_recall('demo', :fact_id);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.explain_logged_recall('demo', NULL);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL pgmem.scope = 'someone-else';
SELECT * FROM pgmem.explain_logged_recall('demo', :recall_id);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
ROLLBACK;
