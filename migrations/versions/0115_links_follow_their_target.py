"""A document's links follow their target when it is removed or retitled (functions only).

A transclusion unit embeds the sentence holding its [[link]] and "→ <title of the target>",
resolved by the client when the linking document is added. After `pgmem docs rm` of the target,
or an add of it alone under a new title, the linking units still said "→ Old Title" until the
linking document was added again. forget_document (so remove_document) and put_document now
rewrite those units' text: the link resolves as gone ("→ (no such document)"), to another
document of its slug, or to the new title (pgmem._relink_documents). The units' vectors and words
are embedded again at the next add of the linking document, whose content hash covers what its
links resolve to.

Only re-runnable definitions change (sql/idempotent/040_documents.sql, 070_forget.sql).

Revision ID: 0115
Revises: 0114
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0115"
down_revision = "0114"
upgrade, downgrade = functions_only(revision)
