-- 007: the LangGraph store's TTL and field vectors (issue 28).
--
-- * store_item gets an expiry: ttl_minutes (the item's time to live, LangGraph's unit) and
--   expires_at (when it goes). Both NULL: the item never expires. An expired item is invisible
--   to reads at once; pgmem.expire_items / pgmem.sweep_expired_items remove it, with its turn,
--   pieces and recall-log rows, the way delete_item (and so a forget) removes them.
-- * store_vector holds one vector per indexed field of an item, for a store whose index config
--   names its own embedding (`embed`): PostgresStore's representation, any dimension, scored by
--   the config's distance_type in pgmem.store_search. A store on pgmem's own embedders keeps
--   using turns and pieces. New, empty table: no lock on existing rows beyond the foreign key's.
ALTER TABLE pgmem.store_item
    ADD COLUMN ttl_minutes double precision
        CONSTRAINT store_item_ttl_minutes_check CHECK (ttl_minutes > 0 AND ttl_minutes <= 52596000),
    ADD COLUMN expires_at timestamptz,
    ADD CONSTRAINT store_item_expiry_check CHECK ((ttl_minutes IS NULL) = (expires_at IS NULL));
CREATE INDEX store_item_expires ON pgmem.store_item (expires_at, scope_id) WHERE expires_at IS NOT NULL;
COMMENT ON COLUMN pgmem.store_item.ttl_minutes IS 'The item''s time to live in minutes (LangGraph''s ttl), at most 100 years; NULL: it never expires. A read with refresh moves expires_at to now() + ttl_minutes.';
COMMENT ON COLUMN pgmem.store_item.expires_at IS 'When the item expires: invisible to reads from then on, removed by pgmem.expire_items (the store''s sweeper) or pgmem.sweep_expired_items (pg_cron). NULL with ttl_minutes.';
COMMENT ON INDEX pgmem.store_item_expires IS 'Finds expired items (pgmem.sweep_expired_items, pgmem.expire_items).';

CREATE TABLE pgmem.store_vector (
    scope_id   text NOT NULL,
    item_key   text NOT NULL,
    field_no   integer NOT NULL CHECK (field_no >= 0),
    field_path text NOT NULL CHECK (length(field_path) BETWEEN 1 AND 1000),
    model_id   text NOT NULL CHECK (length(model_id) BETWEEN 1 AND 200),
    embedding  vector NOT NULL,
    PRIMARY KEY (scope_id, item_key, field_no),
    FOREIGN KEY (scope_id, item_key) REFERENCES pgmem.store_item (scope_id, item_key) ON DELETE CASCADE
);
COMMENT ON TABLE pgmem.store_vector IS 'One vector per indexed text of a LangGraph store item whose store embeds with its own model (index config `embed`): what pgmem.store_search scores. Goes with its item (ON DELETE CASCADE).';
COMMENT ON COLUMN pgmem.store_vector.scope_id IS 'Owning scope: the item''s.';
COMMENT ON COLUMN pgmem.store_vector.item_key IS 'The item''s key.';
COMMENT ON COLUMN pgmem.store_vector.field_no IS 'Position of the text among the item''s indexed texts (0-based).';
COMMENT ON COLUMN pgmem.store_vector.field_path IS 'The index path the text came from (LangGraph''s path syntax, e.g. $ or text or messages[*].content).';
COMMENT ON COLUMN pgmem.store_vector.model_id IS 'The model that made the vector; one model (and one dimension) per scope, checked by pgmem.put_item_vectors.';
COMMENT ON COLUMN pgmem.store_vector.embedding IS 'The text''s vector as the model returned it (any dimension, not normalised: inner_product scores see it raw).';

-- put_item gains a ttl (sql/idempotent/080_store.sql defines it again).
DROP FUNCTION IF EXISTS pgmem.put_item(text, text[], text, jsonb, text);
