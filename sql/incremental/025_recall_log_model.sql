-- 025: a logged recall keeps the model of its query vectors (the scope's model when it was
-- logged), so a replay after a model change (reembed_flip) is refused in one line instead of
-- ranking the new model's pieces with the old model's vectors. A nullable column without a
-- default: no table rewrite.
ALTER TABLE pgmem.recall_log ADD COLUMN model_key smallint;
COMMENT ON COLUMN pgmem.recall_log.model_key IS 'The model of part_vectors (pgmem.embedding_model): the scope''s model of the plane when the recall was logged; NULL: logged before 0113 (or with no model bound), unknown.';
