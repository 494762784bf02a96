"""A store delete notes its recall-log rows before the item row goes, in its own transaction's value.

0073's commit-time forget of a store delete's recall-log rows kept them in four cases: under SET
CONSTRAINTS ALL IMMEDIATE the trigger fired at the item row's delete, before delete_item noted the
item's thread, pieces and facts, and found nothing; a pgmem.item_logs_at_commit set to '' or '{}'
after the delete named nothing; a session-level value (which outlives its transaction on a pooled
connection) was added to by a later delete, whose commit forgot the other threads it named; and a
put of the same key after the delete, in the same transaction, had its own recalls forgotten at the
commit (its thread, forgotten whole). delete_item now notes them before the delete, with the
item row locked FOR UPDATE, as a line appended to the value (0073 parsed and rewrote a JSON object of
every delete so far at each delete: quadratic, 4,000 deletes in one batch 7.6 s against 4.0 s now);
the value's first line names its transaction, and one of another transaction is dropped; the
trigger forgets the deleted row's own thread whatever the value holds, and a thread
stored again by the commit by the deleted pieces' and facts' ids only.

Only re-runnable definitions change (sql/idempotent/080_store.sql).

Revision ID: 0076
Revises: 0075
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0076"
down_revision = "0075"
upgrade, downgrade = functions_only(revision)
