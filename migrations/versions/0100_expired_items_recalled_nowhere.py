"""An expired LangGraph store item is recalled nowhere, swept or not (functions and an index).

The store hid an expired item from its own get and search at once (0072), but the item's turn
and pieces stay in the namespace's scope until the sweep, and that scope is an ordinary pgmem
scope: pgmem.memory_recall (pgmem.recall, the MCP server's recall) returned the expired item's
text, in one of the x places of its part. pgmem.expired_item_pieces names the pieces of the
scope's expired items (by the clock, as store_get judges), and memory_recall's candidate
functions (_memory_candidates, _window_candidates, word_candidates) and empty_recall_reason
leave them out before anything is ranked, as if the sweep had removed them. The re-runnable set
builds the index that finds a scope's expired items (store_item_scope_expires) when missing.

Only re-runnable definitions change (sql/idempotent/030_recall.sql, 081_store_search.sql).

Revision ID: 0100
Revises: 0099
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0100"
down_revision = "0099"
upgrade, downgrade = functions_only(revision)
