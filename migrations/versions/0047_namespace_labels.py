"""put_item refuses a namespace no store can read back (functions only).

pgmem.store_scope skips a NULL label and flattens a matrix, so put_item called in SQL with
ARRAY['a', NULL, 'b'] or '{{a,b}}' as the namespace of scope a/b passed its scope check and stored
that namespace, listed in the directory as a namespace PgmemStore cannot read back. It now takes a
one-dimensional list (from 1) of non-empty labels, as PgmemStore checks them, and refuses anything
else with 22023.

Only re-runnable definitions change (sql/idempotent/080_store.sql).

Revision ID: 0047
Revises: 0046
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0047"
down_revision = "0046"
upgrade, downgrade = functions_only(revision)
