"""A logged recall replays through memory_recall itself (functions only).

pgmem.explain_logged_recall replays a logged recall through explain_recall, which ranks by
cosine: the logged mode (hybrid's word side and fusion), time window and recency were not
applied, so psql could not show what the same recall returns now, ranked as the caller got it.
pgmem.replay_logged_recall(scope, recall_id) runs memory_recall with every logged argument and
marks each hit with its logged rank and what changed (same, moved, new, or missing).

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0050
Revises: 0049
Create Date: 2026-12-08
"""

from pgmem.sqlfiles import functions_only

revision = "0050"
down_revision = "0049"
upgrade, downgrade = functions_only(revision)
