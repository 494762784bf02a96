"""Hybrid recall scores a piece's words by their rarity: pgmem.distinctive_words (each distinctive
word of a part with the number of pieces it is in and its BM25 inverse document frequency)
replaces pgmem.distinctive_word_query, and memory_recall ranks word candidates by the summed
weights of the words they contain instead of ts_rank_cd (docs/evaluation.md, section 2a).

Only re-runnable definitions change (sql/idempotent); no table changes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from alembic import op

from pgmem.sqlfiles import apply_idempotent

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    # No table changed. The functions are the re-runnable definitions in sql/idempotent, which
    # are whatever this checkout holds.
    pass
