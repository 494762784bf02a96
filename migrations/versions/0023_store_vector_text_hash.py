"""Skip unchanged text for field vectors (issue 26, item 5): pgmem.store_vector gains
text_hash, the sha256 of the text each vector embeds, so that a put whose field texts are those
already stored, with the same model, keeps the item's vectors instead of embedding them again.

Table changes are sql/incremental/016_store_vector_text_hash.sql: one nullable column without a
default on pgmem.store_vector (no rewrite; a short ACCESS EXCLUSIVE lock on store_vector). It
replaces two signatures: `put_item` takes `model_id`, `field_paths` and `text_hashes` and
returns `vectors_kept`, `put_item_vectors` takes `text_hashes` (the old calls still work: the new
arguments have defaults). The functions are sql/idempotent/080_store.sql (`put_item`) and
081_store_search.sql (`item_vectors_current`, `store_vectors_current`, `put_item_vectors`).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/016_store_vector_text_hash.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/016_store_vector_text_hash.sql")
