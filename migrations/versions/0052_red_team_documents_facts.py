"""A red-team pass over documents and facts (functions only).

- forget_document locks the threads of the facts it deletes first: it deleted the facts about a
  document (section id or id#anchor) without their threads' locks and, held back by a fact
  retention had deleted with its turn, waited while holding another fact retention was about to
  delete, a deadlock. It now locks those threads (their store items first) sorted, after the
  document and before anything is deleted, as forget_fact and apply_retention take them
  (docs/architecture.md, "Lock order").
- forget_fact and forget_document take a thread row left with no turn and no fact
  (pgmem._drop_empty_threads, as forget_turn did): add_facts creates the row of a thread its
  facts name, and forgetting the facts left it, the thread's name being the caller's data.
- add_facts refuses an array that is not one-dimensional from 1 (22023 naming it): its arrays
  were read by position from 1, so one of the right length with other bounds or more
  dimensions stored a fact under another's thread, turn or section, or under none.

Only re-runnable definitions change (sql/idempotent/070_forget.sql, 020_ingest.sql).

Revision ID: 0052
Revises: 0051
Create Date: 2026-12-09
"""

from pgmem.sqlfiles import functions_only

revision = "0052"
down_revision = "0051"
upgrade, downgrade = functions_only(revision)
