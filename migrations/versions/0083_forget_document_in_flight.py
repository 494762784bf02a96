"""A forget of a document waits for a writer inserting the document or scope row (functions only).

pgmem.forget_document locked the document row with SELECT ... FOR UPDATE, which does not see a
row another transaction has inserted and not committed: a forget that started while a
put_document created the document locked nothing and returned at once, holding the scope's
recall-log lock; once the writer had committed, a second forget of the document locked the
committed row and waited for that lock, while the first forget's transaction, putting the
document again (a re-import), waited for the second's row: a deadlock (40P01). forget_document
now inserts a document row it does not find (ON CONFLICT DO NOTHING waits for the other insert)
and deletes it at once when this transaction made it, as pgmem._lock_thread does since 0082; the
scope row first, through pgmem._lock_scope, the scope half of _lock_thread, which both now share
(tests/test_forget_document_lock_order.py replays it).

pgmem._lock_thread (since 0082) locked the thread's store items once, before it waited for a
writer inserting the thread row: an item that writer had put, unseen then, was locked only by the
delete after the thread row, and a store batch that had put the item again meanwhile, then wrote
a turn of the thread, met the forget halfway (a deadlock). The items are now locked again after
each wait, before the thread row (tests/test_forget_thread_lock_order.py).

forget_fact held the scope row only through _lock_thread, for a fact tied to a thread: a fact
tied to none was deleted with no scope row held, and forget_scope, having locked the scope row,
waited for it while the transaction went on to add a fact and waited for forget_scope's row (a
deadlock). It now holds the scope row first (pgmem._lock_scope;
tests/test_forget_fact_lock_order.py).

set_retention removing a setting (all NULL) deleted the scope's retention row without the scope
row: forget_scope, having locked the scope row, waited for the retention row (the scope row's
delete cascades to it) while the transaction went on to write into the scope and waited for
forget_scope's row: a deadlock. It now holds the scope row FOR KEY SHARE first, as when it writes
a setting (tests/test_set_retention_lock_order.py).

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 075_retention.sql).

Revision ID: 0083
Revises: 0082
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0083"
down_revision = "0082"
upgrade, downgrade = functions_only(revision)
