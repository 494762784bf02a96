"""Two function comments (\\df+) say what the functions do (functions only).

pgmem.check_recall_args said 22004 for NULL, but a NULL x, floor, candidates, rrf_k, show or
recency is 22023 like an out-of-range one (22004 only for a NULL scope, no part_vectors, or
hybrid mode without part_texts); pgmem.reblend did not name its thread argument, its weight
bound (22023) or its refusal of a scope with no memory (42704).

Only re-runnable definitions change (sql/idempotent/020_ingest.sql, 030_recall.sql).

Revision ID: 0071
Revises: 0070
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0071"
down_revision = "0070"
upgrade, downgrade = functions_only(revision)
