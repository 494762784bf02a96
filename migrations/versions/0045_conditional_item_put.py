"""A store import never overwrites an item the application wrote during it (functions only).

import_postgres_store read a page of pgmem's items, decided which to keep (written in pgmem
after the source's updated_at) and then put the others: an application's put that committed
between that read and the import's write was overwritten by the source's older value, a lost
update. put_item takes unless_newer_than: an item updated after it (and not expired) is kept,
decided under the item's lock, and its new column written says which; the import's puts pass the
source's updated_at and count a put so refused as kept.

Only re-runnable definitions change (sql/idempotent/080_store.sql; put_item is dropped and
created again with its new signature and result).

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0045"
down_revision = "0044"
upgrade, downgrade = functions_only(revision)
