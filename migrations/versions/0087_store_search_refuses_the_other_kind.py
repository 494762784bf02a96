"""A store search of a namespace of the other kind (pieces or field vectors) is refused in one line (functions only).

store_search refuses a namespace of pgmem's pieces (22000, as put_item_vectors refuses to write
it): a store with an index embed searching a namespace `pgmem store import` had stored as pieces
answered nothing, without a word (tests/test_langgraph_import.py). The other way round,
pgmem.store_pieces_check (new) refuses a search through pieces of a namespace of field vectors,
run with each namespace's recall by a store without an embed, which answered nothing too.

Only re-runnable definitions change (sql/idempotent/081_store_search.sql; the LangGraph store's
search through pieces calls the new check).

Revision ID: 0087
Revises: 0086
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0087"
down_revision = "0086"
upgrade, downgrade = functions_only(revision)
