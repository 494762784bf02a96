"""document_search applies the floor to each unit before it keeps a chunk's best unit (functions only).

A chunk was kept once per part by its best unit in the fused ranking, and the floor was applied to
that unit afterwards: a chunk whose word hit ranked first in it but lay under the floor was cut,
although another of its units cleared the floor. Hybrid search then lost a chunk that vector
search returned. The floor now cuts units, and each chunk is kept by its best unit above it.

Only re-runnable definitions change (sql/idempotent/040_documents.sql).

Revision ID: 0059
Revises: 0058
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0059"
down_revision = "0058"
upgrade, downgrade = functions_only(revision)
