"""apply_retention removes every scope's records of deleted store keys older than 30 days (functions only).

pgmem.store_tombstone (the sha256 of a deleted or expired store key) and pgmem.forgotten_scope
(the sha256 of a forgotten scope) are kept 30 days (docs/security.md), but only the scope's next
record or the next forget_scope pruned them: a namespace whose last delete was long ago, or a
database where no scope was forgotten since, kept them for ever. apply_retention now removes the
records older than 30 days of every scope (with a retention setting or not), inside each scope,
found through a maintenance_read policy on store_tombstone (SELECT only, as on retention).

Only re-runnable definitions change (sql/idempotent/075_retention.sql).

Revision ID: 0101
Revises: 0100
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0101"
down_revision = "0100"
upgrade, downgrade = functions_only(revision)
