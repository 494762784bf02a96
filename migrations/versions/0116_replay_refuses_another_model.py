"""A logged recall is not replayed across a model change (functions only).

log_recall kept the query vectors of a recall but not the model that made them. After `pgmem
reembed` flipped the scope to another model (pgmem.reembed_flip rebinds scope.piece_model_key),
explain_logged_recall and replay_logged_recall of a recall logged before the flip ranked the new
model's pieces with the old model's query vectors: results without meaning, and no word of it.

log_recall now records the scope's model of the plane (model_id and dims) in the existing
recall_log.settings under the key 'model', which is no recall setting's name (those are all
pgmem.*, pgmem._recall_setting_names), so pgmem._apply_recall_settings never reads it; no table
changes. Both replays refuse a recall logged under another model than the scope's now with 22000,
naming both models, and a hint to record the recall again. A row logged before 0116 has no model
and replays as before.

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0116
Revises: 0115
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0116"
down_revision = "0115"
upgrade, downgrade = functions_only(revision)
