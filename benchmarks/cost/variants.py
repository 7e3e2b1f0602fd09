"""Every variant ``cost`` measures, per backend, wired to its clients and counters.

- DynamoDB Local: the bare handler (``PutItem`` + ``UpdateItem ADD``), Powertools'
  ``idempotent_function`` around it, idemflow's ``idempotent_function`` around it, the minimal
  exactly-once protocol and idemflow workflows of 1, 2 and 5 steps, the 2-step workflow on
  ``arun`` and the asynchronous store; duplicates of the protected 2-step variants.
- Azurite: the plain handler (upsert + read + ETag update), minimal and workflows of 1, 2, 5 steps
  (on ``run`` and on ``arun`` with the asynchronous store), idemflow's ``idempotent_function``
  around the plain handler; duplicates.
- SQLite: the plain handler (two transactions), minimal and workflows of 1, 2, 5 steps, the
  function, DBOS Transact's 2-step workflow (:mod:`benchmarks.peers.dbos`); duplicates.
- PostgreSQL (:mod:`benchmarks.cost.postgres`): the plain handler, minimal and workflows of 1, 2,
  5 steps, DBOS's 2-step workflow with its system database and datasource on the same server;
  duplicates.

DBOS runs in a process of its own per backend (:mod:`benchmarks.cost.dbos_process`: DBOS is one
instance per process); its duplicate is the same workflow id run again, which DBOS answers from
its record of the finished workflow.

Every client of a server backend reports to one meter per backend (:mod:`benchmarks.cost.meter`);
SQLite and PostgreSQL variants count their own transactions, idemflow's stores their own calls,
DBOS's process its SQLAlchemy transactions and statements.

Why apart: setting up clients, tables and counters is a job of its own; ``cost`` times and reports.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from benchmarks.common.backends import Backend, boto_config, create_dynamodb_table
from benchmarks.common.counting import backend_calls
from benchmarks.cost.dbos_process import DbosProcess
from benchmarks.cost.flows import COUNTERS, STEPS, SURVEY, TABLES, WORKFLOWS, event
from benchmarks.cost.handwritten import (
    SQLITE_SCHEMA,
    MinimalAzure,
    MinimalDynamo,
    MinimalSqlite,
    SqliteCounts,
    plain_azure,
    plain_sqlite_handler,
)
from benchmarks.cost.meter import AzureMeter, Counted, DynamoMeter
from benchmarks.cost.rounds import Loop, Variant
from benchmarks.peers.dbos import DbosSetup, postgres_setup, sqlite_setup
from benchmarks.peers.powertools import create_idempotency_table, powertools_protect, put_and_add
from idemflow import arun, idempotent_function, run
from idemflow.stores import Store

Built = tuple[list[Variant], Callable[[], None]]
"""A backend's variants and what closes their clients."""
DUPLICATED = {
    "dynamodb-local": ("Powertools", "idemflow function", "minimal 2 steps", "idemflow 2 steps"),
    "azurite": ("idemflow function", "minimal 2 steps", "idemflow 2 steps"),
    "sqlite": ("idemflow function", "minimal 2 steps", "idemflow 2 steps", "DBOS"),
    "postgres": ("minimal 2 steps", "idemflow 2 steps", "DBOS"),
}
"""The variants whose duplicates are measured, per backend."""


def steps_name(what: str, steps: int) -> str:
    return f"{what} {steps} step{'s' if steps > 1 else ''}"


def _with_duplicates(kind: str, variants: list[Variant]) -> list[Variant]:
    by_name = {v.name: v for v in variants}
    copies = [
        replace(v, name=f"{name}, duplicate", base=name)
        for name in DUPLICATED[kind]
        if (v := by_name.get(name)) is not None
    ]
    return variants + copies


def _called(handler: Callable[[dict[str, Any]], object]) -> Callable[[int], object]:
    """Request ``i`` as a call of ``handler`` with its event."""
    return lambda i: handler(event(i))


