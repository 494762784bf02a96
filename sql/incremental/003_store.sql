-- 003: the key-value side of the LangGraph store (pgmem.integrations.langgraph.PgmemStore).
--
-- A LangGraph namespace maps to one scope (pgmem.store_scope); an item is a row of
-- store_item in that scope. An indexed item is also stored as a turn (thread store_item.thread_id,
-- turn 0) through the one write pipeline (put_turn), so its text is pieced, labelled and
-- blended like any turn and recall finds it; a plain key-value item has no turn.
-- store_namespace is the directory of namespaces that hold items: list_namespaces and a search
-- over a namespace prefix read it, since each namespace's rows are visible only inside its scope.

CREATE TABLE pgmem.store_item (
    scope_id   text NOT NULL REFERENCES pgmem.scope (scope_id) ON DELETE CASCADE,
    item_key   text NOT NULL CHECK (length(item_key) <= 1000),
    namespace  text[] NOT NULL CHECK (cardinality(namespace) >= 1),
    value      jsonb NOT NULL CHECK (jsonb_typeof(value) = 'object'),
    thread_id  text CHECK (length(thread_id) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope_id, item_key),
    UNIQUE (scope_id, thread_id)
);
CREATE INDEX store_item_updated ON pgmem.store_item (scope_id, updated_at DESC);
COMMENT ON TABLE pgmem.store_item IS 'An item of a LangGraph store (PgmemStore): a JSON value under a key in a namespace; the namespace is the scope.';
COMMENT ON COLUMN pgmem.store_item.scope_id IS 'Owning scope: pgmem.store_scope(namespace).';
COMMENT ON COLUMN pgmem.store_item.item_key IS 'The item''s key, unique in its namespace (at most 1,000 characters).';
COMMENT ON COLUMN pgmem.store_item.namespace IS 'The LangGraph namespace tuple, as given.';
COMMENT ON COLUMN pgmem.store_item.value IS 'The item''s value (a JSON object): what get, list and search return; filters match it with @>.';
COMMENT ON COLUMN pgmem.store_item.thread_id IS 'Thread of the item''s turn (turn 0) when the item is indexed for search; NULL for a plain key-value item.';
COMMENT ON COLUMN pgmem.store_item.created_at IS 'When the key was first put (the time in its pieces'' labels).';
COMMENT ON COLUMN pgmem.store_item.updated_at IS 'When the value was last put.';

CREATE TABLE pgmem.store_namespace (
    namespace  text[] PRIMARY KEY CHECK (cardinality(namespace) >= 1),
    scope_name text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE pgmem.store_namespace IS 'Directory of the LangGraph namespaces that hold store items, and their scopes (a reference table: not scoped). It shows namespace names, never items, to every role that may read pgmem tables.';
COMMENT ON COLUMN pgmem.store_namespace.namespace IS 'A namespace with at least one item.';
COMMENT ON COLUMN pgmem.store_namespace.scope_name IS 'Its scope, pgmem.store_scope(namespace).';
COMMENT ON COLUMN pgmem.store_namespace.created_at IS 'When its first item was put.';
