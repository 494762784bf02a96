"""A store item's thread takes no conversation's turn nor fact (functions only).

0092 kept an item out of a conversation's thread; the converse was open. put_turn / put_turns
(`pgmem ingest`, the bulk path) naming the thread a store item holds (`item:<key>`) replaced the
item's indexed turn 0 with the conversation's text: the store's search found the item by the
conversation's words, and deleting the item forgot the conversation's turns with it. add_facts
tied facts to that thread, which the item's delete forgot.

- put_turns refuses each such turn on its own (status failed, 23505, one line naming the item);
  the item's own turn (turn 0 at the item's created_at, as the store writes it) and a rebuild's
  copy of a stored turn (replace_hashes) are written as before. put_turn raises it.
- add_facts refuses a call naming such a thread (23505, one line naming the entry and the item).
- Both read the store items with the threads locked (KEY SHARE, the documented order), so an
  item put committed while they waited is seen.

Only re-runnable definitions change (sql/idempotent/020_ingest.sql).

Revision ID: 0094
Revises: 0093
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0094"
down_revision = "0093"
upgrade, downgrade = functions_only(revision)
