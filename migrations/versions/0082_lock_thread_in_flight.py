"""A forget of a thread or turn waits for a writer inserting the thread or scope row (functions only).

pgmem._lock_thread (forget_thread, forget_turn, forget_fact, apply_retention, expire_items)
locked the thread row with SELECT ... FOR UPDATE, which does not see a row another transaction
has inserted and not committed: a forget that started while a put_turn created the thread locked
nothing, deleted the writer's pieces once it had committed (a later statement's snapshot), and
met a second forget of the thread, which had locked the committed row, halfway: a deadlock (two
forget_thread calls, seen in a stress of writers and forgets). _lock_thread now inserts a row it
does not find (ON CONFLICT DO NOTHING waits for the other insert) and deletes it at once when
this transaction made it, the scope row first, as forget_scope does since 0081
(tests/test_forget_thread_lock_order.py replays it).

Only re-runnable definitions change (sql/idempotent/070_forget.sql).

Revision ID: 0082
Revises: 0081
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0082"
down_revision = "0081"
upgrade, downgrade = functions_only(revision)
