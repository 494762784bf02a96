"""A fact's body and section are at most 8,000 bytes (functions only).

add_facts stored a body or a section of any size (a 10 MB body, a 100 kB section), each embedded
whole by the client first. It now refuses either over 8,000 bytes (UTF-8) with 22023 naming the
entry, and nothing of the call is stored.

Only re-runnable definitions change (sql/idempotent/020_ingest.sql).

Revision ID: 0118
Revises: 0115
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0118"
down_revision = "0115"
upgrade, downgrade = functions_only(revision)
