"""Review rt57 of 0091–0092: expiry records pruned, numbers Python reads back stored, search window (functions only).

- expire_items (0092) records each expired key in pgmem.store_tombstone, but only delete_item's
  records pruned those older than 30 days: a store whose items only expired kept every record
  for ever. pgmem._prune_tombstones prunes them for both.
- 0091 refused every number beyond the largest double in turns and store values, but an integer
  beyond it reads back exactly in Python (and LangGraph's stores store it). The rule is now what
  Python cannot read back (pgmem._unreadable_number): an integer of more than 4,300 digits, or a
  fraction beyond the largest double.
- store_search's lim NULL (0092) returned every match, past its window of 10,000: now the rest
  of the window. put_item's blank thread is said in its own words, and its comment names the
  thread the item row holds (item-sha256:<hex> when a conversation holds the name, since 0092).

- put_item records the namespace's directory entry right after the directory lock, before the
  item row (note_store_namespace too, before the item it locks): written last, two first puts
  into a namespace without an entry deadlocked, one waiting for the other's entry while holding
  a key the other then put (the concurrent store test in CI). A put that writes nothing removes
  the entry it made.

Only re-runnable definitions change (sql/idempotent/020_ingest.sql, 070_forget.sql,
080_store.sql, 081_store_search.sql).

Revision ID: 0093
Revises: 0092
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0093"
down_revision = "0092"
upgrade, downgrade = functions_only(revision)
