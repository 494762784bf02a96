"""forget_document and put_turns take their threads one at a time in key order (functions only).

forget_document locked the threads of the facts about the document with one SELECT ... FOR
UPDATE, which skipped a thread a forget_thread had deleted meanwhile: an add_facts created it
again with a fact about the document, another add_facts held it (KEY SHARE) and waited for a later
thread the forget held, and the forget, having deleted that fact, waited for that writer at the
thread's delete (40P01). It now takes the threads one at a time in key order, inserting a row it
does not find and deleting it again (a writer creating the thread waits for it), and deletes no
fact of a thread it does not hold.

put_turns inserted its turns' threads as a set, then locked them, and did both again when a
thread had been forgotten in between: it then inserted that thread anew while holding a later
thread it had created, and another put_turns that had created the forgotten thread meanwhile and
waited for the later one deadlocked with it (40P01), as add_facts did before 0114. It inserts
each thread, or locks it when it is stored, one at a time in key order.

Only re-runnable definitions change (sql/idempotent/020_ingest.sql, 070_forget.sql).

Revision ID: 0119
Revises: 0118
Create Date: 2026-12-07
"""

from pgmem.sqlfiles import functions_only

revision = "0119"
down_revision = "0118"
upgrade, downgrade = functions_only(revision)
