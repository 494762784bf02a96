"""reembed_flip refuses REPEATABLE READ; index_large_scopes and add_facts do not deadlock (functions only).

The flip waits for the scope's writers in flight (the scope row, FOR NO KEY UPDATE), then counts
the pieces still without a staged vector and moves the others. Under REPEATABLE READ or
SERIALIZABLE (a database or login whose default_transaction_isolation says so) its snapshot was
taken before that wait: a writer of the old model that committed meanwhile had held the scope row
only FOR SHARE, which is no update to conflict with, so its pieces were neither counted nor moved,
and the flip bound the scope to the new model with them left on the old one (recall then ranked
them with a query of the other model). It now raises 25000 before anything changes, as
refresh_word_fold does.

index_large_scopes deadlocked with a writer of a scope whose word fold it refreshed (40P01): its
index builds hold pgmem.piece against writers to its commit, and refresh_word_fold then waited for
the scope's writers in flight (the scope row), while a writer that held that row from before its
first piece waited for the build at its insert. index_large_scopes now takes pgmem.piece in SHARE
mode first when its plan folds, and refresh_word_fold does not wait for writers in a transaction
that holds that lock (every writer with a piece in flight has committed).

add_facts inserted its facts in the call's order, each waiting on the unique content key for one
another call had inserted first: two calls adding the same facts in two orders deadlocked (40P01).
It inserts them by content hash now, with ids taken from the identity in the call's order first,
so the ids still come back in the call's order.

Only re-runnable definitions change (sql/idempotent/020_ingest.sql, 030_recall.sql, 045_reembed.sql,
060_indexes.sql).

Revision ID: 0106
Revises: 0105
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0106"
down_revision = "0105"
upgrade, downgrade = functions_only(revision)
