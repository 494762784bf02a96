"""refresh_word_fold refuses to run under REPEATABLE READ or SERIALIZABLE (functions only).

A fold holds every piece of its set up to its last id: the refresh waits for the scope's writers
in flight, then reads their pieces. Under REPEATABLE READ or SERIALIZABLE its snapshot was taken
before the wait, so the pieces of a writer that committed meanwhile (ids below the fold's last,
above the tail) were in neither the fold nor its tail, and the word side lost them until the
next refresh. The refresh now raises 25000 under those isolation levels, before it changes
anything; READ COMMITTED, the default, is unchanged.

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0066
Revises: 0065
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0066"
down_revision = "0065"
upgrade, downgrade = functions_only(revision)
