"""log_recall refuses results nested deeper than 64 levels in one line (functions only).

log_recall stores the results its caller sends (any JSON array or object up to 16,000,000 bytes)
and reads them recursively (pgmem._drop_gone_hits): an array nested 1,000 deep failed with
54001 "stack depth limit exceeded", whose hint says to raise max_stack_depth. Results nested
deeper than 64 levels (a recall's nest 4) are refused with 22023, as put_item bounds a value.

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0103
Revises: 0102
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0103"
down_revision = "0102"
upgrade, downgrade = functions_only(revision)
