"""remove_document removes a stored document only; document_search is not crowded out by one chunk (functions only).

pgmem.remove_document (Python remove_document, `pgmem docs rm`) went through forget_document,
which also forgets the facts whose section names an id the scope holds no document of (facts may
name a document before it is stored). Of such an id it deleted those facts, a conversation's among
them, and returned false, which the CLI printed as "no document" (exit 1). It now locks the
document row first (pgmem._lock_document, split out of forget_document: the same lock order) and
removes nothing when there is none. forget_document's comment says what it forgets then.

document_search: a part left with fewer than x chunks while its candidates-th nearest unit was
still over the floor is searched again with 8 times the candidates, up to 1,000. The units of one
long table or code block (tens or hundreds of one chunk) filled the candidates, and x=5 returned
that chunk alone while other chunks were over the floor.

Only re-runnable definitions change (sql/idempotent/040_documents.sql, 070_forget.sql).

Revision ID: 0097
Revises: 0096
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0097"
down_revision = "0096"
upgrade, downgrade = functions_only(revision)
