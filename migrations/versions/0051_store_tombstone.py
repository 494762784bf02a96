"""A deleted store item is remembered, so an import does not bring it back.

import_postgres_store wrote a PostgresStore item into PgmemStore when pgmem had no item under
its key: an item the application had deleted in pgmem (delete_item, or a forget of the item's
thread) after the source's copy was last written came back with the next page or the next run.
The same for a namespace whose scope was forgotten (forget_scope). pgmem.store_tombstone keeps the
sha256 of a deleted key and the time of the delete, 30 days, and pgmem.forgotten_scope the sha256
of a forgotten scope and the time; put_item's unless_newer_than now also skips a key deleted, or a
scope forgotten, after that time (written false, created_at NULL). delete_item and a conditional
put take the key's advisory lock (pgmem._store_key_lock) before the item row, so a delete and an
import's put of the same key never both miss each other.

Table changes are sql/incremental/023_store_tombstone.sql; the functions are
sql/idempotent/080_store.sql and 070_forget.sql.

Revision ID: 0051
Revises: 0050
Create Date: 2026-12-06
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0051"
down_revision = "0050"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/023_store_tombstone.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/023_store_tombstone.sql")
