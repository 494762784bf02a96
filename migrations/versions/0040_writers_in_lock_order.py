"""Every writer in the one lock order, and a rebuild that never brings a forgotten turn back.

Found by a red-team pass of concurrent writers (each is a test in tests/test_lock_order.py):

- reblend took every piece of the scope, then the turns: a writer replacing a turn (or a
  forget) held the turn and waited for a piece while reblend waited for the turn, a deadlock.
  It now holds the scope row FOR SHARE, then the turns FOR UPDATE in key order, then updates the
  pieces; reblend_documents the scope row, then the documents. Holding the scope row also makes
  a model change in flight (reembed_flip) commit first: the vectors and contexts are then read
  of one model, where a reblend that waited for it blended the new raw vectors with the old
  model's contexts.
- A rebuild re-put every turn it had read with force: a turn forgotten while it embedded came
  back, and one written again was overwritten with the older copy; metadata was dropped.
  pending_turns returns each turn's metadata and content hash, and put_turns / put_turn take
  replace_hashes / replace_hash: such a turn is written only over the stored turn of that hash,
  else skipped (its thread never created again).
- add_facts took no lock on the facts' threads: a fact added while its thread was forgotten
  outlived the forget. It now holds them FOR KEY SHARE (inserted first), as put_turns does.
- A fact-plane recall log kept a forgotten fact's hit (its body), and forget_fact of a fact
  already gone skipped the log rows naming it: log_recall now locks the facts it names and drops
  a forgotten one's hit, and forget_fact always clears the rows naming its id.
- set_retention and log_recall insert the scope row, then hold it FOR KEY SHARE, looping while
  it is gone: during a forget_scope, set_retention failed on its foreign key (23503), and a
  log row could stay behind with no scope row.

And from a differential test of PgmemStore against LangGraph's PostgresStore:
store_namespaces takes literal (a search's namespace prefix: "*" is a label there, not
list_namespaces' wildcard, which let a prefix built from a user id of "*" search every user's
items).

Only re-runnable definitions change (sql/idempotent/020_ingest.sql, 030_recall.sql,
040_documents.sql, 075_retention.sql, 080_store.sql; put_turn, put_turns, pending_turns and
store_namespaces are dropped and created again with their new signatures).

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0040"
down_revision = "0039"
upgrade, downgrade = functions_only(revision)
