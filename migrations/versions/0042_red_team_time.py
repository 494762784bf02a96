"""SQL holds a turn time pgmem can read back.

A red-team pass of time handling found that pgmem.put_turn / put_turns stored any timestamptz
as a turn's time: an infinite one from SQL, and from Python a time whose UTC instant falls
outside years 1 to 9999 (0001-01-01T00:00+14:00 is 1 BC in UTC). pgmem reads stored turn
times back as Python datetimes (rebuild, the MCP thread list), so such a turn made every later
rebuild of its scope fail. pgmem._turn_problem now refuses it (22023 naming turn_time): a
failed turn in put_turns, an error from put_turn.

Only re-runnable definitions change (sql/idempotent/020_ingest.sql).

Revision ID: 0042
Revises: 0041
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0042"
down_revision = "0041"
upgrade, downgrade = functions_only(revision)
