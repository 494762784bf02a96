-- Forgetting in psql: a turn, its facts and the logged recall that returned it; then a thread.
-- e(i) is a unit vector near axis i (as in recall.sql).
CREATE FUNCTION pg_temp.e(i integer) RETURNS vector LANGUAGE sql AS $$
    SELECT l2_normalize(array_agg(CASE WHEN g = i THEN 1.0 WHEN g = i + 1 THEN 0.25 ELSE 0 END ORDER BY g)::real[]::vector)
    FROM generate_series(1, 384) AS g $$;
-- A session works in one scope: the write functions and row-level security follow pgmem.scope.
SET pgmem.scope = 'demo';

SELECT * FROM pgmem.put_turn(
    scope => 'demo', thread => 'home', turn_index => 0, turn_time => '2026-10-18 08:30+00',
    messages => '[{"role": "user", "content": "My locker code is 4417."}]', content_hash => '\x01',
    model_id => 'psql-example', unit_kinds => ARRAY['user'], source_indexes => ARRAY[0],
    labels => ARRAY['[Turn 0 · User · Oct 18, 8:30 AM]'], bodies => ARRAY['My locker code is 4417.'],
    vectors => ARRAY[pg_temp.e(1)]);
SELECT * FROM pgmem.put_turn(
    scope => 'demo', thread => 'home', turn_index => 1, turn_time => '2026-10-18 08:35+00',
    messages => '[{"role": "user", "content": "The ferry leaves at 9:40."}]', content_hash => '\x02',
    model_id => 'psql-example', unit_kinds => ARRAY['user'], source_indexes => ARRAY[0],
    labels => ARRAY['[Turn 1 · User · Oct 18, 8:35 AM]'], bodies => ARRAY['The ferry leaves at 9:40.'],
    vectors => ARRAY[pg_temp.e(20)]);
SELECT count(*) AS facts FROM pgmem.add_facts('demo', 'psql-example', ARRAY['the locker code is 4417'],
    ARRAY[pg_temp.e(1)], thread_ids => ARRAY['home'], turn_indexes => ARRAY[0]);
-- A logged recall whose results hold the turn's text.
SELECT pgmem.log_recall('demo', 'memory', 'locker?', ARRAY['locker?'], ARRAY[pg_temp.e(1)], 5, 0.2, NULL, 'vector',
    (SELECT jsonb_agg(to_jsonb(h)) FROM pgmem.memory_recall('demo', ARRAY[pg_temp.e(1)], x => 1) h)) > 0 AS logged;

-- Forget turn 0: its piece, its fact and the logged recall go with it; the thread stays (turn 1).
SELECT * FROM pgmem.forget_turn('demo', 'home', 0);
SELECT part_no, turn_index, label FROM pgmem.memory_recall('demo', ARRAY[pg_temp.e(1)], x => 5, floor => -1);
SELECT count(*) AS facts FROM pgmem.fact WHERE scope_id = 'demo';
SELECT count(*) AS logged FROM pgmem.recall_log WHERE scope_id = 'demo';
-- Again: nothing left to forget, not an error.
SELECT * FROM pgmem.forget_turn('demo', 'home', 0);

-- A forget is bound to the transaction's scope.
\set SHOW_CONTEXT never
BEGIN;
SET LOCAL pgmem.scope = 'other';
SELECT * FROM pgmem.forget_thread('demo', 'home');
\echo SQLSTATE :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT * FROM pgmem.forget_turn('demo', 'home', NULL);
\echo SQLSTATE :LAST_ERROR_SQLSTATE

-- The whole thread, then the scope.
SELECT * FROM pgmem.forget_thread('demo', 'home');
SELECT * FROM pgmem.forget_scope('demo');
SELECT count(*) AS scopes FROM pgmem.scope WHERE scope_id = 'demo';
