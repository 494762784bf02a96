"""delete_item waits for a scope row another transaction is inserting (functions only).

delete_item locked the scope row FOR KEY SHARE when there was one, which does not see a row
another transaction has inserted and not committed (a put recreating a forgotten scope, such as
an import's page). It then took the key's lock, and a put later in the same transaction waited
for that insert, while the inserting transaction waited for the key's lock: a deadlock
(tests/test_langgraph_import.py's stress test, about one run in three). delete_item now inserts
the scope row ON CONFLICT DO NOTHING, which waits for such an insert, and deletes it again when
it made it (a delete creates no scope).

Only re-runnable definitions change (sql/idempotent/080_store.sql).

Revision ID: 0067
Revises: 0066
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0067"
down_revision = "0066"
upgrade, downgrade = functions_only(revision)
