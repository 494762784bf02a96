"""Two databases of one server migrated at once both create the missing group roles (functions only).

On a server without pgmem_owner, pgmem_app and pgmem_reader, the migrations of two of its
databases at once (two services, a deploy's parallel steps) both found the roles missing and
created them: roles are the server's, the run lock is the database's, so the second CREATE ROLE
waited for the first's commit and failed on pg_authid's unique name (23505), its revisions
rolled back. A role created meanwhile is taken as created now (sql/idempotent/050_security.sql,
900_grants.sql).

Only re-runnable definitions change.

Revision ID: 0099
Revises: 0098
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0099"
down_revision = "0098"
upgrade, downgrade = functions_only(revision)
