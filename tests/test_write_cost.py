"""The write-cost benchmark (pgmem.lab.bench.write_cost) on a scratch database: it times the
insert put_turns does (checked row for row against put_turns' own rows) and each step after it."""

from __future__ import annotations

from pgmem.db import connect
from pgmem.lab.bench import write_cost
from pgmem.lab.evaluation.common import temporary_database
from pgmem.sqlfiles import InstallParams


def test_write_cost_times_every_step_of_the_put_turns_insert(db_url: str) -> None:
    with temporary_database(db_url, InstallParams(384, 1024)) as url, connect(url) as conn:
        run = write_cost.cost_run(conn, turns=8, reps=2)
        left = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'pgmem' AND tablename = 'piece'"
        ).fetchone()
    assert run["pieces"] == 8 * 6
    assert [s["step"] for s in run["steps"]] == [label for label, _, _ in write_cost.STEPS]
    assert all(len(s["runs_ms"]) == 2 for s in run["steps"]) and len(run["put_turns_call_runs_ms"]) == 2
    assert left == (1,)  # every step ran: only the primary key is left
    both = write_cost.combine([run, run])
    assert both["rounds"] == 2 and len(both["steps"][0]["runs_ms"]) == 4
    assert "saves_us_per_piece" in both["steps"][-1]
    assert "the piece insert of put_turns" in write_cost.render(both)
