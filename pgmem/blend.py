"""The blend both sides use: unit(w*unit(a) + (1-w)*unit(b)). SQL twin: pgmem.blend."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pgmem.errors import InputError

F32 = npt.NDArray[np.float32]

DEFAULT_WEIGHT = 0.8


def unit(v: F32) -> F32:
    """Scale rows (or one vector) to length one; zero rows stay zero."""
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    out: F32 = np.where(norms > 0, v / np.where(norms > 0, norms, 1), v).astype(np.float32)
    return out


def blend(piece: F32, context: F32, weight: float = DEFAULT_WEIGHT) -> F32:
    """Blend one vector (or rows) with a context vector (or matching rows)."""
    if not 0.0 <= weight <= 1.0:
        raise InputError(f"weight must be between 0 and 1, got {weight}")
    mixed = weight * unit(piece).astype(np.float64) + (1 - weight) * unit(context).astype(np.float64)
    return unit(mixed.astype(np.float32))


def unit_mean(vectors: F32) -> F32:
    """unit(mean of unit rows): a turn's context vector. SQL twin: pgmem.unit_mean."""
    return unit(unit(vectors).mean(axis=0).astype(np.float32))
