"""Forgets and retention refuse REPEATABLE READ and SERIALIZABLE (functions only).

A forget waits for the writers of what it forgets (the lock order), then deletes what they
wrote. Under REPEATABLE READ or SERIALIZABLE (a database or login whose
default_transaction_isolation says so) its snapshot was taken before that wait: a fact a writer
tied to the forgotten turn while forget_turn waited for it outlived the forget, the turn gone
(under SERIALIZABLE too when the writer ran READ COMMITTED, which SSI does not watch).
forget_turn, forget_thread, forget_fact, forget_document (and remove_document through it),
forget_scope and apply_retention now raise 25000 before anything changes, as reembed_flip does
(0106): pgmem._forget_read_committed.

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 075_retention.sql).

Revision ID: 0115
Revises: 0112
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0115"
down_revision = "0112"
upgrade, downgrade = functions_only(revision)
