"""The store's reads hide an item once its expiry has passed when they read it (functions only).

store_get, store_list, store_search, the search through pieces and refresh_items compared
expires_at with now(), their transaction's start. A read whose transaction began (a search
embedding its query) before another client's put of an item committed, with a TTL short enough
that the item had expired by then, still returned the item, and a refresh could move its expiry
on. They now compare with clock_timestamp(): a row a read sees was committed before the read's
snapshot, so an item it returns had not expired when it was read.

Only re-runnable definitions change (sql/idempotent/081_store_search.sql).

Revision ID: 0072
Revises: 0071
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0072"
down_revision = "0071"
upgrade, downgrade = functions_only(revision)
