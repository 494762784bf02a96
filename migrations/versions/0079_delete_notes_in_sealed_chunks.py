"""A store delete's notes are sealed in chunks: a transaction's deletes cost each the same (functions only).

delete_item notes each deleted item's thread, pieces and facts in the transaction's setting
pgmem.item_logs_at_commit (0073, 0076), read by the deferred trigger that forgets their
recall-log rows at the commit. A setting is copied whole each time it is set, so each delete cost
the length of every note before it: in a transaction of 8,000 deletes a delete took 2.07-3.92 ms
against 0.67 in one of 50 (0.89-1.65 ms with this revision, docs/bench/delete-ab-0079.txt).
Past 16 kB the notes now move to pgmem.item_logs_at_commit_<i>, counted by
pgmem.item_logs_at_commit_chunks; the trigger reads them all, and after the first row of a scope
marks it done with a search of the setting instead of a parse of every line.

Only re-runnable definitions change (sql/idempotent/080_store.sql).

Revision ID: 0079
Revises: 0078
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0079"
down_revision = "0078"
upgrade, downgrade = functions_only(revision)
