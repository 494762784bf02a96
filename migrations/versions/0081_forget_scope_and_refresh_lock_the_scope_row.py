"""forget_scope locks a scope row being inserted, and a store read's TTL refresh holds the scope row (functions only).

Two holes in the lock order (scope row, then store items, threads, turns, pieces; the recall-log
lock last), each a deadlock of tests/test_mixed_async_ttl.py's stress test (forget_scope against
refresh_items; one run in six of five store test files under pytest -n 2, at 22f595b too):

- forget_scope's SELECT ... FOR UPDATE does not see a scope row a writer recreating the scope
  has inserted and not committed, so it locked nothing; the writers after it met it halfway,
  after its recall-log lock. It now inserts the row first (ON CONFLICT DO NOTHING waits for the
  other insert), as delete_item does since 0067, and again when another forget deleted the row
  while this one waited for it (tests/test_forget_scope_lock_order.py: the interleaving replayed,
  and a 4-second stress of store batches beside forget_scope, which met a deadlock before).
- refresh_items locked items without the scope row, so it held an item forget_scope was about
  to delete while its transaction went on to wait for forget_scope. It takes the scope row FOR
  KEY SHARE first, as the scope's writers do.

It also carries the review of 0079 and 0080 (tests/test_rt47_notes.py): a count of sealed delete
notes set below the chunks sealed fails the commit (22023) instead of hiding their items' log
rows; the look for a namespace's items left starts from the first key when the transaction's
previous delete in the scope was of a later key (pgmem.store_deleted_near, a hint only).

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 080_store.sql,
081_store_search.sql).

Revision ID: 0081
Revises: 0080
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0081"
down_revision = "0080"
upgrade, downgrade = functions_only(revision)
