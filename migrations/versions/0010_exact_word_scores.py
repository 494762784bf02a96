"""Hybrid recall sums a piece's word score as numeric, exact in any order. The float sum's last
bit followed the order the plan added the words in, so pieces holding the same words (a tie,
broken by piece id) ranked in an order that moved with the plan, and with the other scopes
stored in the table: 8 of 236 questions of the pooled evaluation did (docs/evaluation.md,
section 2a).

Only re-runnable definitions change (sql/idempotent); no table changes.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from pgmem.sqlfiles import functions_only

revision = "0010"
down_revision = "0009"
upgrade, downgrade = functions_only(revision)
