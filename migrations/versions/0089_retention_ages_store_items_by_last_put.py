"""Retention ages a LangGraph store item by its last put, not by its creation (functions only).

A store item is its thread's turn 0, and docs/operations.md says keep_days removes the items not
put again within that many days. The item's turn is timed at the item's created_at, which a put
again keeps (an unchanged put does not even write the turn), and pgmem._expired_turns aged turns by
turn_time: an item created 40 days ago and put again today, with a changed value or the same one,
was removed by keep_days => 30 with the one never put again. It ages such a turn by the item's
updated_at now. Found reading the store's turn times against the retention docs;
tests/test_retention.py replays it (before: both items removed, after: only the one not put again).

Only re-runnable definitions change (sql/idempotent/075_retention.sql).

Revision ID: 0089
Revises: 0088
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0089"
down_revision = "0088"
upgrade, downgrade = functions_only(revision)
