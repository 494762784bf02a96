"""Evaluation runs copy one migrated database instead of migrating a fresh one each
(pgmem.lab.evaluation.common.temporary_database): made once a server and package, by one of two
runs started at once, never copied half-made; another package's template and a killed run's
half-made one are dropped, while a template of other install parameters (another suite's model,
maybe copied right now by a run on the other test worker) is kept."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import sql

from pgmem.db import with_database
from pgmem.lab.evaluation.common import (
    MAKING_PREFIX,
    TEMPLATE_LOCK,
    TEMPLATE_PREFIX,
    _params_tag,
    _schema_key,
    temporary_database,
)
from pgmem.migrate import head_revision
from pgmem.sqlfiles import InstallParams, package_version
from tests.conftest import TEST_DIMS


def _names(c: psycopg.Connection[tuple[object, ...]]) -> set[str]:
    rows = c.execute("SELECT datname FROM pg_database WHERE datname LIKE 'pgmem_eval_%'").fetchall()
    return {str(r[0]) for r in rows}


@pytest.mark.long
def test_two_runs_at_once_copy_one_template_and_other_packages_templates_go(db_url: str) -> None:
    params = InstallParams(TEST_DIMS, TEST_DIMS)
    current = TEMPLATE_PREFIX + _schema_key(params)
    stale, leftover = TEMPLATE_PREFIX + _params_tag(params) + "_" + "0" * 16, MAKING_PREFIX + "deadbeef"
    untagged = TEMPLATE_PREFIX + "0" * 16  # named before templates carried their parameters
    others = TEMPLATE_PREFIX + _params_tag(InstallParams(TEST_DIMS + 1, TEST_DIMS + 1)) + "_" + "0" * 16
    with psycopg.connect(with_database(db_url, "postgres"), autocommit=True) as c:
        c.execute("SELECT pg_advisory_lock(%s)", (TEMPLATE_LOCK,))  # as a run holds it
        try:
            for name in (current, stale, leftover, untagged, others):
                c.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
            for name in (stale, leftover, untagged, others):
                c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        finally:
            c.execute("SELECT pg_advisory_unlock(%s)", (TEMPLATE_LOCK,))

        seen: list[tuple[str, object]] = []
        failed: list[BaseException] = []

        def run() -> None:
            try:
                with temporary_database(db_url, params) as url, psycopg.connect(url) as run_conn:
                    seen.append((url, run_conn.execute("SELECT * FROM pgmem.version()").fetchone()))
            except BaseException as exc:  # reported by the assertion below
                failed.append(exc)

        runs = [threading.Thread(target=run) for _ in range(2)]
        for t in runs:
            t.start()
        for t in runs:
            t.join()
        assert not failed, failed
        assert [v for _, v in seen] == [(package_version(), head_revision())] * 2
        assert seen[0][0] != seen[1][0]
        names = _names(c)
        assert current in names and others in names and not names & {stale, leftover, untagged}, names
        c.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(others)))
        assert not any(n.rsplit("/", 1)[-1].split("?")[0] in names for n, _ in seen), "a run's copy was kept"
