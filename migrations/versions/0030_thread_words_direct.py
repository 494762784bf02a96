"""A thread's words read directly on large scopes (issue 26). In a thread, the word side reads
the thread's pieces' words once when that is cheaper than reading each word's pieces through
the word index, whose cost grows with the scope's size (the word's postings in the whole scope
are ANDed with the thread's range). Before, the rule was a fixed three thread pieces per word
of the message; now it is 2 + (scope pieces) / 3,600, the scope counted only as far as needed
(at most 20,000 pieces). The same rows; 8 parts in a 300-piece thread took 0.49 of the time in a
100,000-piece scope and 0.32 in a 200,000-piece one (docs/bench/recall-ab-0030.txt).

Only re-runnable definitions change (sql/idempotent/030_recall.sql); no table changes.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0030"
down_revision = "0029"
upgrade, downgrade = functions_only(revision)
