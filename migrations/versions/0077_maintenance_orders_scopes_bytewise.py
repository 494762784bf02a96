"""The store's sweep and retention go through scopes in bytewise order (functions only).

sweep_expired_items and apply_retention each handle every scope in one transaction, and ordered
the scopes by the database's collation, while a LangGraph store batch writes its namespaces'
scopes in Python's order (code points). On a database whose collation sorts "a/x" before "B/x"
(en_US), a sweep and a batch deleting items of both scopes could each hold a scope's locks the
other waited for (since 0073 a delete's recall-log lock is taken at the commit, after both). Both
now order by scope_id COLLATE "C", bytewise, which is code-point order in UTF-8.

Only re-runnable definitions change (sql/idempotent/075_retention.sql, 081_store_search.sql).

Revision ID: 0077
Revises: 0076
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0077"
down_revision = "0076"
upgrade, downgrade = functions_only(revision)
