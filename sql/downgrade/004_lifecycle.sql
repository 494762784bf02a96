-- Undo 004: turn metadata, retention settings, the recall log's metadata filter.
-- The functions whose signatures name the retention table go first; the other functions of
-- sql/idempotent keep their metadata parameters until the next upgrade reapplies them.
DROP FUNCTION IF EXISTS pgmem.apply_retention();
DROP FUNCTION IF EXISTS pgmem.set_retention(text, integer, integer, integer, integer);
DROP FUNCTION IF EXISTS pgmem.get_retention(text);
DROP TABLE IF EXISTS pgmem.retention;
DROP INDEX IF EXISTS pgmem.recall_log_created_idx;
ALTER TABLE pgmem.recall_log DROP COLUMN IF EXISTS metadata_filter;
DROP INDEX IF EXISTS pgmem.turn_metadata_idx;
ALTER TABLE pgmem.turn DROP COLUMN IF EXISTS metadata;
