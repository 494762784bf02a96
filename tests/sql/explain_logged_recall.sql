-- Explaining a past recall from psql alone: the recall log keeps the parts, their vectors, the
-- settings (metadata filter and time bounds included) and the results; explain_logged_recall explains it,
-- replay_logged_recall runs it again.
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

-- explain_logged_recall ranks by cosine; replay_logged_recall runs the recall itself again, with
-- its mode, time window, recency, filter and bounds. Turn 3 (Oct 20) says it again, closer.
SELECT status FROM pgmem.put_turn(
    scope => 'demo', thread => 'ops', turn_index => 3, turn_time => '2026-10-20 09:00+00',
    messages => '[{"role": "user", "content": "The staging deploy failed again."}]', content_hash => '\x03',
    model_id => 'psql-example', unit_kinds => ARRAY['user'], source_indexes => ARRAY[0],
    labels => ARRAY['[Turn 3 · User · Oct 20, 9:00 AM]'], bodies => ARRAY['The staging deploy failed again.'],
    vectors => ARRAY[pg_temp.e(1)], metadata => '{"channel": "voice"}');
-- A service asks about Oct 15 (a time window that boosts) in hybrid mode, and logs the hits it got.
WITH hits AS (
    SELECT * FROM pgmem.memory_recall('demo', ARRAY[pg_temp.e(1)], ARRAY['What failed on Oct 15?'], x => 2, floor => 0.2,
                                      mode => 'hybrid', time_from => '2026-10-15 00:00+00', time_to => '2026-10-16 00:00+00'))
SELECT pgmem.log_recall('demo', 'memory', 'What failed on Oct 15?', ARRAY['What failed on Oct 15?'], ARRAY[pg_temp.e(1)],
                        2, 0.2, NULL, 'hybrid',
                        jsonb_build_array(jsonb_build_object('part_no', 1, 'hits',
                            (SELECT jsonb_agg(to_jsonb(h) - 'part_no' ORDER BY h.rank) FROM hits h))),
                        time_from => '2026-10-15 00:00+00', time_to => '2026-10-16 00:00+00') AS hybrid_id \gset
-- By cosine alone, turn 3 is kept first:
SELECT candidate, label, round(cosine::numeric, 3) AS cosine, verdict
  FROM pgmem.explain_logged_recall('demo', :hybrid_id, show => 3);
-- The replay ranks as the caller got them: turn 1's pieces, inside the window.
SELECT part_no, rank, label, round(cosine::numeric, 3) AS cosine, logged_rank, change
  FROM pgmem.replay_logged_recall('demo', :hybrid_id);
-- A turn of Oct 15 stored since then: the replay shows what changed.
SELECT status FROM pgmem.put_turn(
    scope => 'demo', thread => 'ops', turn_index => 4, turn_time => '2026-10-15 20:00+00',
    messages => '[{"role": "user", "content": "The deploy token had expired."}]', content_hash => '\x04',
    model_id => 'psql-example', unit_kinds => ARRAY['user'], source_indexes => ARRAY[0],
    labels => ARRAY['[Turn 4 · User · Oct 15, 8:00 PM]'], bodies => ARRAY['The deploy token had expired.'],
    vectors => ARRAY[pg_temp.e(1)], metadata => '{"channel": "chat"}');
SELECT part_no, rank, label, round(cosine::numeric, 3) AS cosine, logged_rank, change
  FROM pgmem.replay_logged_recall('demo', :hybrid_id);

-- Errors. Both say when an id is not logged (or is another scope's): no rows, or an empty
-- replay, means nothing is found now.
\set SHOW_CONTEXT never
SELECT * FROM pgmem.explain_logged_recall('demo', 999999);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.replay_logged_recall('demo', 999999);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.explain_logged_recall('demo', 0);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT pgmem.log_recall('demo', 'fact', 'q', ARRAY['q'], ARRAY[pg_temp.e(1)], 1, 0.2, NULL, 'vector', '[]') AS fact_id \gset
SELECT * FROM pgmem.explain_logged_recall('demo', :fact_id);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.explain_logged_recall('demo', NULL);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.replay_logged_recall('demo', -1);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL pgmem.scope = 'someone-else';
SELECT * FROM pgmem.explain_logged_recall('demo', :recall_id);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SET LOCAL pgmem.scope = 'someone-else';
SELECT * FROM pgmem.replay_logged_recall('demo', :recall_id);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
ROLLBACK;
-- After a model change (what pgmem reembed does: stage the new model's vectors, then flip), a
-- recall logged under the old model is refused by both, in one line: its query vectors are the
-- old model's (since 0116; until then the new model's pieces were ranked with them).
SELECT pgmem.stage_vectors('demo', 'psql-example-2', array_agg(piece_id ORDER BY piece_id),
                           array_agg(raw_embedding ORDER BY piece_id)) AS staged
  FROM pgmem.piece WHERE scope_id = 'demo';
SELECT flipped FROM pgmem.reembed_flip('demo', 'psql-example-2', 384);
SELECT * FROM pgmem.replay_logged_recall('demo', :recall_id);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.explain_logged_recall('demo', :recall_id);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
