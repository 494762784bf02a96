"""Hardening (issue 12): integer model keys allocated without a sequence, a surrogate scope
number on piece and fact rows (per-scope partial indexes keyed on it), facts idempotent by
content.

Table changes are sql/incremental/002_hardening.sql (it rewrites piece and fact once); then
the re-runnable set. Existing scope indexes still name scopes until
`SELECT ddl FROM pgmem.scope_index_plan() \\gexec` rebuilds them on scope_no (docs/scaling.md).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/002_hardening.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/002_hardening.sql")
