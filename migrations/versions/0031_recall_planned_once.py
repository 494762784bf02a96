"""memory_recall planned once a connection (issue 26). Its hybrid statement was planned with
each call's values, on every call; the fusion of the vector, word and time rankings is now one
grouping of their rows instead of a join of each to their union, so that one plan fits every
message size, and memory_recall keeps that plan (plan_cache_mode = force_generic_plan). The
same rows; hybrid recall took 0.65 to 0.98 of the time, 2.4 ms less for one part on a
2,000-piece scope (docs/bench/recall-ab-0031.txt).

Only re-runnable definitions change (sql/idempotent/030_recall.sql); no table changes.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0031"
down_revision = "0030"
upgrade, downgrade = functions_only(revision)
