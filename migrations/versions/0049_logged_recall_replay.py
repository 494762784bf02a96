"""A logged recall is explained inside its since / until bounds (functions only).

pgmem.explain_logged_recall replayed a logged recall through explain_recall with its thread and
metadata filter but not its since / until bounds, which the log keeps (0018): a bounded recall
was explained over every turn, listing as kept pieces the recall never searched. explain_recall
now takes since / until (the same filter as memory_recall's: turn_time >= since and < until, a
turn without a time in none) and explain_logged_recall passes the logged ones. The Python API
now logs a recall's metadata filter too (it never passed it to log_recall).

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0049
Revises: 0048
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0049"
down_revision = "0048"
upgrade, downgrade = functions_only(revision)
