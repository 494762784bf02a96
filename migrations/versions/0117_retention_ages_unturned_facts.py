"""Retention ages the facts whose turn is not stored (functions only).

`keep_days` removed each expired turn with the facts tied to it, and nothing else of the fact
plane: a fact tied to a thread only, to no thread, or to a turn index whose turn never came
outlived every `keep_days`. apply_retention now removes those stored more than `keep_days` ago,
as forget_fact removes a fact (the recall-log rows that returned them, and a thread left with
nothing, go too; their threads are locked with the expiring turns' threads, in key order).
Facts about a stored document stay with it: documents are not aged.

Only re-runnable definitions change (sql/idempotent/075_retention.sql).

Revision ID: 0117
Revises: 0116
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0117"
down_revision = "0116"
upgrade, downgrade = functions_only(revision)
