"""Hybrid recall finds each part's word candidates once, then joins them to their pieces
(`word_hits` and `ranked` are MATERIALIZED in pgmem.memory_recall). A scope written since the
table's last ANALYZE is estimated at one row, and the planner had put the piece join outside
the word search, running it once per piece of the scope: 47 s instead of 0.06 s for a 2-part
question on an 804-piece scope (docs/evaluation.md, section 10).

Only re-runnable definitions change (sql/idempotent); no table changes.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from pgmem.sqlfiles import functions_only

revision = "0008"
down_revision = "0007"
upgrade, downgrade = functions_only(revision)
