-- Undo 005: the namespace directory leaves row-level security and directories. A namespace
-- listed in several directories keeps one row.
DROP FUNCTION IF EXISTS pgmem.store_namespaces(text, text[], text[], integer, integer, integer);
DROP FUNCTION IF EXISTS pgmem.store_namespaces(text, text[], text[], integer, integer, integer, boolean);  -- 0040's
DROP FUNCTION IF EXISTS pgmem.check_store_directory(text, boolean);
DROP POLICY IF EXISTS directory_read ON pgmem.store_namespace;
DROP POLICY IF EXISTS directory_insert ON pgmem.store_namespace;
DROP POLICY IF EXISTS directory_delete ON pgmem.store_namespace;
ALTER TABLE pgmem.store_namespace NO FORCE ROW LEVEL SECURITY;
ALTER TABLE pgmem.store_namespace DISABLE ROW LEVEL SECURITY;
DELETE FROM pgmem.store_namespace n
 USING pgmem.store_namespace m
 WHERE m.namespace = n.namespace AND m.directory < n.directory;
DROP INDEX IF EXISTS pgmem.store_namespace_scope;
ALTER TABLE pgmem.store_namespace DROP CONSTRAINT store_namespace_pkey;
ALTER TABLE pgmem.store_namespace DROP COLUMN directory;
ALTER TABLE pgmem.store_namespace ADD CONSTRAINT store_namespace_pkey PRIMARY KEY (namespace);
ALTER TABLE pgmem.store_namespace ADD CONSTRAINT store_namespace_scope_name_key UNIQUE (scope_name);
COMMENT ON TABLE pgmem.store_namespace IS 'Directory of the LangGraph namespaces that hold store items, and their scopes (a reference table: not scoped). It shows namespace names, never items, to every role that may read pgmem tables.';
