"""Document search is not crowded out by one chunk of many units (0097).

A long table or code block is packed into many units of one chunk, all with the same label and
much the same text. Their vectors lie together: for a query near them, the `candidates` nearest
units (50 by default) could all be that chunk's, and after each chunk was kept once the part
returned that one chunk although more, over the floor, were asked for. The real MiniLM showed it
on a 3,000-row table (219 units) beside eight deploy notes: "when is the deploy window in region
eu?" with x=5 returned the table alone. The vectors here are made to order (a stand-in model: a
table row's text points one way, a note's at cosine 0.8 to it), the database is real and the
caller the app login."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import psycopg
import pytest

from pgmem.documents.store import Document, add_documents, search_documents
from pgmem.embedders.base import FloatArray
from tests.security_helpers import DIMS, HashEmbedder, hash_vector

Conn = psycopg.Connection[tuple[object, ...]]


class TopicEmbedder(HashEmbedder):
    """Text holding "alpha" (a table row) or the query word points along one axis, text holding
    "bravo" (a note) at cosine about 0.8 to it; each with a little of its own hash vector."""

    def embed(self, texts: Sequence[str]) -> FloatArray:
        out = np.zeros((len(texts), DIMS), dtype=np.float32)
        for i, t in enumerate(texts):
            v = np.zeros(DIMS, dtype=np.float32) if "zzquery" in t else 0.05 * hash_vector(t)
            if "alpha" in t or "zzquery" in t:
                v[0] += 1.0
            elif "bravo" in t:
                v[0] += 1.0
                v[1] += 0.7
            out[i] = v / np.linalg.norm(v)
        return out


EMB = TopicEmbedder()
TABLE = Document(
    "servers.md",
    "# Servers\n\n| window | region |\n|---|---|\n" + "".join(f"| alpha {i} | eu |\n" for i in range(600)),
)
NOTES = [Document(f"note{i}.md", f"# Note {i}\n\nbravo, the deploy window of team {i}\n") for i in range(6)]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_a_chunk_of_many_units_near_the_query_leaves_room_for_the_others(conn: Conn, mode: str) -> None:
    """The table chunk has 24 units nearer than any note, candidates=10, x=5: the part returned
    the table alone (1 of 5; the notes, at cosine 0.8, over the floor). Now it is searched again
    with more candidates and returns the table and four notes; the same hits as a search given
    enough candidates at once."""
    report = add_documents(conn, "crowd", [TABLE, *NOTES], EMB, max_bytes=400)
    assert report.inserted == 7 and report.units >= 30  # the table 24, each note 2
    hits = search_documents(conn, "crowd", "zzquery", EMB, x=5, candidates=10, mode=mode).groups[0].hits
    assert [h.document_id for h in hits][:1] == ["servers.md"]
    assert len(hits) == 5, [(h.document_id, round(h.cosine, 3)) for h in hits]
    assert {h.document_id for h in hits[1:]} <= {d.id for d in NOTES}
    assert min(h.cosine for h in hits) > 0.7
    wide = search_documents(conn, "crowd", "zzquery", EMB, x=5, candidates=80, mode=mode).groups[0].hits
    assert [(h.chunk_id, h.piece_id, h.rank) for h in hits] == [(h.chunk_id, h.piece_id, h.rank) for h in wide]
    # A part whose nearest units are all under the floor stays as it was: nothing.
    assert (
        search_documents(conn, "crowd", "zzquery", EMB, x=5, candidates=10, floor=0.9999, mode=mode).groups[0].hits
        == []
    )


def test_only_the_crowded_part_is_searched_again(conn: Conn) -> None:
    """Two parts in one call (SQL, as a service in another language sends them): the first is
    crowded by the table, the second, nearer the notes, is not. The first gets its x chunks; the
    second's hits are those it gets alone, whatever the first part's second search."""
    add_documents(conn, "crowd2", [TABLE, *NOTES], EMB, max_bytes=400)
    table_q, notes_q = EMB.embed(["zzquery", "bravo"])

    def search(vectors: list[FloatArray]) -> list[tuple[int, int, int, str]]:
        literal = [f"[{','.join(str(float(v)) for v in vector)}]" for vector in vectors]
        with conn.transaction():
            conn.execute("SELECT set_config('pgmem.scope', 'crowd2', true)")
            rows = conn.execute(
                "SELECT part_no, rank, chunk_id, document_id FROM pgmem.document_search('crowd2', %s::vector[],"
                " x => 5, candidates => 10, mode => 'vector')",
                (literal,),
            ).fetchall()
        return [(int(str(r[0])), int(str(r[1])), int(str(r[2])), str(r[3])) for r in rows]

    both = search([table_q, notes_q])
    first = [r for r in both if r[0] == 1]
    assert len(first) == 5 and first[0][3] == "servers.md", first
    assert [r[1:] for r in both if r[0] == 2] == [r[1:] for r in search([notes_q])]
    assert [r[1:] for r in first] == [r[1:] for r in search([table_q])]
