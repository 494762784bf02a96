-- Undo 023: deleted store items and forgotten scopes are no longer remembered.
DROP FUNCTION IF EXISTS pgmem._note_deleted_items(text, text[]);
DROP FUNCTION IF EXISTS pgmem._store_key_lock(text, text);
DROP TABLE pgmem.store_tombstone;
DROP TABLE pgmem.forgotten_scope;
