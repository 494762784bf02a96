"""An expired store item put again before the sweep takes its recall-log rows, as the sweep does (functions only).

An expiry is a delete at expires_at (0092), and put_item makes an expired item put again a new
item (its created_at restarts), but the recall-log rows that had returned the expired value were
removed only by the sweep (expire_items): a put of the key before the sweep kept them, and the
expired text stayed in pgmem.recall_log for as long as the log was kept. put_item now forgets
them, after locking the item's thread (the lock order: item, thread, recall log); a live item
put again keeps them, as an edited turn does.

Only re-runnable definitions change (sql/idempotent/080_store.sql).

Revision ID: 0102
Revises: 0101
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0102"
down_revision = "0101"
upgrade, downgrade = functions_only(revision)
