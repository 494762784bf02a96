"""The word sample's check in id order (issue 26): pgmem._word_sample_valid reads the scope's
first pieces through the primary key, at most twice the sample's size, and counts the kind's
pieces by (scope_id, kind) only when the other kind's pieces come first. Counted as a whole,
the planner read every piece of the kind and checked its id: hybrid recall on the 1m store's
200,000-piece scope 71.37 -> 33.56 ms for one part, 194.5 -> 150.83 for eight; document search
1.03 to 1.12 times as long (docs/bench/recall-ab-0035*.txt). The same answer.

Only re-runnable definitions change (sql/idempotent/030_recall.sql); no table changes.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0035"
down_revision = "0034"
upgrade, downgrade = functions_only(revision)
