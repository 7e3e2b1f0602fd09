"""The DBOS Transact side of ``peers``: the 2-step survey as a DBOS workflow of two datasource
transactions, two plain SQLite transactions, and idemflow's ``SqliteStore``, on WAL files.

Why apart: setting DBOS up (its system and application databases, its decorators, its teardown)
is a job of its own; ``peers`` only times the variants this returns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from benchmarks.common.backends import plain_sqlite, prewarm_sqlite
from benchmarks.common.two_step_survey import peer_survey
from idemflow import run
from idemflow.stores import SqliteStore

SCHEMA = [
    "CREATE TABLE responses (survey TEXT, id TEXT, answer TEXT, PRIMARY KEY (survey, id))",
    "CREATE TABLE summaries (survey TEXT, option TEXT, n INTEGER, PRIMARY KEY (survey, option))",
]
INSERT = "INSERT INTO responses VALUES ('s1', ?, 'yes')"
COUNT = "INSERT INTO summaries VALUES ('s1', 'yes', 1) ON CONFLICT (survey, option) DO UPDATE SET n = n + 1"


def dbos_variants(folder: Path) -> tuple[dict[str, Callable[[int], None]], Callable[[], None]]:
    """Plain SQLite, DBOS and idemflow; returns the variants and a cleanup."""
    import sqlalchemy as sa
    from dbos import DBOS, DBOSConfig, SetWorkflowID, SQLAlchemyDatasource

    for name in ("dbos-system.sqlite3", "dbos-app.sqlite3", "idemflow.sqlite3"):
        prewarm_sqlite(folder / name)  # WAL mode (kept in the file) and steady-state size
    logging.getLogger("dbos").setLevel(logging.WARNING)
    config: DBOSConfig = {
        "name": "idemflow-bench",
        "system_database_url": f"sqlite:///{folder / 'dbos-system.sqlite3'}",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    source = SQLAlchemyDatasource.create(f"sqlite:///{folder / 'dbos-app.sqlite3'}")
    with source.engine.begin() as conn:
        for statement in SCHEMA:
            conn.execute(sa.text(statement))

    @source.transaction()
    def record(i: int) -> None:
        source.sql_session().execute(sa.text(INSERT.replace("?", ":id")), {"id": f"u{i}"})

    @source.transaction()
    def count() -> None:
        source.sql_session().execute(sa.text(COUNT))

    @DBOS.workflow()
    def dbos_survey(i: int) -> str:
        record(i)
        count()
        return "ok"

    DBOS.launch()
    plain = plain_sqlite(folder / "plain.sqlite3")
    for statement in SCHEMA:
        plain.execute(statement)
    store = SqliteStore(folder / "idemflow.sqlite3")

    def baseline(i: int) -> None:
        plain.execute("BEGIN IMMEDIATE")
        plain.execute(INSERT, (f"u{i}",))
        plain.execute("COMMIT")
        plain.execute("BEGIN IMMEDIATE")
        plain.execute(COUNT)
        plain.execute("COMMIT")

    def with_dbos(i: int) -> None:
        with SetWorkflowID(f"w{i}"):
            dbos_survey(i)

    def idem(i: int) -> None:
        run(peer_survey({"survey": "s1", "user": f"u{i}", "answer": "yes"}), request_id=f"q{i}", store=store)

    def cleanup() -> None:
        store.close()
        plain.close()
        DBOS.destroy(destroy_registry=True)

    return {"plain SQLite": baseline, "DBOS": with_dbos, "idemflow": idem}, cleanup
