"""Red-team fixes in retention, re-embedding and documents (functions only).

apply_retention removed each expired turn through forget_turn, whose last step read the scope's
whole recall log for the rows that returned the turn: expired turns times log rows (2,000 turns
and 3,200 log rows took 42 s). The turn's rows now go through pgmem._forget_turn_rows (forget_turn
is it and then its log step) and the log is read once a scope: pgmem._forget_logs, every forget's
log step, takes many turns (and threads) at once; the same rows go.

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 075_retention.sql).

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0043"
down_revision = "0042"
upgrade, downgrade = functions_only(revision)
