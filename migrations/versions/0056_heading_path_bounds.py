"""put_document refuses a heading path of more than 32 headings or one of more than 500
characters (functions only).

Every chunk stores its whole heading path, so one long heading was stored once per section under
it: a 205 kB Markdown document with a 200,000-character title over 300 sections stored 57 MB of
paths. pgmem's Markdown chunking cuts a heading to 500 characters in the paths; put_document
refuses longer ones from other callers (22023).

Only re-runnable definitions change (sql/idempotent/040_documents.sql).

Revision ID: 0056
Revises: 0055
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0056"
down_revision = "0055"
upgrade, downgrade = functions_only(revision)
