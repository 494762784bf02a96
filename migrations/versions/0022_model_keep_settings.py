"""Per-model floor exception (issue 29): pgmem.model_setting gains word_keep_rank and
word_keep_margin, read by memory_recall when the pgmem.word_keep_rank / word_keep_margin
settings are unset (both rows start at MiniLM's measured 1 and 0.05).

Table changes are sql/incremental/015_model_keep_settings.sql: two columns with constant
defaults on a two-row reference table (no rewrite; a short ACCESS EXCLUSIVE lock on
model_setting). The functions are sql/idempotent/025_model_settings.sql (`model_settings`,
`scope_model_settings` return the two values) and 030_recall.sql (memory_recall reads them).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-03
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/015_model_keep_settings.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/015_model_keep_settings.sql")
