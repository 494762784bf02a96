"""Every writer of several LangGraph store items locks them by key (functions only).

apply_retention and forget_document locked a scope's items sorted by their threads, while the
store's batches (and expire_items) lock them by key. An item whose key is too long to be read in
its thread has the thread item-sha256:<hex>, so two such items could come in opposite orders:
retention expiring two items and a batch putting both again each held one and waited for the
other, and the server ended retention with a deadlock (40P01), which a scheduled job does not
run again. Both now lock items by key, bytewise (COLLATE "C", the order of the store's Python
sort whatever the database's collation), as expire_items does.

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 075_retention.sql,
081_store_search.sql).

Revision ID: 0070
Revises: 0069
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0070"
down_revision = "0069"
upgrade, downgrade = functions_only(revision)
