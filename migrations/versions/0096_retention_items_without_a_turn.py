"""Retention ages the LangGraph store items without a turn too (review rt60; functions only).

keep_days removes the store items not put again within that many days (docs/operations.md), but
pgmem.apply_retention aged turns only: an indexed item (its thread's turn 0) went, while a plain
key-value item (put with index=False) or one a store with its own embed indexes with field
vectors (neither has a turn) outlived every keep_days, its value and vectors with it. Such an
item is now removed as expire_items removes an item (locked in the same key order as the items
of expiring threads, read again under the lock, remembered in pgmem.store_tombstone, its
namespace leaving the directories with its last item), reported in a NOTICE; the result columns
do not change. tests/test_retention.py replays it (before: both items kept, after: removed).

Only re-runnable definitions change (sql/idempotent/075_retention.sql).

Revision ID: 0096
Revises: 0095
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0096"
down_revision = "0095"
upgrade, downgrade = functions_only(revision)
