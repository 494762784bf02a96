"""Hybrid recall scores a piece's words by their rarity: pgmem.distinctive_words (each distinctive
word of a part with the number of pieces it is in and its BM25 inverse document frequency)
replaces pgmem.distinctive_word_query, and memory_recall ranks word candidates by the summed
weights of the words they contain instead of ts_rank_cd (docs/evaluation.md, section 2a).

Only re-runnable definitions change (sql/idempotent); no table changes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from pgmem.sqlfiles import functions_only

revision = "0007"
down_revision = "0006"
upgrade, downgrade = functions_only(revision)
