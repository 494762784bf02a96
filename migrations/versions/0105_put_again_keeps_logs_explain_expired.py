"""put_item keeps an expired item's log rows at a put again; explain_recall leaves out expired pieces (functions only).

0102 made put_item forget, at the put, the recall-log rows that had returned an expired item
put again before the sweep. It took the scope's recall-log lock there, in the middle of a store
batch that went on to lock more items, threads, turns and pieces: two batches re-putting
expired keys deadlocked (40P01), and each such put read the scope's whole recall log (485 ms
with 50,001 rows against 23 ms for a live item). put_item is as before 0102 again: those rows
stay until the log's retention (a put with index=False, or a delete, still forgets them).

explain_recall ranked the pieces of expired, unswept store items that memory_recall leaves out
since 0100, so it called an expired item kept and the hit recall returned cut; it leaves them
out too.

Only re-runnable definitions change (sql/idempotent/030_recall.sql, 080_store.sql).

Revision ID: 0105
Revises: 0104
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0105"
down_revision = "0104"
upgrade, downgrade = functions_only(revision)
