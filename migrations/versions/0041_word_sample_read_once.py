"""The word side reads its stored sample once a call; SQL holds two more of the facts' and the log's rules.

pgmem._word_postings read the fold head's sample (a JSON object of about 2,300 lexemes, 50 kB,
stored out of line) into a variable, and PL/pgSQL keeps a stored value as a pointer: each of the
message's words looked up in it (two lookups a word) detoasted the whole 50 kB again (1,404
buffer reads for the 95 words of an 8-part message). It is now detoasted once, when read. The
same words and pieces; 8-part hybrid recall on a 2,000-piece scope 0.91 of the time
(docs/bench/recall-ab-0041.txt). And the stored word lists it reads directly (a thread's, the
fold's tail, the sample when counted) are unnested in the select list instead of in FROM: the
same rows, 8-part hybrid in a 300-piece thread of a 100,000-piece scope 0.88-0.89 of the time
(docs/bench/recall-ab-0041-unnest.txt).

And two rules SQL did not hold (found by a red-team pass): add_facts stored a body of only
whitespace and a negative turn index, which Python's check_fact refuses; log_recall stored a
JSON scalar as a recall's results. Each is now a 22023 naming the entry.

Only re-runnable definitions change (sql/idempotent/020_ingest.sql, 030_recall.sql).

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0041"
down_revision = "0040"
upgrade, downgrade = functions_only(revision)
