"""From a turn to labelled pieces sized for the embedding model."""

from __future__ import annotations

from dataclasses import dataclass

from pgmem.embedders.base import Embedder
from pgmem.errors import InputError
from pgmem.packing import pack_text, utf8_len
from pgmem.turns import Turn, format_label, split_sources

#: Seed 000: at most 1,200 UTF-8 bytes per piece, label included.
DEFAULT_MAX_BYTES = 1200


@dataclass(frozen=True)
class Piece:
    unit_kind: str
    source_index: int
    label: str
    body: str

    @property
    def text(self) -> str:
        """What is embedded: the label, then the body."""
        return f"{self.label} {self.body}"


def turn_pieces(turn: Turn, embedder: Embedder | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> list[Piece]:
    """Role-split sources, each packed by sentence under the byte budget and the model's
    token limit, every piece starting with its label (counted against both budgets)."""
    pieces: list[Piece] = []
    for source in split_sources(turn.messages):
        label = format_label(turn.index, source.name, turn.time)
        label_bytes = utf8_len(label) + 1  # the space between label and body
        if label_bytes >= max_bytes - 4:
            raise InputError(f"label {label!r} leaves no room in a {max_bytes}-byte piece")
        max_tokens = None
        if embedder is not None:
            label_tokens = embedder.count_tokens([label])[0]
            max_tokens = embedder.max_input_tokens - label_tokens
            if max_tokens < 8:
                raise InputError(f"label {label!r} leaves no room under the model's token limit")
        for body in pack_text(
            source.text,
            max_bytes - label_bytes,
            max_tokens=max_tokens,
            count_tokens=embedder.count_tokens if embedder is not None else None,
        ):
            pieces.append(Piece(source.kind, source.index, label, body))
    return pieces
