"""Time-aware recall (issue 29): a logged recall keeps its time window, recency and since /
until.

Table changes are sql/incremental/010_recall_log_times.sql: five nullable columns on
pgmem.recall_log (no rewrite; a short ACCESS EXCLUSIVE lock on recall_log). The functions are
sql/idempotent/030_recall.sql (`memory_recall`'s time_from, time_to, recency, since and until;
`log_recall` records them).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/010_recall_log_times.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/010_recall_log_times.sql")
