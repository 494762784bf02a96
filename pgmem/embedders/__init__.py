"""Embedding models: the Embedder protocol, the local default and an OpenAI-compatible one."""

from __future__ import annotations

from pgmem.config import Settings
from pgmem.embedders.base import Embedder, FloatArray, check_vectors, request_batches

__all__ = ["Embedder", "FloatArray", "check_vectors", "from_settings", "request_batches"]


def from_settings(settings: Settings, *, plane: str = "piece") -> Embedder:
    """The configured embedder for a vector plane ('piece' or 'fact')."""
    dims = settings.piece_dims if plane == "piece" else settings.fact_dims
    if settings.embedder == "local":
        from pgmem.embedders.local import DIMS
        from pgmem.errors import ConfigError

        if dims != DIMS:
            raise ConfigError(
                f"the local model is {DIMS}-d; PGMEM_{plane.upper()}_DIMS={dims} cannot be used "
                "with it (MiniLM is not trained for truncated dimensions)"
            )
        return _local()
    from pgmem.embedders.openai_compat import OpenAIEmbedder

    return OpenAIEmbedder(
        model=settings.openai_model,
        dimensions=dims,
        api_key=settings.openai_api_key,
        base_url=settings.openai_base_url,
    )


_LOCAL: Embedder | None = None


def _local() -> Embedder:
    # One ONNX session per process: loading it costs ~0.3 s and 100 MB.
    global _LOCAL
    if _LOCAL is None:
        from pgmem.embedders.local import LocalEmbedder

        _LOCAL = LocalEmbedder()
    return _LOCAL
