"""A store put that waits for nothing it does not read (issue 26): pgmem.put_item takes
keep_vectors. A caller that read an item's field vectors as current (pgmem.store_vectors_current,
without a lock) and embeds nothing for it passes true; when a put committed since has changed
them, put_item raises 40001 under the item's lock and the caller runs the transaction again. The
caller then no longer waits for vectors_kept, so PgmemStore sends a batch's puts and vectors
without waiting for any of them: a put waits twice (its read, then its commit), not four times.

Only re-runnable definitions change (sql/idempotent/080_store.sql drops the old signature).

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0038"
down_revision = "0037"
upgrade, downgrade = functions_only(revision)
