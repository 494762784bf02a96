"""`pgmem.memory_recall` defaults to `mode => 'auto'`: hybrid when the caller gives the parts'
texts, vector when it does not. Hybrid is the mode measured best on every development suite
(docs/evaluation.md, section 2a) and the Python API's default; a SQL caller that passed part
texts without a mode got vector search. An explicit `mode => 'vector'` or `'hybrid'` is
unchanged.

Only re-runnable definitions change (sql/idempotent); no table changes.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from pgmem.sqlfiles import functions_only

revision = "0012"
down_revision = "0011"
upgrade, downgrade = functions_only(revision)
