"""Recency looks at 4 hits within 0.15, and an assistant's reply moves none (functions only).

memory_recall's recency (the most recent of a part's first hits within a cosine band of the
first ranks first) rarely had anything to choose: at a band of 0.05 over the first 2 hits, the
two were pieces of one session in 94 of 111 parts of the oracle set's tuning half, and it moved
3 first hits. Widened alone it lost top-1 in the pooled store: later sessions' assistant replies
echo a subject and took the first rank. Now the default band is 0.15 and pgmem.recency_depth 4,
and a hit from an assistant's reply never moves up (the first hit keeps its place whatever its
source): chosen on the tuning half, reported on the confirmation half (docs/evaluation.md,
"Time-aware recall").

Only re-runnable definitions change (sql/idempotent/030_recall.sql: memory_recall).

Revision ID: 0093
Revises: 0090
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0093"
down_revision = "0090"
upgrade, downgrade = functions_only(revision)
