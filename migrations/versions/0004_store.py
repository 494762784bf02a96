"""The LangGraph store (issue 16): store_item (an item per namespace and key, in the
namespace's scope) and store_namespace (the directory of namespaces that hold items).

Table changes are sql/incremental/003_store.sql; the functions (store_scope, put_item,
delete_item, store_namespaces) are re-runnable definitions in sql/idempotent/080_store.sql.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/003_store.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/003_store.sql")
