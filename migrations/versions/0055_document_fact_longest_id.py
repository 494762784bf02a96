"""forget_document takes only its own facts when a document id holds '#' (functions only).

A fact names the document it is about as its section, the id or id#anchor. forget_document('x')
deleted every fact whose section began with 'x#', so it also deleted the facts of a document
whose id is 'x#y.md'. A section now belongs to the longest document id of the scope that it
names (pgmem._document_fact); a section naming no longer document is still an anchor of 'x'.

Only re-runnable definitions change (sql/idempotent/070_forget.sql).

Revision ID: 0055
Revises: 0054
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0055"
down_revision = "0054"
upgrade, downgrade = functions_only(revision)
