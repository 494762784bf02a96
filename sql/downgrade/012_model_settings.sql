-- Undo 012: the recall functions' floors go back to constants with the older package's
-- definitions (reapplied by its migrate).
DROP FUNCTION IF EXISTS pgmem.scope_model_settings(text, text);
DROP FUNCTION IF EXISTS pgmem.model_settings(text);
DROP TABLE pgmem.model_setting;