def _workflow_call(store: Store, steps: int) -> Callable[[int], object]:
    flow = WORKFLOWS[steps]
    return lambda i: run(flow(event(i)), request_id=f"q{i}", store=store)


def _workflow_variant(variant: Callable[..., Variant], store: Any, steps: int) -> Variant:
    """The idemflow workflow of ``steps`` steps on ``store``, made by a backend's ``variant``."""
    call = _workflow_call(store, steps)
    return variant(steps_name("idemflow", steps), call, settle=store.flush, family="workflow", steps=steps)


def _async_variant(variant: Callable[..., Variant], loop: Loop, store: Any, steps: int) -> Variant:
    """The ``steps``-step workflow under ``arun`` on an asynchronous ``store``, opened first."""
    flow = WORKFLOWS[steps]
    loop.request(arun(flow(event(0)), request_id=f"q0-{steps}", store=store))  # opens its clients
    loop.run(store.flush())

    def call(i: int) -> object:
        return loop.request(arun(flow(event(i)), request_id=f"q{i}", store=store))

    name = steps_name("idemflow", steps) + ", asyncio"
    return variant(name, call, settle=lambda: loop.run(store.flush()), family="asyncio", steps=steps)


# -- DynamoDB Local -------------------------------------------------------------------------------


def dynamo_variants(backend: Backend, loop: Loop) -> tuple[list[Variant], DynamoMeter, Callable[[], None]]:
    import boto3

    from idemflow.stores.dynamodb import DynamoDBStore
    from idemflow.stores.dynamodb_async import AsyncDynamoDBStore

    kind, setup = backend.kind, backend.dynamodb
    endpoint, region = setup.meta.endpoint_url, setup.meta.region_name
    clients: list[Any] = []

    def client(capacity: bool = False, attach: bool = True) -> Any:
        made = boto3.client("dynamodb", endpoint_url=endpoint, region_name=region, config=boto_config())
        if attach:
            meter.attach(made, capacity=capacity)
        clients.append(made)
        return made

    meter = DynamoMeter(client(attach=False))
    prefix = backend.tag("k")
    for name in ("b", "p", "f", "m"):
        for table in ("responses", "summaries"):
            create_dynamodb_table(setup, f"{prefix}{name}{table}")
    create_dynamodb_table(setup, f"{prefix}mruns")
    create_idempotency_table(setup, f"{prefix}idempotency")

    def tables(name: str) -> tuple[str, str]:
        return f"{prefix}{name}responses", f"{prefix}{name}summaries"

    def variant(name: str, call: Callable[[int], object], **more: Any) -> Variant:
        return Variant(kind, name, call, meter.snapshot, meter=meter, **more)

    bare = put_and_add(client(capacity=True), *tables("b"))
    pt_client = client()
    powertools = powertools_protect(pt_client, f"{prefix}idempotency", put_and_add(pt_client, *tables("p")))
    fn_store: Any = backend.store(backend.tag("kf"))  # the run-record table only: the result lives there
    meter.attach(fn_store.client)
    function = idempotent_function(fn_store, key="event.id", name="cost_fn_dynamodb")(
        put_and_add(client(), *tables("f"))
    )
    variants = [
        variant("bare handler", _called(bare), family="plain"),
        variant("Powertools", lambda i: powertools(event=event(i)), family="peer"),
        variant("idemflow function", _called(function), settle=fn_store.flush, family="function"),
    ]
    minimal_client = client(capacity=True)
    for steps in STEPS:
        minimal = MinimalDynamo(minimal_client, prefix, steps)
        call = _called(minimal)
        variants.append(variant(steps_name("minimal", steps), call, family="minimal", steps=steps))
    for steps in STEPS:
        store: Any = backend.store(backend.tag(f"kw{steps}"), *TABLES)
        meter.attach(store.client)
        variants.append(_workflow_variant(variant, store, steps))
    indexed_runs = DynamoDBStore(
        endpoint_url=endpoint, region_name=region, prefix=backend.tag("kn"), open_runs_index=True
    )
    indexed_runs.create_tables(*TABLES)
    meter.attach(indexed_runs.client)
    indexed = _workflow_variant(variant, indexed_runs, 2)
    variants.append(replace(indexed, name="idemflow 2 steps, open-runs index"))
    tag = backend.tag("ka")
    backend.store(tag, *TABLES)  # creates the asynchronous store's tables
    aio = AsyncDynamoDBStore(endpoint_url=endpoint, region_name=region, prefix=tag)
    loop.request(arun(WORKFLOWS[2](event(0)), request_id="q0", store=aio))  # opens its client
    loop.run(aio.flush())
    meter.attach(aio.client)

    def async_call(i: int) -> object:
        return loop.request(arun(WORKFLOWS[2](event(i)), request_id=f"q{i}", store=aio))

    variants.append(
        variant(
            "idemflow 2 steps, asyncio",
            async_call,
            settle=lambda: loop.run(aio.flush()),
            family="asyncio",
            steps=2,
        )
    )

    def close() -> None:
        loop.run(aio.close())
        indexed_runs.close()
        for made in clients:
            made.close()

    return _with_duplicates(kind, variants), meter, close


