-- 010: a logged recall keeps its time arguments (time-aware recall, issue 29), so it can be
-- replayed as it ran: the window that boosted (time_from, time_to), the recency band and the
-- since / until bounds. Nullable columns without a default: no table rewrite.
ALTER TABLE pgmem.recall_log
    ADD COLUMN time_from timestamptz,
    ADD COLUMN time_to timestamptz,
    ADD COLUMN recency double precision,
    ADD COLUMN since timestamptz,
    ADD COLUMN until timestamptz;
COMMENT ON COLUMN pgmem.recall_log.time_from IS 'The time window that boosted (turn_time >= time_from); NULL: open or none.';
COMMENT ON COLUMN pgmem.recall_log.time_to IS 'The time window that boosted (turn_time < time_to); NULL: open or none.';
COMMENT ON COLUMN pgmem.recall_log.recency IS 'The recency band of the recall (cosine); NULL: the default of its time.';
COMMENT ON COLUMN pgmem.recall_log.since IS 'Only turns at or after this time were searched; NULL: no bound.';
COMMENT ON COLUMN pgmem.recall_log.until IS 'Only turns before this time were searched; NULL: no bound.';
