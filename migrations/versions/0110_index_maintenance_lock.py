"""One index maintenance run at a time (functions only).

Two runs side by side (pg_cron's index_large_scopes beside a DBA's scope_index_plan \\gexec, or a
night run still going when the next began) planned against each other's half-done work: the
second plan dropped as invalid the index the first was building CONCURRENTLY, and two rebuilds
(or folds) of one scope interleaved so that one run's "drop the old index" dropped the index the
other had just renamed into its place, leaving the scope with no index (exact scans). Now
scope_index_plan takes an advisory lock (session level) before it reads anything and returns a
last statement that releases it, index_large_scopes takes it for its transaction, and a run that
finds it taken stops with 55P03 naming the session that holds it. An index another session is
building CONCURRENTLY (ready, not yet valid) read 'invalid' in pgmem.stats and the plan dropped it:
it reads 'building' and the plan leaves it.

Only re-runnable definitions change (sql/idempotent/060_indexes.sql, 085_stats.sql).

Revision ID: 0110
Revises: 0109
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0110"
down_revision = "0109"
upgrade, downgrade = functions_only(revision)
