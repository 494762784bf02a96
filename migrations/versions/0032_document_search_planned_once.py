"""document_search planned once a connection (issue 26), as memory_recall since 0031: its
fusion of the vector and word rankings is one grouping of their rows instead of a full join,
and it keeps that plan (plan_cache_mode = force_generic_plan). The same rows; hybrid document
search took 0.29 to 0.91 of the time: one part on the 100,000-piece scope's 20,000 units
100.62 -> 29.47 ms (docs/bench/recall-ab-0032.txt).

Only re-runnable definitions change (sql/idempotent/040_documents.sql); no table changes.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0032"
down_revision = "0031"
upgrade, downgrade = functions_only(revision)
