"""A thread that goes with its last turn takes the recalls filtered to it (functions only).

forget_thread deletes the logged recalls filtered to the thread. forget_turn of the thread's
last turn, and apply_retention removing it, dropped the thread row but kept those recalls (a
recall that returned none of the turn's pieces named nothing to match), with the thread's name
and their messages. Both now pass such a thread to pgmem._forget_logs as a whole thread (found
by the forget and retention mutation review).

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 075_retention.sql).

Revision ID: 0063
Revises: 0062
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0063"
down_revision = "0062"
upgrade, downgrade = functions_only(revision)
