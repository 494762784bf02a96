"""Fact-plane recall logs name facts as Python does; the fact plane's model hint (functions only).

Python's fact_recall returns a fact as a hit's piece_id (Hit.piece_id; `pgmem facts search
--json` prints it so), and the forget functions looked for a fact-plane log's facts under
fact_id only: a fact recall logged with pgmem.log_recall as Python returned it kept the body of a
fact forget_fact (or forget_document, or a forget of its thread's turn by id) had forgotten, and
log_recall kept the hit of a fact forgotten between the recall and its log. A fact-plane hit's
fact is its fact_id now, or its piece_id when it has none (pgmem._forget_logs,
pgmem._drop_gone_hits, pgmem.log_recall).

pgmem reembed moves a scope's pieces, not its facts, which keep the model they were stored with;
a fact write or recall with another model (bind_scope_model, check_recall_args) was refused with a
hint to run pgmem reembed, which changed nothing for them. The fact plane's hint says so now.

empty_recall_reason(scope, thread, metadata_filter, 'fact') ignored the filter, which fact_recall
does not take, and answered for an unfiltered recall; it raises 22023 now, as the document plane.

add_facts inserted its threads as a set, then locked them, and did both again when a thread had
been forgotten in between: it then inserted that thread anew while holding a later thread it had
created, and another add_facts that had created the forgotten thread meanwhile and waited for the
later one deadlocked with it (40P01). It creates and locks one thread at a time, in key order.

Only re-runnable definitions change (sql/idempotent/010_vectors.sql, 020_ingest.sql, 030_recall.sql,
070_forget.sql).

Revision ID: 0114
Revises: 0113
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0114"
down_revision = "0113"
upgrade, downgrade = functions_only(revision)
