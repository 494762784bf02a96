-- Documents in psql: a Markdown file stored as chunks with derived search units, searched per
-- part; a hit returns the whole chunk with the matched unit's span. e(i): a unit vector near axis i.
CREATE FUNCTION pg_temp.e(i integer) RETURNS vector LANGUAGE sql AS $$
    SELECT l2_normalize(array_agg(CASE WHEN g = i THEN 1.0 WHEN g = i + 1 THEN 0.25 ELSE 0 END ORDER BY g)::real[]::vector)
    FROM generate_series(1, 384) AS g $$;

-- Two chunks: "Runbook > Deploys" (a heading unit, a prose unit, a code unit) and
-- "Runbook > Rollback" (one prose unit). unit_chunks index chunk_bodies (0-based); spans are
-- character offsets into the chunk body.
SELECT * FROM pgmem.put_document(
    scope => 'demo', document_id => 'runbook.md', title => 'Runbook',
    body => E'# Runbook\n## Deploys\nSet DEPLOY_TOKEN first.\n```\nmake deploy\n```\n## Rollback\nRun make rollback.\n',
    content_hash => '\x0a', model_id => 'psql-example',
    chunk_heading_paths => '[["Runbook", "Deploys"], ["Runbook", "Rollback"]]',
    chunk_bodies => ARRAY[E'## Deploys\nSet DEPLOY_TOKEN first.\n```\nmake deploy\n```', E'## Rollback\nRun make rollback.'],
    unit_chunks => ARRAY[0, 0, 0, 1], unit_kinds => ARRAY['heading', 'prose', 'code', 'prose'],
    unit_indexes => ARRAY[0, 1, 2, 0], span_starts => ARRAY[0, 11, 35, 12], span_ends => ARRAY[10, 34, 54, 30],
    labels => ARRAY['Runbook > Deploys', 'Runbook > Deploys', 'Runbook > Deploys', 'Runbook > Rollback'],
    bodies => ARRAY['Deploys', 'Set DEPLOY_TOKEN first.', 'make deploy', 'Run make rollback.'],
    vectors => ARRAY[pg_temp.e(20), pg_temp.e(21), pg_temp.e(23), pg_temp.e(30)]);

-- Two parts: one near the code unit, one near the rollback prose. Each chunk comes back whole,
-- once per part, with the kind and span of its best unit.
SELECT part_no, rank, document_id, heading_path, unit_kind, span_start, span_end,
       substr(chunk_body, span_start + 1, span_end - span_start) AS matched, round(cosine::numeric, 3) AS cosine
  FROM pgmem.document_search('demo', ARRAY[pg_temp.e(23), pg_temp.e(30)], x => 2, floor => 0.2);

-- Memory recall never returns document units (they share the plane).
SELECT count(*) AS memory_hits FROM pgmem.memory_recall('demo', ARRAY[pg_temp.e(23)], floor => -1);

-- Forgetting the document removes its chunks and units.
SELECT * FROM pgmem.forget_document('demo', 'runbook.md');
SELECT count(*) AS hits FROM pgmem.document_search('demo', ARRAY[pg_temp.e(23)], floor => -1);

-- Errors.
\set SHOW_CONTEXT never
SELECT * FROM pgmem.document_search('demo', ARRAY[pg_temp.e(23)], x => 0);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM pgmem.put_document('demo', 'bad.md', 'Bad', 'x', '\x0b', 'psql-example', '[["Bad"]]', ARRAY['x'],
    ARRAY[5], ARRAY['prose'], ARRAY[0], ARRAY[0], ARRAY[1], ARRAY['Bad'], ARRAY['x'], ARRAY[pg_temp.e(1)]);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
