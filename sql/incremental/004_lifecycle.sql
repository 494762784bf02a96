-- 004: memory lifecycle (issue 15). Run once, after 003.
--
-- 1. Turn metadata: a small JSON object per turn (e.g. {"channel": "voice"}), stored once on
--    the turn row, that memory_recall filters on by containment (metadata @> filter). A GIN
--    index (jsonb_path_ops: containment only, smaller) finds a scope's matching turns.
-- 2. Retention: one row per scope that has a retention setting (pgmem.set_retention), applied
--    by pgmem.apply_retention() (sql/idempotent/075_retention.sql).
-- 3. The recall log keeps the metadata filter of a logged recall, so explain_logged_recall
--    replays it with the same filter, and gets an index for trimming by age.

-- The default is a constant: adding the column rewrites nothing. The check is added NOT VALID
-- and validated afterwards, so existing rows ('{}') are scanned without blocking writes.
ALTER TABLE pgmem.turn ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE pgmem.turn ADD CONSTRAINT turn_metadata_object
    CHECK (jsonb_typeof(metadata) = 'object' AND octet_length(metadata::text) <= 4096) NOT VALID;
ALTER TABLE pgmem.turn VALIDATE CONSTRAINT turn_metadata_object;
COMMENT ON COLUMN pgmem.turn.metadata IS 'Caller''s metadata of the turn: a JSON object of at most 4,096 bytes as text (e.g. {"channel": "voice", "project": "atlas"}); memory_recall(metadata_filter => ...) keeps the pieces of turns whose metadata contains the filter.';
CREATE INDEX turn_metadata_idx ON pgmem.turn USING gin (metadata jsonb_path_ops);

CREATE TABLE pgmem.retention (
    scope_id      text PRIMARY KEY REFERENCES pgmem.scope (scope_id) ON DELETE CASCADE,
    keep_days     integer CHECK (keep_days BETWEEN 1 AND 36500),
    keep_turns    integer CHECK (keep_turns BETWEEN 1 AND 1000000000),
    log_keep_days integer CHECK (log_keep_days BETWEEN 1 AND 36500),
    log_keep_rows integer CHECK (log_keep_rows BETWEEN 1 AND 1000000000),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    applied_at    timestamptz,
    CHECK (num_nonnulls(keep_days, keep_turns, log_keep_days, log_keep_rows) > 0)
);
COMMENT ON TABLE pgmem.retention IS 'Retention setting of a scope (pgmem.set_retention), applied by pgmem.apply_retention(): a scope without a row keeps everything.';
COMMENT ON COLUMN pgmem.retention.scope_id IS 'The scope the setting applies to.';
COMMENT ON COLUMN pgmem.retention.keep_days IS 'Turns older than this many days go (age from turn_time, or ingested_at when turn_time is NULL); NULL: no age limit.';
COMMENT ON COLUMN pgmem.retention.keep_turns IS 'Only the last this-many turns of each thread (highest turn_index) are kept; NULL: no count limit.';
COMMENT ON COLUMN pgmem.retention.log_keep_days IS 'Recall-log rows older than this many days go; NULL: no age limit.';
COMMENT ON COLUMN pgmem.retention.log_keep_rows IS 'Only the newest this-many recall-log rows of the scope are kept; NULL: no row limit.';
COMMENT ON COLUMN pgmem.retention.updated_at IS 'When the setting was last changed.';
COMMENT ON COLUMN pgmem.retention.applied_at IS 'When pgmem.apply_retention() last applied it.';

ALTER TABLE pgmem.recall_log ADD COLUMN metadata_filter jsonb;
COMMENT ON COLUMN pgmem.recall_log.metadata_filter IS 'Metadata filter of the recall (turn metadata @> filter), if any.';
CREATE INDEX recall_log_created_idx ON pgmem.recall_log (scope_id, created_at);
