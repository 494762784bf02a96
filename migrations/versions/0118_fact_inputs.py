"""A fact's body and section are at most 8,000 bytes; a blank section is no section (functions only).

add_facts stored a body or a section of any size (a 10 MB body, a 100 kB section), each embedded
whole by the client first. It now refuses either over 8,000 bytes (UTF-8) with 22023 naming the
entry, and nothing of the call is stored.

section '' and section NULL were two facts (two rows where a user meant one). An empty or blank
section is now stored as NULL, so both write one fact. Rows stored before are left as they are:
no row is rewritten or merged, and a fact stored before this revision with section '' stays
apart from the same fact written now (a data fix would be a table change).

Only re-runnable definitions change (sql/idempotent/020_ingest.sql).

Revision ID: 0118
Revises: 0117
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0118"
down_revision = "0117"
upgrade, downgrade = functions_only(revision)
