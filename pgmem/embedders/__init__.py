"""Embedding models: the Embedder protocol, the local default (MiniLM), e5-small and an
OpenAI-compatible one."""

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
    if settings.embedder == "e5":
        from pgmem.embedders.e5 import DIMS as E5_DIMS
        from pgmem.errors import ConfigError

        if dims != E5_DIMS:
            raise ConfigError(
                f"the e5 model is {E5_DIMS}-d; PGMEM_{plane.upper()}_DIMS={dims} cannot be used "
                "with it (e5-small is not trained for truncated dimensions)"
            )
        return _e5()
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


_E5: Embedder | None = None


def _e5() -> Embedder:
    # One engine per process: loading the 4-bit weights costs ~70 MB.
    global _E5
    if _E5 is None:
        from pgmem.embedders.e5 import E5Embedder

        _E5 = E5Embedder()
    return _E5
