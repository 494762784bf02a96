"""Index maintenance finishes a rebuild a stopped run left half done (functions only).

A rebuild is three statements (create `<index>_rebuild`, drop `<index>`, rename). A run stopped
between the drop and the rename (killed, or its session lost) left the scope only the twin,
which recall does not use (it looks the scope's index up by its name): the scope was searched
exactly, and the next plan built a new index from nothing and dropped the valid twin. The plan
renames the twin now.

Only re-runnable definitions change (sql/idempotent/060_indexes.sql).

Revision ID: 0112
Revises: 0111
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0112"
down_revision = "0111"
upgrade, downgrade = functions_only(revision)
