"""Each piece's words without their positions (issue 26): nothing reads a position (the word side
matches lexemes only), and they were a third of the word side's size. The same pieces are found
and scored.

Table changes are sql/incremental/018_piece_word_strip.sql: writes to pgmem.piece wait from its
start (SHARE ROW EXCLUSIVE), pgmem.piece_word is rewritten with its indexes (ACCESS EXCLUSIVE
on it: the word side of recall waits too; docs/operations.md's lock table). The rule for new
pieces (pgmem.piece_tsv) is sql/idempotent/020_ingest.sql, applied in this revision's
transaction. This revision also carries word_candidates' per-part ranking (030_recall.sql).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-04
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/018_piece_word_strip.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/018_piece_word_strip.sql")
