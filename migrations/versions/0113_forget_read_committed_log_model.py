"""Forgets refuse REPEATABLE READ and SERIALIZABLE; a log makes no scope and keeps its model.

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

A logged recall replayed after the scope's model changed (explain_logged_recall,
replay_logged_recall) ranked the new model's pieces with the old model's query vectors: the
recall log had no model. log_recall now records the scope's model of the plane
(recall_log.model_key, sql/incremental/025_recall_log_model.sql: one nullable column, no rewrite;
a short ACCESS EXCLUSIVE lock on recall_log), and a replay of a row logged with another model
than the scope's now raises 22000 naming both. Rows logged before keep NULL (unknown) and replay
as before.

The functions are sql/idempotent/030_recall.sql, 070_forget.sql, 075_retention.sql.

Revision ID: 0113
Revises: 0112
Create Date: 2026-12-07
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0113"
down_revision = "0112"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/025_recall_log_model.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/025_recall_log_model.sql")
