-- 023: a deleted LangGraph store item is remembered for a while, so an import cannot bring it
-- back. import_postgres_store copies a PostgresStore's items into PgmemStore; an item the
-- application deleted in pgmem (delete_item, or a forget of the item's thread) after the
-- source's copy was last written was imported again by the next page or the next run, since
-- nothing said it had ever been there. A conditional put (put_item's unless_newer_than) now
-- skips a key deleted after that time, and a namespace whose scope was forgotten after it
-- (forget_scope: the store's items go with the scope row, and so would their tombstones). Only
-- hashes are kept, with the time of the delete, for 30 days (pgmem._note_deleted_items and
-- forget_scope remove older ones). No foreign key to pgmem.scope: a key deleted before its
-- namespace stored anything is remembered too, without a scope row (forget_scope deletes the
-- scope's records itself). Locks: none on an existing table.
CREATE TABLE pgmem.store_tombstone (
    scope_id   text NOT NULL,
    key_hash   bytea NOT NULL CHECK (length(key_hash) = 32),
    deleted_at timestamptz NOT NULL,
    PRIMARY KEY (scope_id, key_hash)
);
CREATE INDEX store_tombstone_deleted ON pgmem.store_tombstone (scope_id, deleted_at);
COMMENT ON TABLE pgmem.store_tombstone IS
'A LangGraph store item deleted in its scope (delete_item, or a forget of its thread), kept 30 days so that an import of an older copy (put_item''s unless_newer_than) does not write it again. Holds no value and no key: the sha256 of the key and the time.';
COMMENT ON COLUMN pgmem.store_tombstone.scope_id IS 'Owning scope (the item''s namespace, pgmem.store_scope).';
COMMENT ON COLUMN pgmem.store_tombstone.key_hash IS 'sha256 of the item''s key (UTF-8): the key itself is not kept.';
COMMENT ON COLUMN pgmem.store_tombstone.deleted_at IS 'When the item was last deleted (the transaction''s time).';

-- A forgotten scope outlives its row here: no scope_id (and so no foreign key, no row-level
-- security); pgmem_app and pgmem_reader may not read it (900_grants.sql), only the definer
-- functions that write and check it.
CREATE TABLE pgmem.forgotten_scope (
    scope_hash   bytea PRIMARY KEY CHECK (length(scope_hash) = 32),
    forgotten_at timestamptz NOT NULL
);
CREATE INDEX forgotten_scope_at ON pgmem.forgotten_scope (forgotten_at);
COMMENT ON TABLE pgmem.forgotten_scope IS
'A scope forgotten (forget_scope), kept 30 days so that an import of an older copy of its LangGraph store items (put_item''s unless_newer_than) does not write them again. Holds the sha256 of the scope and the time, never the scope''s name; readable by neither pgmem_app nor pgmem_reader.';
COMMENT ON COLUMN pgmem.forgotten_scope.scope_hash IS 'sha256 of the scope (UTF-8): the name itself is not kept.';
COMMENT ON COLUMN pgmem.forgotten_scope.forgotten_at IS 'When the scope was last forgotten (the transaction''s time).';
