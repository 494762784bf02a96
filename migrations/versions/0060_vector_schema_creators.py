"""The install refuses an application or reader login that may create where pgmem looks (functions only).

Every pgmem function searches pgvector's schema, and an overload of an exact type created there
(public.unnest(integer[])) is preferred over pg_catalog's polymorphic one: inside a SECURITY
DEFINER function it ran as pgmem_owner. The install checked whether PUBLIC, pgmem_app or
pgmem_reader may create there, not their LOGIN members, nor what such a member had created there
before (in pgmem the install even handed it to pgmem_owner). Both are refused now (42501), in
pgvector's schema and in pgmem, before pgmem's objects are handed to pgmem_owner.

Only re-runnable definitions change (sql/idempotent/900_grants.sql).

Revision ID: 0060
Revises: 0059
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0060"
down_revision = "0059"
upgrade, downgrade = functions_only(revision)
