"""Change the embedding model of a scope's piece plane without downtime.

The vectors of the new model are written beside the serving ones (`pgmem.stage_vectors`), a
page of pieces at a time, while recall keeps serving the scope's current model; then one
transaction per scope swaps them in (`pgmem.reembed_flip`). The staged vectors stay in the
database, so a run that stops (or fails) resumes where it was: nothing is embedded twice.
Memory pieces, LangGraph store items and document units are re-embedded from their stored
text; the turns' messages are not split again (for new piecing settings, `pgmem rebuild`).

The model is checked against the installed schema before anything is embedded. Facts have a
plane (and model) of their own and are not changed."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pgmem.calls import Call, Embed, Query, sync
from pgmem.documents.store import DEFAULT_UNIT_WEIGHT
from pgmem.embedders.base import Embedder
from pgmem.errors import InputError, ModelMismatchError
from pgmem.text import check_int, check_name, check_number

#: Pieces embedded per request and staged per statement.
PAGE = 256
#: Flips tried before giving up, when writers keep adding pieces of the old model meanwhile.
FLIP_ATTEMPTS = 20

#: (pieces with a vector of the new model, pieces of the scope, seconds so far)
ReembedProgress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class Reembedded:
    """What a model change of one scope did."""

    scope: str
    model_id: str
    previous_model: str | None
    pieces: int  # pieces of the scope
    embedded: int  # pieces embedded by this run (the rest were staged by an earlier one)
    resumed: bool  # an earlier run had staged vectors already
    flipped: bool  # the scope now serves the new model
    turns: int  # turns whose context was rewritten by the flip
    seconds: float
    #: Pieces embedded by this run whose stored text is longer than the new model's input window
    #: (packed for a model with a longer one): the model read them cut. `pgmem rebuild` packs
    #: the turns again for the scope's model; document units come back with `docs add --force`.
    truncated: int = 0

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def _status(scope: str, embedder: Embedder, dims: int) -> Call[tuple[str | None, int, int, int]]:
    row = yield Query(
        scope,
        "SELECT current_model, pieces, staged, pending FROM pgmem.reembed_status(%s, %s, %s)",
        (scope, embedder.model_id, dims),
        one=True,
    )
    return (None if row[0] is None else str(row[0])), int(row[1]), int(row[2]), int(row[3])


def _installed_dims(scope: str) -> Call[int | None]:
    row = yield Query(scope, "SELECT pgmem.column_dims('piece.embedding')", one=True)
    return None if row is None or row[0] is None else int(row[0])


def _stage_pending(
    scope: str,
    embedder: Embedder,
    dims: int,
    page: int,
    started: float,
    done: int,
    total: int,
    progress: ReembedProgress | None,
) -> Call[tuple[int, int]]:
    """Embed and stage every piece still without a vector of the model; returns how many, and
    how many of them were longer than the model's input window."""
    after, embedded, truncated = 0, 0, 0
    while True:
        rows: Sequence[tuple[object, ...]] = yield Query(
            scope,
            "SELECT piece_id, embed_text FROM pgmem.reembed_pending(%s, %s, %s, %s, %s)",
            (scope, embedder.model_id, dims, page, after),
        )
        if not rows:
            return embedded, truncated
        ids = [int(str(r[0])) for r in rows]
        texts = [str(r[1]) for r in rows]
        truncated += sum(n > embedder.max_input_tokens for n in embedder.count_tokens(texts))
        vectors = yield Embed(embedder, texts)
        yield Query(
            scope,
            "SELECT pgmem.stage_vectors(%s, %s, %s, %b::vector[])",
            (scope, embedder.model_id, ids, list(vectors)),
            one=True,
        )
        after = ids[-1]
        embedded += len(ids)
        if progress:
            progress(min(done + embedded, total), total, time.monotonic() - started)


def reembed_call(
    scope: str,
    embedder: Embedder,
    *,
    page: int = PAGE,
    document_weight: float = DEFAULT_UNIT_WEIGHT,
    flip: bool = True,
    progress: ReembedProgress | None = None,
) -> Call[Reembedded]:
    """Move `scope`'s piece plane to `embedder`'s model: stage the new vectors beside the
    serving ones, then (with `flip`) swap them in, in one transaction. Recall serves the old
    model until that transaction commits, and the new one from then on; writers of the scope
    wait for the flip only. Resumable: a second run embeds only what the first did not stage."""
    check_name(scope, "scope")
    # The target's id goes into the model registry (1 to 200 characters, pgmem.embedding_model):
    # refused here, before a page is embedded for a model the registry cannot hold.
    check_name(embedder.model_id, "the new embedder's model_id")
    # Its dimension goes into every step's SQL: numpy's integer (a dims read from an array) was
    # sent as a bigint, and pgmem.reembed_status(..., bigint) "does not exist" was the error.
    dims = check_int(embedder.dims, "the new embedder's dims", 1, 16000)
    # Any integer and real number (numpy's included), as every other call's: np.int64(512) was
    # "page must be an integer ..., got np.int64(512)", np.float32(0.5) "must be between 0 and 1".
    page = check_int(page, "page", 1, 10000)
    document_weight = check_number(document_weight, "document_weight", 0, 1)
    started = time.monotonic()
    # The model check comes first: nothing is embedded for a model the schema cannot store.
    installed = yield from _installed_dims(scope)
    if installed is None:
        raise ModelMismatchError("no vector column piece.embedding is installed: run `pgmem migrate`")
    if installed != dims:
        raise ModelMismatchError(
            f"model {embedder.model_id} gives {dims}-dimensional vectors but piece.embedding was "
            f"installed with {installed} dimensions; a model change keeps the installed dimensions"
        )
    previous, total, staged, pending = yield from _status(scope, embedder, dims)
    if previous is None and total == 0:
        raise InputError(f"scope {scope!r} holds no memory: nothing to re-embed (check the scope name)")
    resumed = staged > 0 and previous != embedder.model_id
    if progress:
        progress(staged, total, time.monotonic() - started)
    embedded, truncated = 0, 0
    flipped, turns = previous == embedder.model_id and pending == 0, 0
    for _ in range(FLIP_ATTEMPTS):
        n, cut = yield from _stage_pending(scope, embedder, dims, page, started, staged + embedded, total, progress)
        embedded, truncated = embedded + n, truncated + cut
        if not flip:
            break
        row = yield Query(
            scope,
            "SELECT flipped, pending, pieces, turns FROM pgmem.reembed_flip(%s, %s, %s, %s)",
            (scope, embedder.model_id, dims, float(document_weight)),
            one=True,
            read_committed=True,  # the flip must see the writers it waits for, as a forget must
        )
        if bool(row[0]):
            flipped, turns = True, int(row[3])
            break
        # Pieces written by the old model while this ran: embed them too, then flip again.
    _, total, _, _ = yield from _status(scope, embedder, dims)
    return Reembedded(
        scope=scope,
        model_id=embedder.model_id,
        previous_model=previous,
        pieces=total,
        embedded=embedded,
        resumed=resumed,
        flipped=flipped,
        turns=turns,
        seconds=time.monotonic() - started,
        truncated=truncated,
    )


reembed = sync(reembed_call)


def scopes_call() -> Call[list[str]]:
    """Every scope the login may maintain: all of them for a superuser or a login member of
    pgmem_owner, none for the application login (row-level security)."""
    rows = yield Query(None, "SELECT scope_id FROM pgmem.maintenance_scopes()")
    return [str(r[0]) for r in rows]


maintenance_scopes = sync(scopes_call)
