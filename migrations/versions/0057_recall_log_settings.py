"""A logged recall keeps its session's recall settings, and a replay runs under them.

A service tunes recall with session settings (pgmem.word_weight, pgmem.time_weight,
pgmem.ef_search, ...). They were not logged, so replay_logged_recall ran a logged recall under
the replaying session's settings and could show another answer than the caller got. log_recall
now records the settings the caller's session had set (pgmem._recall_settings), and
replay_logged_recall and explain_logged_recall run under them.

Table changes are sql/incremental/024_recall_log_settings.sql: one nullable column on
pgmem.recall_log (no rewrite; a short ACCESS EXCLUSIVE lock on recall_log). The functions are
sql/idempotent/030_recall.sql.

Revision ID: 0057
Revises: 0056
Create Date: 2026-12-06
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0057"
down_revision = "0056"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/024_recall_log_settings.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/024_recall_log_settings.sql")
