"""One lock order for every writer (issue 27): scope, then store item or document, then
thread, then turn, then pieces and facts, then recall-log rows (docs/architecture.md).

- `bind_scope_model` holds the scope row FOR SHARE instead of FOR UPDATE: writers of one scope
  run side by side, and two that held the row's KEY SHARE no longer deadlock on the upgrade.
- `put_turn` holds its thread (KEY SHARE) before its turn, and creates the thread again when a
  forget removed it meanwhile: the turn is stored after the forget, never a 23503.
- `forget_thread` and `forget_turn` lock the thread's store items and thread row first, and
  remove the LangGraph store items whose turn they forget; `forget_document` locks the
  document before deleting its pieces.
- `pgmem.stats()` (sql/idempotent/085_stats.sql): per-scope counts, ANN index health and recent
  recalls for monitoring, with SELECT-only maintenance_read policies so the migrating login
  sees every scope (docs/operations.md).

Only re-runnable definitions change (sql/idempotent); no table changes.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from pgmem.sqlfiles import functions_only

revision = "0013"
down_revision = "0012"
upgrade, downgrade = functions_only(revision)
