"""explain_logged_recall says when a recall id is not in the scope's log (functions only).

It returned no rows for an id that was never logged, was another scope's, or had gone with a
turn it returned (forget_turn) or with log retention: the same answer as a logged recall that
finds no candidate now, so a person in psql could not tell the two apart. It now raises P0002
with a hint, and 22023 for an id below 1, as replay_logged_recall does.

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0068
Revises: 0067
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0068"
down_revision = "0067"
upgrade, downgrade = functions_only(revision)
