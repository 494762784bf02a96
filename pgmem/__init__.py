"""pgmem: agent memory retrieval inside Postgres.

The SQL functions in schema `pgmem` are the API; this package splits, embeds and
blends, then calls them."""

from pgmem.facts import Fact, add_facts, fact_recall
from pgmem.forget import Forgotten, forget_document, forget_fact, forget_scope, forget_thread, forget_turn
from pgmem.ingest import IngestReport, ingest_turns
from pgmem.recall import Group, Hit, Recall, embed_query, recall
from pgmem.reembed import Reembedded, reembed
from pgmem.splitting import SplitRules, split_prompt_chunks
from pgmem.stats import ScopeStats, stats
from pgmem.turns import Turn, read_jsonl, turn_from_dict

__all__ = [
    "Fact",
    "Forgotten",
    "Group",
    "Hit",
    "IngestReport",
    "Recall",
    "Reembedded",
    "ScopeStats",
    "SplitRules",
    "Turn",
    "add_facts",
    "embed_query",
    "fact_recall",
    "forget_document",
    "forget_fact",
    "forget_scope",
    "forget_thread",
    "forget_turn",
    "ingest_turns",
    "read_jsonl",
    "recall",
    "reembed",
    "split_prompt_chunks",
    "stats",
    "turn_from_dict",
]
