"""Writes that wait for nothing they do not read (issue 26).

- pgmem.put_item takes keep_vectors. A caller that read an item's field vectors as current
  (pgmem.store_vectors_current, without a lock) and embeds nothing for it passes true; when a put
  committed since has changed them, put_item raises 40001 under the item's lock and the caller
  runs the transaction again. The caller then no longer waits for vectors_kept, so PgmemStore
  sends a batch's puts and vectors without waiting for any of them: a put of field vectors waits
  twice (its read, then its commit), not four times.
- pgmem.stored_turn_hashes reads the stored hashes of many threads' turns in one statement
  (pgmem.turn_hashes is its one-thread case): ingest reads a scope's at once, not a thread's at a
  time, and a LangGraph batch of items stored as pieces waits four times, whatever its size (its
  items' times read once, pgmem.store_item_times).

Only re-runnable definitions change (sql/idempotent/080_store.sql drops put_item's old signature).

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0038"
down_revision = "0037"
upgrade, downgrade = functions_only(revision)
