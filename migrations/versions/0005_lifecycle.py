"""Memory lifecycle (issue 15): turn metadata (filtered on by memory_recall), per-scope
retention settings (pgmem.set_retention, applied by pgmem.apply_retention), and the metadata
filter of logged recalls.

Table changes are sql/incremental/004_lifecycle.sql; the functions are re-runnable
definitions (020_ingest.sql, 030_recall.sql, 075_retention.sql).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/004_lifecycle.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/004_lifecycle.sql")
