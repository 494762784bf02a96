-- pgmem in psql: store two turns, recall with two parts, explain, and the errors.
-- Vectors are built in SQL so the output is exact: e(i) is a unit vector near axis i.
CREATE FUNCTION pg_temp.e(i integer) RETURNS vector LANGUAGE sql AS $$
    SELECT l2_normalize(array_agg(CASE WHEN g = i THEN 1.0 WHEN g = i + 1 THEN 0.25 ELSE 0 END ORDER BY g)::real[]::vector)
    FROM generate_series(1, 384) AS g $$;

SELECT * FROM pgmem.put_turn(
    scope => 'demo', thread => 'ops', turn_index => 1, turn_time => '2026-10-15 16:40+00',
    messages => '[{"role": "user", "content": "The staging deploy failed."}]', content_hash => '\x01',
    model_id => 'psql-example', unit_kinds => ARRAY['user', 'assistant'], source_indexes => ARRAY[0, 1],
    labels => ARRAY['[Turn 1 · User · Oct 15, 4:40 PM]', '[Turn 1 · Assistant step 1 · Oct 15, 4:40 PM]'],
    bodies => ARRAY['The staging deploy failed.', 'DEPLOY_TOKEN goes in .env.local.'],
    vectors => ARRAY[pg_temp.e(1), pg_temp.e(2)]);

SELECT * FROM pgmem.put_turn(
    scope => 'demo', thread => 'ops', turn_index => 2, turn_time => '2026-10-18 08:30+00',
    messages => '[{"role": "user", "content": "My dogs Biscuit and Juniper need boosters."}]', content_hash => '\x02',
    model_id => 'psql-example', unit_kinds => ARRAY['user'], source_indexes => ARRAY[0],
    labels => ARRAY['[Turn 2 · User · Oct 18, 8:30 AM]'],
    bodies => ARRAY['My dogs Biscuit and Juniper need boosters.'],
    vectors => ARRAY[pg_temp.e(10)]);

-- The same turn again: nothing is written.
SELECT * FROM pgmem.put_turn(
    scope => 'demo', thread => 'ops', turn_index => 2, turn_time => '2026-10-18 08:30+00',
    messages => '[{"role": "user", "content": "My dogs Biscuit and Juniper need boosters."}]', content_hash => '\x02',
    model_id => 'psql-example', unit_kinds => ARRAY['user'], source_indexes => ARRAY[0],
    labels => ARRAY['[Turn 2 · User · Oct 18, 8:30 AM]'],
    bodies => ARRAY['My dogs Biscuit and Juniper need boosters.'],
    vectors => ARRAY[pg_temp.e(10)]);

-- Two parts, each with its own group; the floor keeps weak hits out.
SELECT part_no, rank, turn_index, label, round(cosine::numeric, 3) AS cosine, round(score::numeric, 3) AS score
  FROM pgmem.memory_recall('demo', ARRAY[pg_temp.e(1), pg_temp.e(10)], x => 2, floor => 0.2);

-- Why was a candidate cut?
SELECT part_no, candidate, round(cosine::numeric, 3) AS cosine, cosine_floor, verdict
  FROM pgmem.explain_recall('demo', ARRAY[pg_temp.e(10)], x => 1, floor => 0.2, show => 3);

-- Errors name what was wrong and carry SQLSTATEs.
\set SHOW_CONTEXT never
SELECT * FROM pgmem.memory_recall('demo', ARRAY[pg_temp.e(1)], x => 0);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.memory_recall('demo', ARRAY['[1,2,3]'::vector]);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.memory_recall(NULL, ARRAY[pg_temp.e(1)]);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.memory_recall('demo', ARRAY[pg_temp.e(1)], ARRAY['deploy'], mode => 'hybrid', rrf_k => -1);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.memory_recall('demo', ARRAY[pg_temp.e(1)], floor => 'NaN');
\echo SQLSTATE :LAST_ERROR_SQLSTATE
-- Query vectors must come from the model the scope's pieces were stored with.
SELECT * FROM pgmem.memory_recall('demo', ARRAY[pg_temp.e(1)], model_id => 'another-model');
\echo SQLSTATE :LAST_ERROR_SQLSTATE
