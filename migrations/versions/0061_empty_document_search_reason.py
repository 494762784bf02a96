"""pgmem.empty_recall_reason answers for a document search too (functions only).

A document search of a misspelt scope printed "(no document above the floor)" and exited 0,
where a recall says "scope X holds no memory (check the scope name)" and exits 1.
empty_recall_reason(scope, plane => 'document') now says scope_empty (the scope holds no
documents) or below_floor; it takes no thread or metadata filter there (22023), as
document_search takes neither.

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0061
Revises: 0060
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0061"
down_revision = "0060"
upgrade, downgrade = functions_only(revision)
