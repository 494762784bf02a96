"""A synthetic store that looks like agent memory to an index.

Vectors are not uniform noise (the worst case for a graph index, and unlike text embeddings):
topics are points of a low-rank subspace plus a little isotropic noise, a piece sits near its
topic (cosine about 0.65 before the turn blend), a turn stays on one topic, and a scope talks
about a few hundred topics with a Zipf skew. Scope sizes are skewed (most scopes are small, a
few hold 100,000+ pieces), 20% of the plane's rows are document units, and every scope has
facts (one per ten pieces) at the fact plane's own dimension."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pgmem.errors import InputError

F32 = npt.NDArray[np.float32]

#: Scope sizes (rows in the piece plane: memory + document units) and how many scopes of each.
PRESETS: dict[str, list[tuple[int, int]]] = {
    "100k": [(100, 60), (500, 20), (2_000, 10), (20_000, 1), (100_000, 1)],
    "1m": [(100, 300), (500, 100), (2_000, 60), (20_000, 10), (100_000, 2), (200_000, 2)],
    # A few seconds: for trying the command, not for figures.
    "tiny": [(100, 10), (2_000, 4), (8_000, 1)],
}
DOC_SHARE = 0.2
FACTS_PER_PIECE = 0.1
PIECES_PER_TURN = 6
UNITS_PER_DOCUMENT = 20
WORDS = (
    "deploy",
    "config",
    "cache",
    "latency",
    "index",
    "shard",
    "replica",
    "vacuum",
    "schema",
    "migration",
    "retry",
    "timeout",
    "queue",
    "worker",
    "invoice",
    "customer",
    "refund",
    "shipment",
    "warehouse",
    "route",
    "driver",
    "pallet",
    "export",
    "label",
    "carrier",
    "tracking",
    "order",
    "dog",
    "walk",
    "vet",
    "food",
    "leash",
    "park",
    "weekend",
    "trip",
    "hotel",
    "flight",
    "booking",
    "passport",
    "visa",
    "budget",
    "meeting",
    "deadline",
    "review",
    "commit",
    "branch",
    "merge",
    "test",
    "flaky",
    "build",
    "pipeline",
    "alert",
    "page",
    "incident",
    "postmortem",
)


@dataclass(frozen=True)
class ScopeSpec:
    scope_id: str
    rows: int  # memory pieces + document units
    with_documents: bool
    topics: npt.NDArray[np.int64]  # indexes into the topic pool
    topic_weights: npt.NDArray[np.float64]

    @property
    def documents(self) -> int:
        return round(self.rows * DOC_SHARE) if self.with_documents else 0

    @property
    def memory(self) -> int:
        return self.rows - self.documents

    @property
    def facts(self) -> int:
        return max(10, int(self.rows * FACTS_PER_PIECE))

    @property
    def bucket(self) -> int:
        return self.rows


class Space:
    """Topic centres in a low-rank subspace; samples around them, unit length."""

    def __init__(self, rng: np.random.Generator, dims: int, topics: int, rank: int = 48) -> None:
        q, _ = np.linalg.qr(rng.standard_normal((dims, rank)))
        self.basis = q.T.astype(np.float32)  # rank x dims, orthonormal rows
        self.dims = dims
        z = rng.standard_normal((topics, rank)).astype(np.float32) @ self.basis
        self.centres = _unit(_unit(z) + 0.35 * _unit(rng.standard_normal((topics, dims)).astype(np.float32)))

    def around(self, rng: np.random.Generator, topic_ids: npt.NDArray[np.int64], spread: float = 1.15) -> F32:
        """Unit vectors near the given topics (cosine to the centre about 1/sqrt(1+spread^2))."""
        n = len(topic_ids)
        rank = self.basis.shape[0]
        structured = _unit(rng.standard_normal((n, rank)).astype(np.float32) @ self.basis)
        iso = _unit(rng.standard_normal((n, self.dims)).astype(np.float32))
        return _unit(self.centres[topic_ids] + spread * _unit(structured + 0.6 * iso))


def _offset(scope_id: str, n: int) -> int:
    """Where a scope starts reading the text pool: scopes hold different text."""
    return int.from_bytes(hashlib.sha256(scope_id.encode()).digest()[:8], "big") % n


def _unit(a: F32) -> F32:
    out: F32 = (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32)
    return out


@dataclass(frozen=True)
class Turn:
    scope_id: str
    thread_id: str
    turn_index: int
    topic: int
    vectors: F32
    labels: list[str]
    bodies: list[str]
    messages: str
    content_hash: bytes


@dataclass(frozen=True)
class Document:
    scope_id: str
    document_id: str
    vectors: F32
    chunk_bodies: list[str]
    unit_chunks: list[int]
    spans: list[tuple[int, int]]
    labels: list[str]
    bodies: list[str]


class Store:
    """The plan of a synthetic store and generators of its rows (deterministic from the seed)."""

    def __init__(
        self, preset: str, piece_dims: int, fact_dims: int, seed: int = 0, bodies: Sequence[str] | None = None
    ) -> None:
        if preset not in PRESETS:
            raise InputError(f"size must be one of {sorted(PRESETS)}, got {preset!r}")
        self.preset = preset
        self.seed = seed
        rng = np.random.default_rng(seed)
        n_topics = 4000
        self.pieces = Space(rng, piece_dims, n_topics)
        self.facts = Space(rng, fact_dims, n_topics)
        self.scopes: list[ScopeSpec] = []
        for rows, count in PRESETS[preset]:
            for i in range(count):
                k = int(np.clip(rows // 40, 5, 400))
                topics = rng.choice(n_topics, size=k, replace=False).astype(np.int64)
                w = 1.0 / np.arange(1, k + 1) ** 0.8
                # Half of the 2,000-row scopes hold no documents: the issue-4 comparison.
                with_docs = not (rows == 2_000 and i % 2 == 1)
                suffix = "" if with_docs else "-nodoc"
                self.scopes.append(ScopeSpec(f"s{rows}-{i}{suffix}", rows, with_docs, topics, w / w.sum()))
        word_rng = np.random.default_rng(seed + 1)
        #: Real text (`pgmem bench --text`): pieces carry these bodies, each scope from its own
        #: offset into them, instead of words drawn from WORDS.
        self.real_text = bool(bodies)
        self._bodies = (
            list(bodies)
            if bodies
            else [" ".join(word_rng.choice(WORDS, size=int(word_rng.integers(30, 110)))) + "." for _ in range(4096)]
        )

    @property
    def total_rows(self) -> int:
        return sum(s.rows for s in self.scopes)

    def turns(self, scope_ids: set[str] | None = None) -> Iterator[Turn]:
        """Every memory turn, scopes interleaved in random order as a multi-tenant service writes
        them (so a scope's rows are scattered over the table, as they would be)."""
        rng = np.random.default_rng(self.seed + 2)
        specs = [s for s in self.scopes if scope_ids is None or s.scope_id in scope_ids]
        per_scope = [max(1, -(-s.memory // PIECES_PER_TURN)) for s in specs]
        order = np.repeat(np.arange(len(specs)), per_scope)
        rng.shuffle(order)
        written = [0] * len(specs)
        next_turn = [0] * len(specs)
        for si in order:
            spec = specs[si]
            n = min(PIECES_PER_TURN, spec.memory - written[si])
            if n <= 0:
                continue
            t = next_turn[si]
            next_turn[si] += 1
            written[si] += n
            topic = int(rng.choice(spec.topics, p=spec.topic_weights))
            vectors = self.pieces.around(rng, np.full(n, topic, dtype=np.int64))
            thread = f"t{t // 50}"
            if self.real_text:
                at = _offset(spec.scope_id, len(self._bodies)) + t * PIECES_PER_TURN
                bodies = [self._bodies[(at + j) % len(self._bodies)] for j in range(n)]
            else:
                bodies = [f"topic {topic}: {self._bodies[(t * 7 + j) % len(self._bodies)]}" for j in range(n)]
            labels = [f"[Turn {t} · {'User' if j == 0 else 'Assistant'} · Oct 16, 2:02 PM]" for j in range(n)]
            messages = json.dumps([{"role": "user", "content": bodies[0]}])
            digest = hashlib.sha256(f"{spec.scope_id}/{thread}/{t}/{self.seed}".encode()).digest()
            yield Turn(spec.scope_id, thread, t, topic, vectors, labels, bodies, messages, digest)

    def documents(self) -> Iterator[Document]:
        rng = np.random.default_rng(self.seed + 3)
        for spec in self.scopes:
            left = spec.documents
            d = 0
            while left > 0:
                n = min(UNITS_PER_DOCUMENT, left)
                left -= n
                topic = int(rng.choice(spec.topics, p=spec.topic_weights))
                vectors = self.pieces.around(rng, np.full(n, topic, dtype=np.int64))
                bodies = [self._bodies[(d * 13 + j) % len(self._bodies)] for j in range(n)]
                chunks = max(1, n // 5)
                unit_chunks = [j % chunks for j in range(n)]
                chunk_bodies = [
                    " ".join(b for b, c in zip(bodies, unit_chunks, strict=True) if c == k) for k in range(chunks)
                ]
                spans: list[tuple[int, int]] = []
                offsets = [0] * chunks
                for b, c in zip(bodies, unit_chunks, strict=True):
                    spans.append((offsets[c], offsets[c] + len(b)))
                    offsets[c] += len(b) + 1
                labels = [f"[Doc {d} · {c}]" for c in unit_chunks]
                yield Document(spec.scope_id, f"doc-{d}.md", vectors, chunk_bodies, unit_chunks, spans, labels, bodies)
                d += 1

    def fact_batches(self, batch: int = 2000) -> Iterator[tuple[str, list[str], F32]]:
        rng = np.random.default_rng(self.seed + 4)
        for spec in self.scopes:
            left = spec.facts
            while left > 0:
                n = min(batch, left)
                first = spec.facts - left
                left -= n
                topics = rng.choice(spec.topics, size=n, p=spec.topic_weights).astype(np.int64)
                # Numbered: facts are stored once per content (pgmem.add_facts), and a scope of
                # 10,000 facts must hold 10,000 rows, not one per topic.
                bodies = [
                    f"Fact {first + i}: in topic {t} the team decided something about {WORDS[t % len(WORDS)]}."
                    for i, t in enumerate(topics)
                ]
                yield spec.scope_id, bodies, self.facts.around(rng, topics)

    def queries(self, spec: ScopeSpec, parts: int, rng: np.random.Generator, fact_plane: bool = False) -> F32:
        """Part vectors of one message about the scope's topics, blended with the whole message
        as pgmem.recall does (weight 0.8)."""
        space = self.facts if fact_plane else self.pieces
        topics = rng.choice(spec.topics, size=parts, p=spec.topic_weights).astype(np.int64)
        raw = space.around(rng, topics)
        whole = _unit(raw.mean(axis=0, keepdims=True))
        return _unit(0.8 * raw + 0.2 * whole)
