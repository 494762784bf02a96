"""Hybrid recall weighs the word ranking twice the vector ranking by default
(`pgmem.word_weight` 2, was 1). Measured on the full development sets at word weight 0.7 to 3
(docs/evaluation.md, section 2a, "Word weight 2"); a session may still set pgmem.word_weight.
`pgmem.distinctive_words` samples a large scope's first 1,000 pieces by id, not in whatever
order the plan reads them, so the same pieces always give the same words.

Only re-runnable definitions change (sql/idempotent); no table changes.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from pgmem.sqlfiles import functions_only

revision = "0009"
down_revision = "0008"
upgrade, downgrade = functions_only(revision)
