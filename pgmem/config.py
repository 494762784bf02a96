"""Settings read from the environment. Only the CLI (and test/eval entry points) call
`Settings.from_env`; library functions take explicit arguments."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from pgmem.errors import ConfigError

#: Dimensions of the vector columns when the embedder is a local model (MiniLM or e5-small).
LOCAL_DIMS = 384
#: The seed's OpenAI setup: 256-d pieces, 1,024-d facts (text-embedding-3 truncation).
OPENAI_PIECE_DIMS = 256
OPENAI_FACT_DIMS = 1024


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


@dataclass(frozen=True)
class Settings:
    """Everything configurable from the environment."""

    home: Path
    database_url: str | None
    embedder: str  # "local", "openai" or "e5"
    openai_model: str
    openai_base_url: str | None
    openai_api_key: str | None
    piece_dims: int
    fact_dims: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = Path(env.get("PGMEM_HOME") or platformdirs.user_data_dir("pgmem"))
        embedder = (env.get("PGMEM_EMBEDDER") or "local").strip().lower()
        if embedder not in ("local", "openai", "e5"):
            raise ConfigError(f"PGMEM_EMBEDDER must be 'local', 'openai' or 'e5', got {embedder!r}")
        # Both local models (MiniLM and e5-small) are 384-d and not trained for truncation.
        default_piece = OPENAI_PIECE_DIMS if embedder == "openai" else LOCAL_DIMS
        default_fact = OPENAI_FACT_DIMS if embedder == "openai" else LOCAL_DIMS
        return cls(
            home=home,
            database_url=env.get("DATABASE_URL") or None,
            embedder=embedder,
            openai_model=env.get("PGMEM_OPENAI_MODEL") or "text-embedding-3-small",
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            openai_api_key=env.get("OPENAI_API_KEY") or None,
            piece_dims=_int(env, "PGMEM_PIECE_DIMS", default_piece),
            fact_dims=_int(env, "PGMEM_FACT_DIMS", default_fact),
        )

    @property
    def pgdata(self) -> Path:
        return self.home / "pgdata"
