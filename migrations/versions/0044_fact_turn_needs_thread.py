"""A fact's turn index needs its thread; the TTL sweep reads the recall log once (functions only).

add_facts stored a fact tied to a turn index without a thread: forget_turn, which removes the
facts of a thread's turn, could never reach it (only forget_fact or forget_scope could), and
no turn could show it. It is now a 22023 naming the entry, as Python's check_fact refuses it.

expire_items removed each expired store item through delete_item, whose last step read the
scope's whole recall log (items times log rows, as apply_retention did until 0043). It now
locks the items' threads, deletes each item's rows (pgmem._delete_item_rows) and reads the log
once (pgmem._forget_logs); delete_item and forget_thread are their rows and then that log step.

Only re-runnable definitions change (sql/idempotent/020_ingest.sql, 070_forget.sql, 080_store.sql,
081_store_search.sql).

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0044"
down_revision = "0043"
upgrade, downgrade = functions_only(revision)
