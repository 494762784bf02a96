"""apply_retention reads each scope's setting when it comes to the scope, and does not wait for
a set_retention in flight to record when it applied it; put_turns refuses arrays that
are not lists (functions only).

apply_retention read every scope's setting once, at its start, and then went through the scopes
one by one in one transaction. A setting removed or loosened while it worked on the scopes before
(or a scope forgotten, its setting with it, and written again) was applied all the same: the
scope's old turns went after the application had said to keep them. It now reads the setting
under the scope row when the scope's turn comes, and passes over a scope that has none left.

It recorded applied_at last, after it held the scope's expiring threads, and waited for a
set_retention in flight (which holds the setting's row after the scope row): that transaction's
next write into one of those threads waited for retention, a deadlock (40P01). applied_at is now
left as it was while another transaction holds the row (FOR NO KEY UPDATE SKIP LOCKED).

put_turns (and put_turn through it) refuses an array that is not one-dimensional and indexed
from 1 (22023, as add_facts and put_document do): the lengths it compared were of the first
dimension while unnest read every element, so turn_indexes '{{0,1},{2,3}}' beside threads a and
b stored b at turn 1 and reported turn numbers 3 and 4 of a call of two turns; and a turn's
subscripts read NULL from an array indexed from another bound, so a turn to replace
(replace_hashes '[2:2]={...}') whose turn was gone was never marked skipped and the call looped
until a statement timeout, a backend busy for ever without one.

Only re-runnable definitions change (sql/idempotent/075_retention.sql, 020_ingest.sql);
tests/test_retention_concurrent.py, tests/test_bulk_ingest.py.

Revision ID: 0107
Revises: 0106
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0107"
down_revision = "0106"
upgrade, downgrade = functions_only(revision)
