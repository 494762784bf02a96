"""Recall made cheaper where it read more than it needed; the same rows, ranks and scores.

- The word side never scans the word table: `_word_postings` runs with enable_seqscan off. A
  word's read stops after share of the searched pieces, and for a small scope in a table of many
  scopes the planner expected a scan to find them early, then computed every row's word keys for
  every word: 3.5 s for a 2-part question on a 120-piece scope among 690 (19,000 pieces), 8.7 ms
  through the word index.
- A thread search reads only its thread, however the connection was used before. PL/pgSQL
  keeps a generic plan after five calls, and a generic plan of "thread IS NULL OR thread_id =
  thread" reads the whole scope: a connection that had run scope-wide exact searches then took
  about 55 ms a part to search a 300-piece thread of a 100,000-piece scope, 0.5 ms with its own
  plan. `_memory_candidates` and `_fact_candidates` search the scope and a thread in two
  statements; `_window_candidates` and `empty_recall_reason` are planned with each call's values
  (plan_cache_mode force_custom_plan).
- In a thread of at most three pieces per word of the message, the word side reads the
  thread's pieces' words once; each word's read through the word index ANDed the word's postings
  in the whole scope with the thread, so it cost with the scope's size (an 8-part message in a
  300-piece thread of a 100,000-piece scope: 64.39 ms for the reads, 5.4 this way).
- `word_candidates` sums each part's postings unnested in the select list and as bigint.
- Recall reads a turn's time only where it is used: each part's first recency_depth hits
  (recency), and every fused piece only when since / until bound the recall. Before, hybrid
  recall looked up the turn of every fused piece, a few hundred for an 8-part message.

Side by side: `python -m pgmem.lab.bench.recall_ab` (docs/scaling.md).

Only re-runnable definitions change (sql/idempotent); no table changes.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-05
"""

from pgmem.sqlfiles import functions_only

revision = "0027"
down_revision = "0026"
upgrade, downgrade = functions_only(revision)
