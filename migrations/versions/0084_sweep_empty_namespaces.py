"""The DBA's sweep removes the directory entries of scopes that hold no store item (functions only).

A namespace leaves the LangGraph store's directory (pgmem.store_namespace) with its scope's last
item, through pgmem._drop_empty_namespace, which never waits (0039). Two transactions deleting a
namespace's last two items at once each still saw the other's item (its delete uncommitted), so
neither removed the entry, and the namespace stayed listed by list_namespaces with no item until a
later delete or expire_items of that scope found it empty, which may never come.
pgmem.sweep_expired_items (the DBA's pg_cron job) now also removes the entries of every scope
that holds no item, each through _drop_empty_namespace inside its scope (a put in flight keeps
its entry), in the same bytewise pass as the expired items, and returns those scopes with items 0.
A maintenance_read policy on pgmem.store_namespace lets the maintenance login find them
(tests/test_namespace_directory_race.py replays the race).

Only re-runnable definitions change (sql/idempotent/081_store_search.sql; comments in 070_forget.sql
and 080_store.sql).

Revision ID: 0084
Revises: 0083
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0084"
down_revision = "0083"
upgrade, downgrade = functions_only(revision)
