"""delete_item holds its scope row through pgmem._lock_scope, which looks for it again (functions only).

Since 0067 delete_item inserts the scope row when it does not see one (ON CONFLICT waits for a
writer inserting it), then locks the row FOR KEY SHARE. A row the insert's conflict check found
but a forget_scope deleted before that lock was no longer there: the delete went on to the key's
lock holding no scope row, an import's page (a conditional put) then inserted the row and waited
for that key, while the put after the delete in the same transaction waited for the import's
insert: a deadlock, seen in tests/test_langgraph_import.py's stress of imports, deletes, puts
and forgets (in CI once today and in two test servers' logs before this session's changes).
pgmem._lock_scope (0083) loops until it holds the row or has made and removed it.

Only re-runnable definitions change (sql/idempotent/080_store.sql).

Revision ID: 0085
Revises: 0084
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0085"
down_revision = "0084"
upgrade, downgrade = functions_only(revision)
