"""Forgets refuse REPEATABLE READ and SERIALIZABLE; a log makes no scope (functions only).

A forget waits for the writers of what it forgets (the lock order), then deletes what they
wrote. Under REPEATABLE READ or SERIALIZABLE (a database or login whose
default_transaction_isolation says so) its snapshot was taken before that wait: a fact a writer
tied to the forgotten turn while forget_turn waited for it outlived the forget, the turn gone
(under SERIALIZABLE too when the writer ran READ COMMITTED, which SSI does not watch).
forget_turn, forget_thread, forget_fact, forget_document (and remove_document through it),
forget_scope and apply_retention now raise 25000 before anything changes, as reembed_flip does
(0106): pgmem._forget_read_committed.

log_recall inserted the scope's row when there was none, so `pgmem recall --log` of a misspelt
scope left that scope behind (and a log written while its scope was forgotten made it again). A
scope with no row is not made for a log now: nothing is logged, NULL (pgmem._lock_scope).

The functions are sql/idempotent/030_recall.sql, 070_forget.sql, 075_retention.sql.

Revision ID: 0113
Revises: 0112
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0113"
down_revision = "0112"
branch_labels = None
depends_on = None
upgrade, downgrade = functions_only(revision)
