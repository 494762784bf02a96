-- Undo 003: the LangGraph store's tables and its functions (sql/idempotent/080_store.sql).
-- The turns of indexed items stay (threads named item:<key>); pgmem.forget_thread removes them.
DROP FUNCTION IF EXISTS pgmem.put_item(text, text[], text, jsonb, text);
DROP FUNCTION IF EXISTS pgmem.delete_item(text, text);
DROP FUNCTION IF EXISTS pgmem.store_namespaces(text[], text[], integer, integer, integer);
DROP FUNCTION IF EXISTS pgmem.store_scope(text[]);
DROP TABLE IF EXISTS pgmem.store_namespace;
DROP TABLE IF EXISTS pgmem.store_item;
