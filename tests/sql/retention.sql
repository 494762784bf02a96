-- Retention in psql: a scope keeps 30 days of turns and its last 2 recall-log rows;
-- apply_retention (run by the DBA, here a superuser) removes the rest through forget_turn.
CREATE FUNCTION pg_temp.e(i integer) RETURNS vector LANGUAGE sql AS $$
    SELECT l2_normalize(array_agg(CASE WHEN g = i THEN 1.0 WHEN g = i + 1 THEN 0.25 ELSE 0 END ORDER BY g)::real[]::vector)
    FROM generate_series(1, 384) AS g $$;
CREATE FUNCTION pg_temp.put(turn integer, age interval) RETURNS text LANGUAGE sql AS $$
    SELECT (pgmem.put_turn(scope => 'demo', thread => 'ops', turn_index => turn, turn_time => now() - age,
        messages => '[]', content_hash => int4send(turn), model_id => 'psql-example',
        unit_kinds => ARRAY['user'], source_indexes => ARRAY[0], labels => ARRAY[format('[Turn %s · User]', turn)],
        bodies => ARRAY[format('turn %s, %s old', turn, age)], vectors => ARRAY[pg_temp.e(turn + 1)])).status $$;

SELECT pg_temp.put(0, '60 days'), pg_temp.put(1, '31 days'), pg_temp.put(2, '29 days'), pg_temp.put(3, '1 day');
SELECT pgmem.log_recall('demo', 'memory', 'q', ARRAY['q'], ARRAY[pg_temp.e(50)], 5, 0.2, NULL, 'vector', '[]')
  FROM generate_series(1, 4) \g /dev/null
SELECT scope_id, keep_days, keep_turns, log_keep_days, log_keep_rows
  FROM pgmem.set_retention('demo', keep_days => 30, log_keep_rows => 2);
SELECT scope_id, keep_days, log_keep_rows, applied_at IS NULL AS never_applied FROM pgmem.get_retention('demo');

SELECT * FROM pgmem.apply_retention();
SELECT turn_index, body FROM pgmem.memory_recall('demo', ARRAY[pg_temp.e(50)], x => 10, floor => -1) ORDER BY turn_index;
SELECT count(*) AS recall_log_rows FROM pgmem.recall_log WHERE scope_id = 'demo';
SELECT * FROM pgmem.apply_retention();   -- nothing left to remove

-- Errors.
\set SHOW_CONTEXT never
SELECT * FROM pgmem.set_retention('demo', keep_days => 0);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL pgmem.scope = 'someone-else';
SELECT * FROM pgmem.set_retention('demo', keep_days => 7);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
ROLLBACK;
