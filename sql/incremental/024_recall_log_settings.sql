-- 024: a logged recall keeps the recall settings its session set (pgmem.word_weight,
-- pgmem.time_weight, pgmem.ef_search, ...), so replay_logged_recall runs it under them, not
-- under the replaying session's. A nullable column without a default: no table rewrite.
ALTER TABLE pgmem.recall_log ADD COLUMN settings jsonb;
COMMENT ON COLUMN pgmem.recall_log.settings IS 'The recall settings the caller''s session had set when the recall was logged (name to value; {}: none); NULL: logged before 0057, unknown.';
