-- 005: the LangGraph store's namespace directory under row-level security (issue 16).
--
-- Until now pgmem.store_namespace showed every namespace name to every pgmem role, so a service
-- bound to one scope could list the namespaces of every other tenant. Each entry now belongs to
-- a directory, named by the store that wrote it (PgmemStore(directory=...), 'default' unless
-- given), and row-level security (policies in sql/idempotent/080_store.sql) shows a row only to
-- a transaction that asked for its directory (pgmem.store_directory, set like pgmem.scope) or
-- that is inside the namespace's own scope. The namespaces stored before this revision were
-- written by stores without a directory name: they go to 'default', where those stores list them.

ALTER TABLE pgmem.store_namespace ADD COLUMN directory text NOT NULL DEFAULT 'default'
    CONSTRAINT store_namespace_directory_check CHECK (length(directory) BETWEEN 1 AND 200);
ALTER TABLE pgmem.store_namespace ALTER COLUMN directory DROP DEFAULT;
ALTER TABLE pgmem.store_namespace DROP CONSTRAINT store_namespace_pkey;
ALTER TABLE pgmem.store_namespace DROP CONSTRAINT store_namespace_scope_name_key;
-- A namespace may be listed in several directories (two stores writing one namespace);
-- once per directory.
ALTER TABLE pgmem.store_namespace ADD CONSTRAINT store_namespace_pkey PRIMARY KEY (directory, namespace);
CREATE INDEX store_namespace_scope ON pgmem.store_namespace (scope_name);
ALTER TABLE pgmem.store_namespace ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgmem.store_namespace FORCE ROW LEVEL SECURITY;

COMMENT ON TABLE pgmem.store_namespace IS 'Directories of the LangGraph namespaces that hold store items, and their scopes (not scoped: a namespace is listed once per directory). Row-level security shows a row only inside its directory (pgmem.store_directory) or inside the namespace''s own scope (pgmem.scope).';
COMMENT ON COLUMN pgmem.store_namespace.directory IS 'The directory that lists the namespace: the name a PgmemStore was constructed with (''default'' unless given). Rows stored before revision 0006 are in ''default''.';
COMMENT ON INDEX pgmem.store_namespace_scope IS 'Finds a scope''s entries in every directory (delete_item, forget_scope).';

-- The listing function now names its directory (sql/idempotent/080_store.sql defines it again).
DROP FUNCTION IF EXISTS pgmem.store_namespaces(text[], text[], integer, integer, integer);
