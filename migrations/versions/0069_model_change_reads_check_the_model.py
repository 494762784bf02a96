"""A model change's reads check the model (functions only).

reembed_status and reembed_pending took any dims and model_id: for a model no vector of could
ever be staged in the installed column (dims -5, or 768 in a 384-dimension install) they counted
every piece as pending and listed them all to embed. pgmem.check_model, the rule _model_key
applied on every write (model_id 1 to 200 characters, dims the column's), now runs in both.

Only re-runnable definitions change (sql/idempotent/010_vectors.sql, 045_reembed.sql).

Revision ID: 0069
Revises: 0068
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0069"
down_revision = "0068"
upgrade, downgrade = functions_only(revision)
