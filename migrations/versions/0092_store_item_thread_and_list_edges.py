"""The LangGraph store's SQL edges (review rt54; functions only).

- put_item attached an indexed item to a conversation of its scope that had the item's thread
  name (item:<key>, written by put_turn or add_facts): the item's turn replaced the
  conversation's turn 0, a search for the conversation's words returned the item, and a delete
  or expiry of the item forgot the whole conversation. put_item claims the thread now
  (pgmem._claim_item_thread, inserting its row under the item row's lock) and, when a
  conversation holds it, gives the item item-sha256:<hex of the key> (then :1, :2, ...); the
  store reads the thread from the item's row for its turn (no function's result columns change).
  An app older than 0092 still names the turn's thread item:<key> itself: while it runs on the
  new schema, an item whose name a conversation holds gets its turn written into that
  conversation again (as before 0092), and the item's search misses it; roll the app out.
- A thread another item holds is refused in one line naming that item (23505), on the update
  path too, where the raw unique violation of store_item_scope_id_thread_id_key surfaced.
- The store's listings page as PostgresStore's LIMIT %s OFFSET %s: lim NULL is every row, off
  NULL is 0, a negative one is refused in one line (22023). store_list took a NULL or negative
  lim as 0 (nothing, silently) where store_namespaces took NULL as every row; store_namespaces'
  negative lim was Postgres's bare error; store_search refused NULL, and lim + off near 2^31
  overflowed.
- An expiry is a delete at expires_at: expire_items (and so sweep_expired_items) remembers the
  keys it removes in pgmem.store_tombstone at their expires_at, as delete_item remembers a
  delete, and put_item's conditional put (an import's unless_newer_than) does not write a copy
  older than the expiry over an expired row either. Before, a copy older than the expiry
  brought the item back, swept or not.

Only re-runnable definitions change (sql/idempotent/080_store.sql, 081_store_search.sql).

Revision ID: 0092
Revises: 0091
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0092"
down_revision = "0091"
upgrade, downgrade = functions_only(revision)
