-- Undo 025: logged recalls lose the model of their query vectors.
ALTER TABLE pgmem.recall_log DROP COLUMN model_key;
