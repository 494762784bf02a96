-- Facts in psql: short sentences about a turn or a section, stored idempotently by content and
-- recalled per part like memory. e(i) is a unit vector near axis i.
CREATE FUNCTION pg_temp.e(i integer) RETURNS vector LANGUAGE sql AS $$
    SELECT l2_normalize(array_agg(CASE WHEN g = i THEN 1.0 WHEN g = i + 1 THEN 0.25 ELSE 0 END ORDER BY g)::real[]::vector)
    FROM generate_series(1, 384) AS g $$;

-- Three facts (two tied to a turn, one to a document section); ids of the new rows come back.
SELECT count(*) AS stored FROM pgmem.add_facts(
    scope => 'demo', model_id => 'psql-example',
    bodies => ARRAY['The staging deploy failed on Oct 15.', 'Biscuit and Juniper need boosters.', 'Deploys need DEPLOY_TOKEN.'],
    vectors => ARRAY[pg_temp.e(1), pg_temp.e(10), pg_temp.e(3)],
    thread_ids => ARRAY['ops', 'ops', NULL], turn_indexes => ARRAY[1, 2, NULL],
    sections => ARRAY[NULL, NULL, 'runbook.md#deploys']);

-- The same facts again, and one repeated inside the call: nothing new is stored.
SELECT count(*) AS stored FROM pgmem.add_facts('demo', 'psql-example',
    ARRAY['The staging deploy failed on Oct 15.', 'Deploys need DEPLOY_TOKEN.', 'Deploys need DEPLOY_TOKEN.'],
    ARRAY[pg_temp.e(1), pg_temp.e(3), pg_temp.e(3)], ARRAY['ops', NULL, NULL], ARRAY[1, NULL, NULL],
    ARRAY[NULL, 'runbook.md#deploys', 'runbook.md#deploys']);
SELECT count(*) AS facts FROM pgmem.fact WHERE scope_id = 'demo';

-- Two parts, each with its own group over the fact plane (seed floor: cosine 0.35).
SELECT part_no, rank, thread_id, turn_index, section, body, round(cosine::numeric, 3) AS cosine
  FROM pgmem.fact_recall('demo', ARRAY[pg_temp.e(1), pg_temp.e(10)], x => 2, floor => 0.35);

-- Errors name what was wrong.
\set SHOW_CONTEXT never
SELECT pgmem.add_facts('demo', 'psql-example', ARRAY[''], ARRAY[pg_temp.e(1)]);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT pgmem.add_facts('demo', 'psql-example', ARRAY['a', 'b'], ARRAY[pg_temp.e(1)]);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT pgmem.add_facts('demo', 'another-model', ARRAY['a'], ARRAY[pg_temp.e(1)]);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.fact_recall('demo', ARRAY[pg_temp.e(1)], floor => 2);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
