"""Recall functions: default hnsw.ef_search 64 (pgmem.default_ef_search); scope indexes
built with ef_construction = 400 (pgmem.scope_index_plan).

Only re-runnable definitions change (sql/idempotent); no table changes. Existing scope
indexes are not touched: `SELECT ddl FROM pgmem.scope_index_plan() \\gexec` rebuilds those built
with other parameters (docs/scaling.md).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from pgmem.sqlfiles import functions_only

revision = "0002"
down_revision = "0001"
upgrade, downgrade = functions_only(revision)
