-- Undo 024: logged recalls lose the settings of their session.
ALTER TABLE pgmem.recall_log DROP COLUMN settings;
