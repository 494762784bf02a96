"""An empty recall's reason knows since / until (functions only).

A memory recall whose since / until bounds kept no turn returned nothing, and its reason said
below_floor ("the scope holds turns, none close enough"): pgmem.empty_memory_recall_reason answers
bounds_empty then, and memory_recall's NOTICE and the Python Recall use it.

pgmem.empty_recall_reason answered filter_empty ("no turn has metadata containing [1]") for a filter
memory_recall refuses; it refuses it as memory_recall does (22023), and empty_memory_recall_reason
refuses reversed bounds.

explain_recall (and so explain_logged_recall) returned no rows and no word when there was no
candidate at all (a misspelt thread, a filter or bounds no turn meets): it raises memory_recall's
NOTICE saying why.

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0111
Revises: 0110
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0111"
down_revision = "0110"
upgrade, downgrade = functions_only(revision)
