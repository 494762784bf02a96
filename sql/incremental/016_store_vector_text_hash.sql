-- 016: a field vector records the hash of the text it embeds (issue 26, item 5).
--
-- A LangGraph store with its own `embed` re-embedded every field text on every put, because
-- put_item dropped an item's vectors on replace. With text_hash, pgmem.item_vectors_current
-- can tell that an item's stored vectors are those of the texts a put sends (same fields, same
-- texts, same model), and put_item keeps them instead: a re-put of the same text embeds and
-- writes nothing. Nullable, no default: no rewrite of store_vector. A vector stored before
-- this revision has no hash, so it is never current: its item is embedded once more on its
-- next put, as before.
ALTER TABLE pgmem.store_vector ADD COLUMN text_hash bytea;
COMMENT ON COLUMN pgmem.store_vector.text_hash IS 'sha256 of the embedded text''s UTF-8 bytes (32 bytes), as the store sent it to pgmem.put_item_vectors; NULL for a vector stored before migration 0023. pgmem.item_vectors_current compares it with a put''s texts.';

-- put_item and put_item_vectors gain the fields' hashes (sql/idempotent/080_store.sql and
-- 081_store_search.sql define them again).
DROP FUNCTION IF EXISTS pgmem.put_item(text, text[], text, jsonb, text, double precision);
DROP FUNCTION IF EXISTS pgmem.put_item_vectors(text, text, text, text[], @VECTOR_SCHEMA@.vector[]);
