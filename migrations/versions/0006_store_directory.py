"""The LangGraph store's namespace directory under row-level security (issue 16): each entry
belongs to the directory of the store that wrote it, visible only to a transaction that names
that directory (pgmem.store_directory) or is inside the namespace's scope.

Table changes are sql/incremental/005_store_directory.sql; the functions and policies are
re-runnable definitions (sql/idempotent/080_store.sql, 070_forget.sql).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/005_store_directory.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/005_store_directory.sql")
