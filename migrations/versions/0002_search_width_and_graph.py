"""Recall functions: default hnsw.ef_search 64 (pgmem.default_ef_search); scope indexes
built with ef_construction = 400 (pgmem.scope_index_plan).

Only re-runnable definitions change (sql/idempotent); no table changes. Existing scope
indexes are not touched: `SELECT ddl FROM pgmem.scope_index_plan() \\gexec` rebuilds those built
with other parameters (docs/scaling.md).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from alembic import op

from pgmem.sqlfiles import apply_idempotent

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    # No table changed. The functions are the re-runnable definitions in sql/idempotent, which
    # are whatever this checkout holds; the added pgmem.default_ef_search is harmless to keep.
    pass
