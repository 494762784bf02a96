"""store_search scores a zero vector's cosine 0: an item with one came first in every search (functions only).

A store's own embed may return the zero vector (a text it has no words for). pgvector's cosine
distance is NaN for it, NaN sorts above every number, and pgmem.store_search ordered by score
descending: the item came first in every cosine search with score NaN, above the exact match, and
an item with one such field scored NaN (max) whatever its other fields. A zero vector has no
direction: its cosine similarity is 0 now, field or query. Found probing the boundary values a
store's field vectors may take; tests/test_langgraph_store.py replays it.

Only re-runnable definitions change (sql/idempotent/081_store_search.sql).

Revision ID: 0090
Revises: 0089
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0090"
down_revision = "0089"
upgrade, downgrade = functions_only(revision)
