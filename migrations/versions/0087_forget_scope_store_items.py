"""forget_scope counts the LangGraph store items it removes; store_search refuses pieces (functions only).

A scope whose store items have no turn (index=False, items with field vectors, items whose texts
are all blank) was forgotten with every count zero: its items went with the scope row's cascade
and no count named them, so `pgmem forget scope --scope S --yes` printed "nothing to forget" and
exited 1 after erasing them. forget_scope's result gains a last column, `store_items`; the
re-runnable set drops the older definition first, once (CREATE OR REPLACE cannot add a result
column). A call that names its columns is unchanged; `SELECT *` gets one more column, and a
prepared `SELECT *` fails with 0A000 until its connection is renewed (docs/operations.md).
tests/test_forget.py covers it.

store_search refuses a namespace of pgmem's pieces (22000, as put_item_vectors refuses to write
it): a store with an index embed searching a namespace `pgmem store import` had stored as pieces
answered nothing, without a word (tests/test_langgraph_import.py). The other way round,
pgmem.store_pieces_check (new) refuses a search through pieces of a namespace of field vectors,
run with each namespace's recall by a store without an embed, which answered nothing too.

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 081_store_search.sql; the
LangGraph store's search through pieces calls the new check).

Revision ID: 0087
Revises: 0086
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0087"
down_revision = "0086"
upgrade, downgrade = functions_only(revision)
