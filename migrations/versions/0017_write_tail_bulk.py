"""The write tail of indexed scopes and the bulk write path (issue 26).

`pgmem.scope_index_plan` builds a scope's piece index over the pieces written so far (`WHERE
... AND piece_id <= <n>`): later pieces are not inserted into the graph, and
`pgmem._memory_candidates` searches them exactly beside it; the plan folds the tail in
(`action = 'fold'`) once it holds `max_tail` pieces. Indexes built before this revision hold
every piece; the first plan after it rebuilds them with a tail (`tail => false` keeps them).
`pgmem.put_turns` stores many turns of a scope in one call; `put_turn` is its one-turn case.

Only re-runnable definitions change (sql/idempotent); no table changes.

Revision ID: 0017
Revises: 0015
Create Date: 2026-12-03
"""

from pgmem.sqlfiles import functions_only

revision = "0017"
down_revision = "0015"
upgrade, downgrade = functions_only(revision)
