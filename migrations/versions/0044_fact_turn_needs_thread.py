"""A fact's turn index needs its thread (functions only).

add_facts stored a fact tied to a turn index without a thread: forget_turn, which removes the
facts of a thread's turn, could never reach it (only forget_fact or forget_scope could), and
no turn could show it. It is now a 22023 naming the entry, as Python's check_fact refuses it.

Only re-runnable definitions change (sql/idempotent/020_ingest.sql).

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0044"
down_revision = "0043"
upgrade, downgrade = functions_only(revision)
