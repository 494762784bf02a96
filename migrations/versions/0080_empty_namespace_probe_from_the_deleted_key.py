"""A store delete looks for the namespace's items left from the key it deleted (functions only).

delete_item (and the forgets of an item's thread, and expire_items) drop the namespace's
directory entries with its last item, looking for an item left in the scope. The items the
transaction had deleted stay in the key index until it commits, and the look started at the
scope's first key, stepping over every one of them: each delete of a transaction deleting many
items in key order cost every delete before it. pgmem._drop_empty_namespace takes the key just
deleted and looks from there first, through the key index only (its signature is now (scope,
near); the one-argument definition, internal, is dropped). With 0079, a delete in a transaction
of 8,000 took 0.93-1.12 ms against 3.48-3.55 at 0078 (docs/bench/delete-ab-0080.txt).

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 080_store.sql,
081_store_search.sql).

Revision ID: 0080
Revises: 0079
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0080"
down_revision = "0079"
upgrade, downgrade = functions_only(revision)
