"""forget_document deletes a document's units by their chunks' ids (functions only).

forget_document (and remove_document, which calls it) deleted the units with a join of
pgmem.piece and pgmem.chunk. Planned before autovacuum had analyzed a document just written, the
join estimated one chunk and ten units and read the scope's document units through
piece_scope_kind_idx once a chunk, the inner side of a nested loop (and on the statistics of
emptied tables, the chunks once a unit): a document of 8,000 units, 4 a chunk, forgotten in
33.6 s against 0.17 s (python -m pgmem.lab.bench.doc_removal, docs/bench/doc-removal-0058.txt).
The delete now names the chunks' ids as an array (`chunk_id = ANY
(ARRAY(SELECT ...))`), one scan of the partial index piece_chunk_idx (`WHERE chunk_id IS NOT
NULL`, since 0001), which memory pieces never enter: no join for the planner to choose, and no
change to the write path. Not changed: on statistics that say the tables are empty (an ANALYZE
that saw only dead rows), the foreign keys' own queries (the piece -> piece_word cascade, the
insert's checks) still read a scope's rows once a row (docs/documents.md).

Only re-runnable definitions change (sql/idempotent/070_forget.sql).

Revision ID: 0058
Revises: 0057
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0058"
down_revision = "0057"
upgrade, downgrade = functions_only(revision)
