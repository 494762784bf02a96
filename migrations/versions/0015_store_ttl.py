"""The LangGraph store as a drop-in for PostgresStore (issue 28): item expiry (TTL) and field
vectors for stores that embed with their own model.

Table changes are sql/incremental/007_store_ttl_vectors.sql: two nullable columns on
pgmem.store_item (no rewrite), a partial index on its expiry (a short SHARE lock on
pgmem.store_item while it is built) and a new, empty table pgmem.store_vector. The functions
are sql/idempotent/080_store.sql (`put_item` with a ttl) and 081_store_search.sql
(`store_search`, `store_filter_match`, `refresh_items`, `expire_items`, `sweep_expired_items`).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/007_store_ttl_vectors.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/007_store_ttl_vectors.sql")
