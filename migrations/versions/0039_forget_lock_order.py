"""Forgets that never wait for each other in a cycle, and a store directory that never hides an item.

- Every delete of a scope's recall-log rows (pgmem._forget_logs, apply_retention's trim,
  forget_scope) first takes the scope's recall-log lock (pgmem._recall_log_lock, an advisory
  lock held to the end of the transaction). apply_retention deletes log rows one expiring turn
  at a time; a forget of another thread that deleted a row naming both threads then waited for a
  row retention had deleted before, while retention waited for that forget's row: a deadlock.
- forget_fact locks the fact's thread first, as every other forget does.
- A namespace leaves the store's directory with its scope's last item only when no put_item is
  in flight in the scope (pgmem._drop_empty_namespace takes the scope's directory lock,
  pgmem._store_directory_lock, exclusively without waiting; put_item holds it shared): a put of
  a new key in flight found the directory row and wrote none, and a delete of the last
  committed item deleted the row under it, leaving the new item out of every listing, search
  and sweep. expire_items removes an entry left without items.

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 075_retention.sql,
080_store.sql, 081_store_search.sql).

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0039"
down_revision = "0038"
upgrade, downgrade = functions_only(revision)
