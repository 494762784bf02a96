"""The floor's exception for a named time (issue 29): with a time window (the message's date
expressions, or time_from / time_to), the fused ranking's first pgmem.window_head pieces (default
1) that the window found are kept whatever their cosine, as pgmem.floor_head keeps a related
part's first hit. Before, a part with nothing above the floor came back empty even when the
message named the time of the turn it ranked first: on the confirmation half of LongMemEval's
oracle set, two temporal questions lost top-1 above the floor that way (docs/evaluation.md).

Only re-runnable definitions change (sql/idempotent/030_recall.sql); no table changes.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0029"
down_revision = "0028"
upgrade, downgrade = functions_only(revision)
