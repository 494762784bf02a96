"""A store import lists in its store's directory the namespaces of the items it finds stored (functions only).

Items are stored per namespace and shared by the store directories; a directory lists a namespace
when a store of it put an item there. import_postgres_store into a second directory of the same
database found the items unchanged (or kept, newer in pgmem) and wrote nothing, so their
namespaces were never listed there: list_namespaces and a search by prefix in that directory
missed them. pgmem.note_store_namespace(scope) lists the namespace of the scope's items in the
transaction's directory, under put_item's locks, without writing an item; the import calls it for
the namespaces of the items it finds unchanged or kept.

Only re-runnable definitions change (sql/idempotent/080_store.sql, 900_grants.sql).

Revision ID: 0046
Revises: 0045
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0046"
down_revision = "0045"
upgrade, downgrade = functions_only(revision)
