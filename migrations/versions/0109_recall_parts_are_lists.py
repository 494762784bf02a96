"""The recall and document search functions refuse part arrays they would misread (functions only).

check_recall_args took part_texts '[0:0]={dogs}' (or an array of arrays) beside one vector: part
1's text was read as NULL, and a hybrid search went without its word side, silently; a NULL part
text did the same. Both arrays must now be one-dimensional and indexed from 1 (22023), and a
hybrid search needs a text for every part (22004).

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0109
Revises: 0108
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0109"
down_revision = "0108"
upgrade, downgrade = functions_only(revision)
