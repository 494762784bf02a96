"""reembed_flip moves the pieces a rebinding write left on the old model (functions only).

A write with reembed => true (put_turn, put_turns, put_document) rebinds the scope to its model
and leaves the scope's other pieces on the old one. `pgmem reembed --to` that model embedded those
pieces and staged their vectors, then the flip saw the scope already on the model, deleted the
staged vectors and returned flipped: the pieces stayed on the old model, and every run embedded
them again. The flip now returns early only when no piece of the scope is of another model, and
otherwise swaps the staged vectors in; the turns with no staged piece keep their contexts.

Only re-runnable definitions change (sql/idempotent/045_reembed.sql).

Revision ID: 0064
Revises: 0063
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0064"
down_revision = "0063"
upgrade, downgrade = functions_only(revision)
