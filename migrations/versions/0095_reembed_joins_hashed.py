"""reembed_flip, reembed_status and reblend_documents hash whole-scope joins whatever the statistics (functions only).

Planned on statistics older than the scope (pgmem.piece and pgmem.staged_vector never analyzed,
or analyzed empty, as right after a first load and a model change's staging), the planner took
each side of their joins for one row and joined them in nested loops: the flip read the scope's
staged vectors once a piece (1,000 document units: 1,003,000 staged rows read, 4,000 now) and
3,000 document units flipped back to a model they had used took 46 s against 0.2 s. Both run with
enable_nestloop off now: every join in them takes the scope's rows whole. reblend_documents the
same: it joined a scope's units to their chunks' contexts in a nested loop, rereading every
context once a unit (3,000 units: 57 s against 0.3 s).

Only re-runnable definitions change (sql/idempotent/040_documents.sql, 045_reembed.sql).

Revision ID: 0095
Revises: 0094
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0095"
down_revision = "0094"
upgrade, downgrade = functions_only(revision)
