-- Undo 016: field vectors lose their text hashes. The functions that read or write them are
-- dropped for the older package's definitions (reapplied by its migrate), whose put_item drops
-- an item's vectors on every replace.
DROP FUNCTION IF EXISTS pgmem.store_vectors_current(text, text, text[], integer[], text[], bytea[]);
DROP FUNCTION IF EXISTS pgmem.put_item(text, text[], text, jsonb, text, double precision, text, text[], bytea[]);
DROP FUNCTION IF EXISTS pgmem.item_vectors_current(text, text, text, text[], bytea[]);
DROP FUNCTION IF EXISTS pgmem.put_item_vectors(text, text, text, text[], @VECTOR_SCHEMA@.vector[], bytea[]);
ALTER TABLE pgmem.store_vector DROP COLUMN text_hash;
