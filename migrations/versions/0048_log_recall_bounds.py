"""A logged recall is a row of bounded size (functions only).

pgmem.log_recall stored its message, part texts, thread and results whatever their size: a
caller could write a recall-log row of any size. It now refuses (22023, naming the argument) a
message over 100,000 bytes, part texts over 100,000 bytes together (the bound the MCP server puts
on a query), a thread over 200 characters (a thread id's bound) and results over 16,000,000 bytes
as JSON text (above the about 12 MB a recall of 8 parts of 1,000 hits returns), before it writes
anything. The Python API checks the message and the part texts first.

Only re-runnable definitions change (sql/idempotent/030_recall.sql).

Revision ID: 0048
Revises: 0047
Create Date: 2026-12-06
"""

from pgmem.sqlfiles import functions_only

revision = "0048"
down_revision = "0047"
upgrade, downgrade = functions_only(revision)