# -- Azurite --------------------------------------------------------------------------------------


def azure_variants(backend: Backend, loop: Loop) -> tuple[list[Variant], AzureMeter, Callable[[], None]]:
    from azure.data.tables import TableServiceClient

    from idemflow.stores.azure_tables import AzureTableStore
    from idemflow.stores.azure_tables_async import AsyncAzureTableStore

    kind, connection = backend.kind, backend.connection_string
    assert connection is not None
    meter = AzureMeter()
    hooks = meter.hooks()
    service = TableServiceClient.from_connection_string(connection, **hooks)
    prefix = backend.tag("z")
    made: dict[str, Any] = {}
    for name in ("p", "m", "f"):
        for table in ("resp", "sum"):
            made[name + table] = service.create_table(f"{prefix}{name}{table}")
        for counter in COUNTERS:
            made[name + "sum"].create_entity({"PartitionKey": SURVEY, "RowKey": counter, "n": 0})
    stores: list[Any] = []

    def store(tag: str, *tables: str) -> Any:
        opened = AzureTableStore(connection_string=connection, prefix=tag, **hooks)
        opened.create_tables(*tables)
        stores.append(opened)
        return opened

    def variant(name: str, call: Callable[[int], object], **more: Any) -> Variant:
        return Variant(kind, name, call, meter.snapshot, meter=meter, **more)

    plain = plain_azure(made["presp"], made["psum"])
    fn_store = store(backend.tag("zf"))
    function = idempotent_function(fn_store, key="event.id", name="cost_fn_azure")(
        plain_azure(made["fresp"], made["fsum"])
    )
    variants = [
        variant("plain handler", _called(plain), family="plain"),
        variant("idemflow function", _called(function), settle=fn_store.flush, family="function"),
    ]
    for steps in STEPS:
        minimal = MinimalAzure(made["mresp"], made["msum"], steps)
        call = _called(minimal)
        variants.append(variant(steps_name("minimal", steps), call, family="minimal", steps=steps))
    for steps in STEPS:
        variants.append(_workflow_variant(variant, store(backend.tag(f"zw{steps}"), *TABLES), steps))
    asyncs: list[Any] = []
    for steps in STEPS:  # the asyncio store, on a loop of its own thread (as a server's)
        made_aio = AsyncAzureTableStore.twin_of(store(backend.tag(f"za{steps}"), *TABLES))
        asyncs.append(made_aio)
        variants.append(_async_variant(variant, loop, made_aio, steps))

    def close() -> None:
        for opened_aio in asyncs:
            loop.run(opened_aio.close())
        for opened in stores:
            opened.close()
        service.close()

    return _with_duplicates(kind, variants), meter, close


