"""A model id the registry cannot hold is refused in one line (functions only).

pgmem._model_key, which every SQL step that registers a model calls (bind_scope_model,
put_turn, put_document, add_facts, stage_vectors, reembed_flip), let an empty model id or one over
200 characters reach pgmem.embedding_model's check constraint: 23514, with the whole row as a
DETAIL. It now refuses it first: 22023, "model_id must be 1 to 200 characters" (found by the
documents and reembed mutation review; Python refused it already).

Only re-runnable definitions change (sql/idempotent/010_vectors.sql).

Revision ID: 0065
Revises: 0064
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0065"
down_revision = "0064"
upgrade, downgrade = functions_only(revision)
