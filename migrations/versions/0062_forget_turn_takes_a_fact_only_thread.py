"""forget_turn takes a thread its forgotten facts leave empty (functions only).

add_facts may tie a fact to a turn the scope does not hold, and creates the row of the thread the
fact names. forget_turn of that turn deleted the fact but dropped the thread row only when a turn
row went, so the thread, whose name is the caller's data, stayed with nothing in it; forget_fact
of the same fact takes it (0052). pgmem._forget_turn_rows now drops the thread, when nothing of it
remains, whenever a turn or a fact went (found by the forget and retention mutation review).

Only re-runnable definitions change (sql/idempotent/070_forget.sql).

Revision ID: 0062
Revises: 0061
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0062"
down_revision = "0061"
upgrade, downgrade = functions_only(revision)