# -- SQLite ---------------------------------------------------------------------------------------


def _sqlite_counts(counts: SqliteCounts, store: Any = None) -> Callable[[], Counted]:
    def counted() -> Counted:
        calls = counts.transactions + (backend_calls(store) if store is not None else 0)
        ops = Counter({"transactions": counts.transactions, "statements": counts.statements})
        if store is not None:
            ops["idemflow store calls"] = backend_calls(store)
        return Counted(calls, ops=+ops)

    return counted


def postgres_variants(backend: Backend, dbos: bool) -> Built:
    """PostgreSQL's variants (:mod:`benchmarks.cost.postgres`) and DBOS on the same server, with
    their duplicates."""
    from benchmarks.cost.postgres import postgres_variants as made  # psycopg: the postgres extra

    variants, close = made(backend, _workflow_call, _called)
    closers = [close]
    if dbos and dbos_installed():
        assert backend.conninfo is not None
        peer, stop = dbos_variant(backend.kind, postgres_setup(backend.conninfo, backend.tag("ld")))
        variants.append(peer)
        closers.insert(0, stop)

    def close_all() -> None:
        for closer in closers:
            closer()

    return _with_duplicates(backend.kind, variants), close_all


def dbos_variant(kind: str, setup: DbosSetup) -> tuple[Variant, Callable[[], None]]:
    """DBOS's 2-step workflow on ``setup``'s databases, served by a process of its own, and what
    stops it. Its latency and CPU are the process's own, its calls SQLAlchemy's transactions."""
    peer = DbosProcess(setup)
    variant = Variant(
        kind, "DBOS", peer.call, peer.counted, family="peer", steps=2, cpu=peer.cpu, own_time=True
    )
    return variant, peer.close


def dbos_installed() -> bool:
    """DBOS Transact comes with the ``bench`` extra; without it the SQLite peer is left out."""
    import importlib.util

    return importlib.util.find_spec("dbos") is not None


def sqlite_variants(backend: Backend, dbos: bool) -> tuple[list[Variant], Callable[[], None]]:
    kind = backend.kind
    closers: list[Callable[[], None]] = []

    def connection(hint: str) -> Any:
        conn = backend.sqlite(backend.tag(hint))
        for statement in SQLITE_SCHEMA:
            conn.execute(statement)
        return conn

    plain_counts = SqliteCounts()
    plain = plain_sqlite_handler(connection("lp"), plain_counts)
    fn_store = backend.store(backend.tag("lf"))
    fn_counts = SqliteCounts()
    function = idempotent_function(fn_store, key="event.id", name="cost_fn_sqlite")(
        plain_sqlite_handler(connection("lfh"), fn_counts)
    )
    variants = [
        Variant(kind, "plain handler", _called(plain), _sqlite_counts(plain_counts), family="plain"),
        Variant(
            kind,
            "idemflow function",
            _called(function),
            _sqlite_counts(fn_counts, fn_store),
            fn_store.flush,
            family="function",
        ),
    ]
    for steps in STEPS:
        counts = SqliteCounts()
        minimal = MinimalSqlite(connection(f"lm{steps}"), counts, steps)
        call = _called(minimal)
        name = steps_name("minimal", steps)
        variants.append(Variant(kind, name, call, _sqlite_counts(counts), family="minimal", steps=steps))
    for steps in STEPS:
        store = backend.store(backend.tag(f"lw{steps}"))
        name = steps_name("idemflow", steps)
        call = _workflow_call(store, steps)
        counted = _sqlite_counts(SqliteCounts(), store)
        variants.append(Variant(kind, name, call, counted, store.flush, family="workflow", steps=steps))
    if dbos and dbos_installed():
        folder = backend.folder / "dbos"
        folder.mkdir()
        peer, stop = dbos_variant(kind, sqlite_setup(folder))
        variants.append(peer)
        closers.append(stop)

    def close() -> None:
        for closer in closers:
            closer()

    return _with_duplicates(kind, variants), close
