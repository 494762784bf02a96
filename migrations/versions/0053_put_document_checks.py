"""put_document checks what it stores (functions only).

A heading path element that is not a string was stored as its JSON text (a NULL came back to
Python as "None"), a path that is not a list failed with "cannot extract elements from a
scalar", a negative or NULL unit position was stored, a NULL label or body failed on a NOT NULL
constraint, and an array with other bounds or more dimensions was checked by position from 1
while its entries were stored in order. Each is now refused with 22023 naming the argument or
the unit, and nothing is stored.

Only re-runnable definitions change (sql/idempotent/040_documents.sql).

Revision ID: 0053
Revises: 0052
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0053"
down_revision = "0052"
upgrade, downgrade = functions_only(revision)
