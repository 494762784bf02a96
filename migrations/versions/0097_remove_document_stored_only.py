"""remove_document removes a stored document only: of an id with no document it deleted facts (functions only).

pgmem.remove_document (Python remove_document, `pgmem docs rm`) went through forget_document,
which also forgets the facts whose section names an id the scope holds no document of (facts may
name a document before it is stored). Of such an id it deleted those facts, a conversation's among
them, and returned false, which the CLI printed as "no document" (exit 1). It now locks the
document row first (pgmem._lock_document, split out of forget_document: the same lock order) and
removes nothing when there is none. forget_document's comment says what it forgets then.

Only re-runnable definitions change (sql/idempotent/040_documents.sql, 070_forget.sql).

Revision ID: 0097
Revises: 0096
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0097"
down_revision = "0096"
upgrade, downgrade = functions_only(revision)
