"""put_document checks each array of a document's units in one pass (functions only).

Its checks read unit i of unit_kinds, labels and bodies by subscript (unit_kinds[u.i]) in a query
over generate_series: an element of an array of variable-length values is found by walking the
array from its start, so the checks grew with the square of the units (40,000 units: 15 s, four
times as long for twice the units), inside the transaction that holds the document and the scope
row. They read the arrays with unnest ... WITH ORDINALITY now, each once; the same refusals, of
the same first bad unit.

Only re-runnable definitions change (sql/idempotent/040_documents.sql).

Revision ID: 0108
Revises: 0107
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0108"
down_revision = "0107"
upgrade, downgrade = functions_only(revision)
