"""A model change without downtime (issue 27): `pgmem.staged_vector` holds a scope's piece
vectors under the new model while recall keeps serving the current one; `pgmem.reembed_flip`
swaps them in, in one transaction per scope. Writers and readers check the scope's model before
anything is embedded (`pgmem.model_refusal`).

Table changes are sql/incremental/006_reembed.sql (a new, empty table: no lock on existing
tables beyond the foreign key's SHARE ROW EXCLUSIVE on pgmem.piece and pgmem.embedding_model
for the moment of the CREATE); the functions are sql/idempotent/045_reembed.sql.

The re-runnable definitions also change: `memory_recall` and `fact_recall` raise a NOTICE saying
why when they return nothing (`pgmem.empty_recall_reason`: the scope holds nothing, the thread
has no turns, no turn matches the metadata filter, or nothing is above the floor).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from alembic import op

from pgmem.sqlfiles import apply, apply_idempotent

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply(op, "incremental/006_reembed.sql")
    apply_idempotent(op, revision=revision)


def downgrade() -> None:
    apply(op, "downgrade/006_reembed.sql")
