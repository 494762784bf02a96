"""Hybrid recall counts a piece found only by the word side at most as much as a vector rank
(its word rank weighs min(pgmem.word_weight, 1)); a piece both sides found keeps the full word
weight. At word weight 2 for every piece, a word-only first hit outranked the vector side's
first, and the 30-question coverage store lost 7.2 points against weight 1
(docs/evaluation.md, section 2a, "Word-only hits").

Only re-runnable definitions change (sql/idempotent); no table changes.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from pgmem.sqlfiles import functions_only

revision = "0011"
down_revision = "0010"
upgrade, downgrade = functions_only(revision)
