"""The word side in a thread reads the scope's size from its fold, and a word's ids unsorted (functions only).

In a thread, `_word_postings` reads the thread's words directly when the scope holds at least
2 + (scope pieces) / 3,600 pieces per word of the message, and counted the scope's index
entries as far as that needed on every call: 4,935 of them for an 8-part message in a 300-piece
thread of a 100,000-piece scope, about 1 ms of its 5. A fold of the scope holding that many
pieces now answers (its pieces are all still stored: a delete of one deletes the fold); without
one, or a smaller one, the scope is counted as before. The same words and pieces either way.

A word's pieces read directly (a thread's, and a fold's tail) are aggregated in no order: the
ids are only summed (word_candidates), and sorting the thread's (word, piece) rows to order them
cost about 1 ms more of those 5. `_word_postings.piece_ids` is in no particular order now.

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0098
Revises: 0097
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0098"
down_revision = "0097"
upgrade, downgrade = functions_only(revision)
