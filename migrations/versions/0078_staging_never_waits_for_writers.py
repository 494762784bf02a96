"""A model change's staging skips the pieces a writer holds instead of waiting (functions only).

stage_vectors locked the pieces it stages (KEY SHARE, the foreign key's lock) in the order of
its join, waiting for each, while a writer deleting pieces (put_turns replacing a turn,
forget_scope, a store batch's deletes) took them in the order of its scan: the server ended one
with 40P01 (found by the slow variants of tests/test_mixed_writers.py, which failed on 0072 too).
Locking the pieces' turns or threads first, in sorted order, met a store batch, which holds its
items' threads in key order. stage_vectors now locks the pieces in piece order with SKIP LOCKED:
a piece being deleted or replaced is skipped, and reembed_flip reports it pending if it is still
there, so the model change stages it on its next pass.

Only re-runnable definitions change (sql/idempotent/045_reembed.sql).

Revision ID: 0078
Revises: 0077
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0078"
down_revision = "0077"
upgrade, downgrade = functions_only(revision)
