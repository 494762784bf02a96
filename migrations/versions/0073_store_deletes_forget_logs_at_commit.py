"""A store delete's recall-log rows are deleted at its commit (functions and a trigger only).

delete_item deleted the recall-log rows that had returned the item at once, under the scope's
recall-log lock, held to the end of the transaction. A transaction deleting two indexed items (a
LangGraph store batch) then asked for the second key's lock while holding it, and a delete of that
key alone, holding the key, waited for the recall-log lock: a deadlock. (A batch's puts after a
delete, and their turns, were locked after it the same way.) delete_item now notes the item's
thread, pieces and facts in the transaction's setting pgmem.item_logs_at_commit, and a deferred
constraint trigger on pgmem.store_item (store_item_logs_at_commit) deletes their log rows at the
commit, once a scope, after every other lock the transaction took.

Only re-runnable definitions change (sql/idempotent/080_store.sql, 900_grants.sql): the trigger is
dropped and created by the re-runnable set, which holds store_item ACCESS EXCLUSIVE anyway.

Revision ID: 0073
Revises: 0072
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0073"
down_revision = "0072"
upgrade, downgrade = functions_only(revision)
