-- Undo 010: logged recalls lose their time arguments; log_recall with them goes (the
-- re-runnable set of the revision upgraded to defines it again).
DROP FUNCTION IF EXISTS pgmem.log_recall(text, text, text, text[], @VECTOR_SCHEMA@.vector[], integer, double precision, text, text, jsonb, jsonb,
                                         timestamptz, timestamptz, double precision, timestamptz, timestamptz);
ALTER TABLE pgmem.recall_log
    DROP COLUMN until,
    DROP COLUMN since,
    DROP COLUMN recency,
    DROP COLUMN time_to,
    DROP COLUMN time_from;
