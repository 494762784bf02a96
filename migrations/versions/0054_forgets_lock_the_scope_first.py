"""The forgets, retention and the TTL sweep hold the scope row first (functions only).

forget_thread, forget_turn and forget_fact (pgmem._lock_thread), forget_document, apply_retention
and expire_items locked a scope's store items, threads and turns without its row, while
forget_scope locks the row FOR UPDATE and then deletes the scope's pieces, threads and items: a
forget of a thread held rows forget_scope went on to delete, and a put into the scope in the same
transaction then waited for forget_scope's lock on the row (a deadlock, 40P01). Each now holds
the scope row FOR KEY SHARE first, as put_item and delete_item do (docs/architecture.md, "Lock
order"): a forget_scope in flight is waited for, or waits for them.

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 075_retention.sql,
081_store_search.sql).

Revision ID: 0054
Revises: 0053
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0054"
down_revision = "0053"
upgrade, downgrade = functions_only(revision)
