"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/NNN_change.sql")
    apply_idempotent(op)


def downgrade() -> None:
    raise NotImplementedError
