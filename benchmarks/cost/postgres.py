"""The PostgreSQL side of ``cost``: the hand-written minimal exactly-once protocol and the plain
handler on the same server as idemflow's ``PostgresStore`` (a throwaway server of the Debian
package, fsync on: PostgreSQL's defaults), and the variants wired to them.

**Minimal exactly-once** on PostgreSQL: each step one transaction, memo ``INSERT`` + the step's
data write, sent as one query of two statements (an implicit transaction, one round trip, the
fewest any client can make; parameters bound client-side as the store does). A duplicate: step
1's memo insert fails (the server rolls the query back), then one read of the last memo: two
round trips.
The plain handler: two autocommit statements, as code without idempotence does it.

Why apart: a fourth SDK's worth of baseline code, beside :mod:`benchmarks.cost.handwritten`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg

from benchmarks.common.backends import Backend
from benchmarks.cost.flows import COUNTERS, RESULT, STEPS, SURVEY, Handler
from benchmarks.cost.meter import Counted
from benchmarks.cost.rounds import Variant

RESULT_TEXT = json.dumps(RESULT, separators=(",", ":"))


def schema(conn: psycopg.Connection[Any], name: str) -> None:
    """The baseline's three tables in schema ``name``."""
    conn.execute(f"CREATE SCHEMA {name}")
    conn.execute(
        f"CREATE TABLE {name}.responses (survey text, id text, answer text, PRIMARY KEY (survey, id))"
    )
    conn.execute(
        f"CREATE TABLE {name}.summaries (survey text, option text, n bigint, PRIMARY KEY (survey, option))"
    )
    conn.execute(f"CREATE TABLE {name}.memos (k text PRIMARY KEY, v text NOT NULL)")


class PostgresCounts:
    """Round trips (a pipeline or a statement) and transactions a baseline made."""

    def __init__(self) -> None:
        self.round_trips = 0
        self.transactions = 0


def plain_postgres_handler(conn: psycopg.Connection[Any], name: str, counts: PostgresCounts) -> Handler:
    insert = f"INSERT INTO {name}.responses VALUES (%s, %s, 'yes')"
    count = (
        f"INSERT INTO {name}.summaries VALUES (%s, %s, 1) "
        "ON CONFLICT (survey, option) DO UPDATE SET n = summaries.n + 1"
    )

    def handle(event: dict[str, Any]) -> dict[str, Any]:
        conn.execute(insert, (SURVEY, event["user"]))
        conn.execute(count, (SURVEY, "yes"))
        counts.round_trips += 2
        counts.transactions += 2
        return RESULT

    return handle


class MinimalPostgres:
    """``steps`` steps, one pipelined transaction each (memo insert + data) on one connection."""

    def __init__(self, conn: psycopg.Connection[Any], name: str, counts: PostgresCounts, steps: int) -> None:
        self.conn, self.counts, self.steps = conn, counts, steps
        self.cursor = psycopg.ClientCursor(conn)
        self.memo = f"INSERT INTO {name}.memos VALUES (%s, %s)"
        self.read = f"SELECT v FROM {name}.memos WHERE k = %s"
        self.record = f"INSERT INTO {name}.responses VALUES (%s, %s, 'yes')"
        self.count = (
            f"INSERT INTO {name}.summaries VALUES (%s, %s, 1) "
            "ON CONFLICT (survey, option) DO UPDATE SET n = summaries.n + 1"
        )

    def __call__(self, event: dict[str, Any]) -> Any:
        request, user = event["id"], event["user"]
        conn = self.conn
        for step in range(1, self.steps + 1):
            answer = RESULT_TEXT if step == self.steps else "null"
            data = (self.record, (SURVEY, user)) if step == 1 else (self.count, (SURVEY, COUNTERS[step - 2]))
            self.counts.transactions += 1
            self.counts.round_trips += 1
            try:  # one query of two statements: one implicit transaction, one round trip
                self.cursor.execute(f"{self.memo}; {data[0]}", (f"{request}|{step}", answer, *data[1]))
            except psycopg.errors.UniqueViolation:  # the step was done before (rolled back)
                if step == 1:  # a duplicate: a finished request's last memo holds its answer
                    self.counts.round_trips += 1
                    found = conn.execute(self.read, (f"{request}|{self.steps}",)).fetchone()
                    if found is not None:
                        return json.loads(found[0])
        return RESULT


def _counts(counts: PostgresCounts, store: Any = None) -> Callable[[], Counted]:
    def counted() -> Counted:
        calls = counts.round_trips + (store.round_trips if store is not None else 0)
        ops = Counter({"transactions": counts.transactions, "round trips": counts.round_trips})
        if store is not None:
            ops["idemflow store calls"] = store.round_trips
        return Counted(calls, ops=+ops)

    return counted


def postgres_variants(
    backend: Backend,
    workflow_call: Callable[[Any, int], Callable[[int], object]],
    called: Callable[[Handler], Any],
) -> tuple[list[Variant], Callable[[], None]]:
    """Plain handler, minimal and idemflow workflows of 1, 2 and 5 steps on one server."""
    kind = backend.kind
    assert backend.conninfo is not None
    conn = psycopg.connect(backend.conninfo, autocommit=True)
    variants: list[Variant] = []
    plain_counts = PostgresCounts()
    name = backend.tag("lp")
    schema(conn, name)
    plain = plain_postgres_handler(conn, name, plain_counts)
    variants.append(Variant(kind, "plain handler", called(plain), _counts(plain_counts), family="plain"))
    for steps in STEPS:
        counts = PostgresCounts()
        own = psycopg.connect(backend.conninfo, autocommit=True)
        name = backend.tag(f"lm{steps}")
        schema(own, name)
        minimal = MinimalPostgres(own, name, counts, steps)
        label = f"minimal {steps} step{'s' if steps > 1 else ''}"
        variants.append(Variant(kind, label, called(minimal), _counts(counts), family="minimal", steps=steps))
    for steps in STEPS:
        store = backend.store(backend.tag(f"lw{steps}"))
        label = f"idemflow {steps} step{'s' if steps > 1 else ''}"
        call = workflow_call(store, steps)
        variants.append(
            Variant(
                kind,
                label,
                call,
                _counts(PostgresCounts(), store),
                store.flush,
                family="workflow",
                steps=steps,
            )
        )
    return variants, conn.close
