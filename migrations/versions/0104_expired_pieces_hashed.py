"""_memory_candidates leaves an expired item's pieces out through a hashed lookup, not a scan of them (functions only).

Since 0100 each candidate path of `pgmem._memory_candidates` left out the pieces of expired,
unswept store items with "piece_id <> ALL (gone)". Its statements keep a generic plan for the
connection, where the array is a parameter, and a parameter's array is compared element by
element: every piece of the scope against every expired piece, once a part. A scope whose
expired items are not swept (no sweeper running) made each recall slower with every item that
expired. The statements now say NOT IN a subquery of the array, which the executor hashes once.
The same rows.

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0104
Revises: 0103
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0104"
down_revision = "0103"
upgrade, downgrade = functions_only(revision)
