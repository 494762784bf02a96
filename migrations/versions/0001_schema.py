"""The pgmem schema: tables, types, functions.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/001_schema.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/001_schema.sql")
