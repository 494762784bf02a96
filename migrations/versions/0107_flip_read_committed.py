"""reembed_flip refuses REPEATABLE READ and SERIALIZABLE: it left a writer's pieces on the old model (functions only).

The flip waits for the scope's writers in flight (the scope row, FOR NO KEY UPDATE), then counts
the pieces still without a staged vector and moves the others. Under REPEATABLE READ or
SERIALIZABLE (a database or login whose default_transaction_isolation says so) its snapshot was
taken before that wait: a writer of the old model that committed meanwhile had held the scope row
only FOR SHARE, which is no update to conflict with, so its pieces were neither counted nor moved,
and the flip bound the scope to the new model with them left on the old one (recall then ranked
them with a query of the other model). It now raises 25000 before anything changes, as
refresh_word_fold does.

Only re-runnable definitions change (sql/idempotent/045_reembed.sql).

Revision ID: 0107
Revises: 0105
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0107"
down_revision = "0105"
upgrade, downgrade = functions_only(revision)
