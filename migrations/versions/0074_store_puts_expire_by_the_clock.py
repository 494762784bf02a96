"""A store put judges an old item's expiry by the clock, as the store's reads do (functions only).

put_item compared the stored item's expires_at with now(), its transaction's start, while the
store's reads compare with clock_timestamp() (0072). An item that expired after the transaction
began, which the transaction's own reads no longer found, was still alive for its put: an
import's conditional put (unless_newer_than) kept it instead of writing the imported copy, and
the copy was lost when the expired item vanished; a plain put kept the expired item's
created_at instead of starting a new item.

Only re-runnable definitions change (sql/idempotent/080_store.sql).

Revision ID: 0074
Revises: 0073
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0074"
down_revision = "0073"
upgrade, downgrade = functions_only(revision)
