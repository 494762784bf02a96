-- Undo 007: items lose their expiry (none expires any more) and field vectors (a store with its
-- own `embed` must put its items again to search them).
DROP FUNCTION IF EXISTS pgmem.sweep_expired_items(integer);
DROP FUNCTION IF EXISTS pgmem.expire_items(text, integer);
DROP FUNCTION IF EXISTS pgmem.refresh_items(text, text[]);
DROP FUNCTION IF EXISTS pgmem.store_search(text, @VECTOR_SCHEMA@.vector, text, text, jsonb, integer, integer);
DROP FUNCTION IF EXISTS pgmem.store_list(text, jsonb, integer, integer);
DROP FUNCTION IF EXISTS pgmem.store_get(text, text);
DROP FUNCTION IF EXISTS pgmem.store_vector_model(text);
DROP FUNCTION IF EXISTS pgmem.put_item_vectors(text, text, text, text[], @VECTOR_SCHEMA@.vector[]);
DROP FUNCTION IF EXISTS pgmem.store_filter_match(jsonb, jsonb);
DROP FUNCTION IF EXISTS pgmem.put_item(text, text[], text, jsonb, text, double precision);
DROP POLICY IF EXISTS maintenance_read ON pgmem.store_item;
DROP POLICY IF EXISTS maintenance_read ON pgmem.store_namespace;  -- 0084's, for the sweep
DROP TABLE pgmem.store_vector;
DROP INDEX pgmem.store_item_expires;
ALTER TABLE pgmem.store_item DROP CONSTRAINT store_item_expiry_check;
ALTER TABLE pgmem.store_item DROP COLUMN expires_at;
ALTER TABLE pgmem.store_item DROP COLUMN ttl_minutes;
