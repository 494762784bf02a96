"""A store batch opens its scopes before it binds a model (functions only).

A LangGraph store batch over several namespaces bound its first scope's model before it created
its next scope's row. When the model was new, the first bind registered it, holding
pgmem.embedding_model's lock to the end of the transaction; the batch then inserted the next
scope's row, which another writer had inserted and was holding while it waited for the registry:
a deadlock (40P01). pgmem.open_scope creates a scope's row and holds it FOR KEY SHARE; a batch of
several scopes opens them all, sorted, before its first bind, so the registry's lock comes after
every scope row the transaction creates.

reembed_flip deletes only its own model's staged vectors: a change to another model staged in the
same scope kept none of its work, and embedded every piece again.

Only re-runnable definitions change (sql/idempotent/010_vectors.sql, 045_reembed.sql,
900_grants.sql): a new function, no result column of an existing one changes.

Revision ID: 0075
Revises: 0074
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0075"
down_revision = "0074"
upgrade, downgrade = functions_only(revision)
