"""Per-model recall settings (issue 29): pgmem.model_setting, the floor, word weight and subject
cosine of each embedding model, read by the recall functions when the caller gives none.

Table changes are sql/incremental/012_model_settings.sql: one new, small table (no lock on an
existing one). The functions are sql/idempotent/025_model_settings.sql (`model_settings`,
`scope_model_settings`); memory_recall, explain_recall, log_recall and document_search default
their floor to the model's.

Revision ID: 0020
Revises: 0018
Create Date: 2026-12-03
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0020"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/012_model_settings.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/012_model_settings.sql")
