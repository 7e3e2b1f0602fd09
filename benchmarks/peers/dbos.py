"""The DBOS Transact side of ``peers`` and ``cost``: the 2-step survey as a DBOS workflow of two
datasource transactions (record the response, count it), on SQLite files or on a PostgreSQL
server; for ``peers`` also two plain SQLite transactions and idemflow's ``SqliteStore``, on WAL
files.

On SQLite, DBOS's system database and the application datasource are two files (WAL, set before
DBOS opens them: SQLite keeps WAL in the file). On PostgreSQL, the system database is one of its
own on the server (DBOS creates it, and its schema, itself), the datasource the server's database
with the survey's tables in a schema of their own and DBOS's outputs table in another.

Why apart: setting DBOS up (its system and application databases, its decorators, its teardown)
is a job of its own; ``peers`` only times the variants this returns, and ``cost`` runs
:func:`launch_dbos` in a process of its own (:mod:`benchmarks.cost.dbos_process`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

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


@dataclass(frozen=True)
class DbosSetup:
    """Where DBOS's two databases are, and the survey's tables and steps in their dialect
    (``insert`` binds ``:id``)."""

    system_url: str
    app_url: str
    schema: tuple[str, ...]
    insert: str
    count: str
    outputs_schema: str | None = None
    """The schema of DBOS's outputs table in the datasource (PostgreSQL; SQLite has none)."""


def sqlite_setup(folder: Path) -> DbosSetup:
    """DBOS on two SQLite files in ``folder`` (pre-warmed: WAL, steady-state size)."""
    for name in ("dbos-system.sqlite3", "dbos-app.sqlite3"):
        prewarm_sqlite(folder / name)
    return DbosSetup(
        f"sqlite:///{folder / 'dbos-system.sqlite3'}",
        f"sqlite:///{folder / 'dbos-app.sqlite3'}",
        tuple(SCHEMA),
        INSERT.replace("?", ":id"),
        COUNT,
    )


def postgres_setup(conninfo: str, schema: str) -> DbosSetup:
    """DBOS on the PostgreSQL server of ``conninfo`` (a libpq URI): its system database
    ``<schema>_dbos_sys`` (DBOS creates it), the survey's tables in ``schema`` of ``conninfo``'s
    database, DBOS's outputs in ``<schema>_dbos``."""
    parts = urlsplit(conninfo)
    user = dict(pair.split("=", 1) for pair in parts.query.split("&") if "=" in pair).get("user", "postgres")
    where = f"{user}@{parts.hostname}:{parts.port}"

    def url(database: str) -> str:
        return urlunsplit(("postgresql", where, f"/{database}", "", ""))

    tables = (
        f"CREATE SCHEMA {schema}",
        f"CREATE TABLE {schema}.responses (survey text, id text, answer text, PRIMARY KEY (survey, id))",
        f"CREATE TABLE {schema}.summaries (survey text, option text, n bigint, PRIMARY KEY (survey, option))",
    )
    return DbosSetup(
        url(f"{schema}_dbos_sys"),
        url(parts.path.lstrip("/")),
        tables,
        f"INSERT INTO {schema}.responses VALUES ('s1', :id, 'yes')",
        f"INSERT INTO {schema}.summaries VALUES ('s1', 'yes', 1) "
        "ON CONFLICT (survey, option) DO UPDATE SET n = summaries.n + 1",
        outputs_schema=f"{schema}_dbos",
    )


def launch_dbos(setup: DbosSetup) -> tuple[Callable[[int], None], Callable[[], None]]:
    """DBOS launched on ``setup``'s databases (the process's one DBOS instance); returns request
    ``i`` as the workflow with id ``w<i>`` (run again: DBOS answers from its record), and the
    teardown."""
    import sqlalchemy as sa  # DBOS and SQLAlchemy: the bench extra
    from dbos import DBOS, DBOSConfig, SetWorkflowID, SQLAlchemyDatasource

    logging.getLogger("dbos").setLevel(logging.WARNING)
    config: DBOSConfig = {
        "name": "idemflow-bench",
        "system_database_url": setup.system_url,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    source = SQLAlchemyDatasource.create(setup.app_url, schema=setup.outputs_schema)
    with source.engine.begin() as conn:
        for statement in setup.schema:
            conn.execute(sa.text(statement))
    insert, count_sql = sa.text(setup.insert), sa.text(setup.count)

    @source.transaction()
    def record(i: int) -> None:
        source.sql_session().execute(insert, {"id": f"u{i}"})

    @source.transaction()
    def count() -> None:
        source.sql_session().execute(count_sql)

    @DBOS.workflow()
    def dbos_survey(i: int) -> str:
        record(i)
        count()
        return "ok"

    DBOS.launch()

    def with_dbos(i: int) -> None:
        with SetWorkflowID(f"w{i}"):
            dbos_survey(i)

    def destroy() -> None:
        DBOS.destroy(destroy_registry=True)

    return with_dbos, destroy


def dbos_variants(folder: Path) -> tuple[dict[str, Callable[[int], None]], Callable[[], None]]:
    """Plain SQLite, DBOS and idemflow; returns the variants and a cleanup."""
    prewarm_sqlite(folder / "idemflow.sqlite3")
    with_dbos, destroy = launch_dbos(sqlite_setup(folder))
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

    def idem(i: int) -> None:
        run(peer_survey({"survey": "s1", "user": f"u{i}", "answer": "yes"}), request_id=f"q{i}", store=store)

    def cleanup() -> None:
        store.close()
        plain.close()
        destroy()

    return {"plain SQLite": baseline, "DBOS": with_dbos, "idemflow": idem}, cleanup
