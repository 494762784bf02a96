"""The word side's sums as double precision (issue 26): pgmem.word_candidates adds each part's
word weights in whole nano-units held as double precision (exact below 2^53, which a part's sum
never reaches) instead of bigint, whose sum accumulates 128-bit integers and makes every
piece's sum a numeric. The same sums and rows; 8-part hybrid recall on a 100,000-piece scope
119.2 -> 97.67 ms side by side (docs/bench/recall-ab-0034.txt).

Only re-runnable definitions change (sql/idempotent/030_recall.sql); no table changes.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0034"
down_revision = "0033"
upgrade, downgrade = functions_only(revision)
