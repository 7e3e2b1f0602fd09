"""Backends by registry: one entry per backend, so a new backend is one module and one entry.

An entry says which URL schemes open the backend and with which parameters,
how to open its blocking store (or queue) from a parsed URL, how to open its
asyncio store and how to get the asyncio twin of a blocking one on the same
tables, and how the test suites reach it offline (:class:`TestBed`: a server
to start, what it can do). ``open_store``/``open_async_store`` and the queue
openers look schemes up here; the conformance, property, crash, golden and
contention suites take every registered test bed.

Everything an entry names is a dotted path (``"module:attribute.attribute"``)
loaded on first use: registering imports nothing, so ``import idemflow`` needs
no cloud SDK, and production code never imports test tooling (the test
servers, the conflict emulator) unless a URL or a test asks for it.

>>> entry = STORES.for_scheme("memory")
>>> entry.name, load(entry.opener).__name__
('memory', 'open_memory')
>>> [bed.kind for _, bed in STORES.beds()]
['memory', 'sqlite', 'dynamodb', 'dynamodb-local', 'azure', 'postgres']
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from idemflow.errors import ConfigurationError, InvalidInputError


class Feature(enum.Enum):
    """What a test bed offers, for suites that need it (crash tests need :attr:`SHARED`)."""

    SERVER = "server"
    """Its tests need a server process on loopback (moto, Azurite, DynamoDB Local): the ``cloud`` mark."""
    SHARED = "shared"
    """Other processes reach the same rows through its URL (multi-process crash tests)."""
    CONFLICTS = "conflicts"
    """It meets the service's transaction conflicts (emulated where the server has none)."""
    FAKE_CLOCK = "fake clock"
    """(Queues) it runs on the test's clock, so visibility timeouts pass without waiting."""
    STORE_SUITES = "store suites"
    """A second emulator of a backend that another of its beds emulates more faithfully (moto
    beside AWS's own DynamoDB Local): it takes the suites of the store itself (the store, codec,
    collection and golden-row contracts, the backend's own tests), not those of the workflows
    above the store, which run the same store code and which the backend passes on its other bed."""


@dataclass(frozen=True, slots=True)
class TestBed:
    """How the suites reach a backend offline: ``server`` is a dotted path to a context-manager
    factory yielding a :class:`idemflow.testing.servers.BackendServer` (started once per test
    session, shared by every bed naming it: moto serves DynamoDB and SQS)."""

    __test__ = False  # not a pytest test class

    kind: str
    """The id of the parametrized cases (``dynamodb-local``); unique among a registry's beds."""
    server: str
    features: frozenset[Feature] = frozenset()


@dataclass(frozen=True, slots=True)
class Backend:
    """One backend of a registry (stores or queues).

    ``opener`` takes ``(url: idemflow.core.urls.Url, *, create: bool)`` and returns the blocking
    store (queue); ``async_opener`` takes the same and returns its asyncio one (None: the
    blocking one on threads of its own, or on the loop for memory); ``twin`` takes a blocking
    store of exactly ``blocking_class`` and returns the asyncio one on the same tables (None:
    the blocking one adapted). ``test_parameters`` are URL parameters only tests use, each
    the dotted path of a hook ``(url) -> install``, called (and so checking its parameter)
    before anything is opened, whose ``install(store)`` is applied after opening; an asyncio
    store asked for with one gets the blocking store, hooked, on threads.
    """

    name: str
    schemes: tuple[str, ...]
    parameters: frozenset[str]
    usage: str
    """The URL forms, for error messages (``dynamodb:?region=R&endpoint=URL&prefix=P``)."""
    opener: str
    blocking_class: str
    async_opener: str | None = None
    twin: str | None = None
    extra: str | None = None
    """The extra that installs its SDK (``aws``), named when the import fails."""
    capabilities: str | None = None
    """(Stores) the dotted path of the :class:`~idemflow.stores.base.Capabilities` its stores
    have, so tools and tests tell a backend's limits without opening one (None: ask an
    opened store)."""
    test_parameters: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    test_beds: tuple[TestBed, ...] = ()
    row_expiries: str | None = None
    """(Stores, test tooling) the dotted path of a function giving every row of an opened store
    and its ``expires_at`` as the backend holds it (the store protocol never returns expiries):
    what the retention and collection suites check (None: they cannot check this backend)."""

    def accepts(self) -> frozenset[str]:
        """Every URL parameter it takes, test-only ones included."""
        return self.parameters | frozenset(self.test_parameters)


def load(path: str, extra: str | None = None) -> Any:
    """The object a dotted path ``module:attribute.attribute`` names, imported now.

    A missing module is a :class:`~idemflow.errors.ConfigurationError` naming ``extra``.
    """
    module_name, _, attributes = path.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f": pip install 'idemflow[{extra}]'" if extra else ""
        raise ConfigurationError(f"{path} could not be imported{hint} ({exc})") from exc
    for attribute in attributes.split(".") if attributes else ():
        found = getattr(found, attribute)
    return found


def class_path(obj: object) -> str:
    """The dotted path of ``obj``'s exact class, as :attr:`Backend.blocking_class` spells it."""
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


class Registry:
    """The backends of one kind (stores or queues), by name, scheme and test bed.

    A registry is extended, never configured: entries are added at import
    time (idemflow's own here, a test's or an extension's by :meth:`register`)
    and nothing else about it changes.
    """

    def __init__(self, kind: str, entries: Iterable[Backend] = ()) -> None:
        self.kind = kind
        self._entries: dict[str, Backend] = {}
        for entry in entries:
            self.register(entry)

    def register(self, entry: Backend) -> Backend:
        """Add ``entry``; a name, scheme or test-bed kind already taken is an
        :class:`~idemflow.errors.InvalidInputError` (two backends never share one)."""
        if not isinstance(entry, Backend):
            raise InvalidInputError(f"a {self.kind} backend must be a Backend, not {type(entry).__name__}")
        taken_schemes = {scheme for known in self._entries.values() for scheme in known.schemes}
        taken_kinds = {bed.kind for _, bed in self.beds()}
        clashes = (
            ([entry.name] if entry.name in self._entries else [])
            + sorted(taken_schemes & set(entry.schemes))
            + sorted(taken_kinds & {bed.kind for bed in entry.test_beds})
        )
        if clashes or not entry.schemes:
            problem = f"{clashes} already registered" if clashes else "no URL scheme"
            raise InvalidInputError(f"{self.kind} backend {entry.name!r}: {problem}")
        self._entries[entry.name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove the backend ``name`` (a test's throwaway backend, when the test is done)."""
        self._entries.pop(name, None)

    def __iter__(self) -> Iterator[Backend]:
        return iter(list(self._entries.values()))

    def for_scheme(self, scheme: str) -> Backend:
        """The backend opening URLs of ``scheme`` (a KeyError if none: parse the URL first)."""
        for entry in self._entries.values():
            if scheme in entry.schemes:
                return entry
        raise KeyError(scheme)

    def for_blocking(self, obj: object) -> Backend | None:
        """The backend whose blocking class is exactly ``obj``'s (None: a wrapper or unknown)."""
        path = class_path(obj)
        return next((entry for entry in self._entries.values() if entry.blocking_class == path), None)

    def parameters(self) -> dict[str, frozenset[str]]:
        """``{scheme: parameters it accepts}``, as :func:`idemflow.core.urls.parse_url` takes them."""
        return {scheme: entry.accepts() for entry in self._entries.values() for scheme in entry.schemes}

    def usage(self) -> str:
        """Every backend's URL forms, for error messages."""
        return ", ".join(entry.usage for entry in self._entries.values())

    def beds(self, *needs: Feature, without: Iterable[Feature] = ()) -> list[tuple[Backend, TestBed]]:
        """Every test bed offering all of ``needs`` and none of ``without``, in registration order."""
        excluded = set(without)
        return [
            (entry, bed)
            for entry in self._entries.values()
            for bed in entry.test_beds
            if set(needs) <= bed.features and not excluded & bed.features
        ]

    def kinds(self, *needs: Feature, without: Iterable[Feature] = ()) -> list[str]:
        """The kinds of :meth:`beds`: what a suite parametrizes over."""
        return [bed.kind for _, bed in self.beds(*needs, without=without)]

    def bed(self, kind: str) -> tuple[Backend, TestBed]:
        """The backend and test bed of ``kind``."""
        for entry, bed in self.beds():
            if bed.kind == kind:
                return entry, bed
        raise KeyError(kind)


_SERVERS = "idemflow.testing.servers"
_TOOLS = "idemflow.testing.expiries"
_CLOUD = frozenset({Feature.SERVER, Feature.SHARED})
_LIBPQ = (
    "user",
    "password",
    "host",
    "port",
    "dbname",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "application_name",
    "options",
    "target_session_attrs",
    "passfile",
    "service",
    "keepalives",
    "keepalives_idle",
)
"""The libpq parameters a ``postgresql:`` store URL passes on (as ``idemflow.stores._openers`` does)."""
LIBPQ_PARAMETERS = frozenset(_LIBPQ)
"""The same, for the PostgreSQL queue's URLs too (one database, one way to reach it)."""

STORES = Registry(
    "store",
    [
        Backend(
            name="memory",
            schemes=("memory",),
            capabilities="idemflow.stores.memory:MEMORY_CAPABILITIES",
            parameters=frozenset(),
            usage="memory:",
            opener="idemflow.stores._openers:open_memory",
            blocking_class="idemflow.stores.memory:MemoryStore",
            row_expiries=f"{_TOOLS}:memory",
            test_beds=(TestBed("memory", f"{_SERVERS}:in_memory"),),
        ),
        Backend(
            name="sqlite",
            schemes=("sqlite",),
            capabilities="idemflow.stores.sqlite:SQLITE_CAPABILITIES",
            parameters=frozenset(),
            usage="sqlite:PATH",
            opener="idemflow.stores._openers:open_sqlite",
            blocking_class="idemflow.stores.sqlite:SqliteStore",
            row_expiries=f"{_TOOLS}:sqlite",
            test_beds=(TestBed("sqlite", f"{_SERVERS}:on_disk", frozenset({Feature.SHARED})),),
        ),
        Backend(
            name="dynamodb",
            schemes=("dynamodb",),
            capabilities="idemflow.stores._dynamodb_items:DYNAMODB_CAPABILITIES",
            parameters=frozenset({"endpoint", "region", "prefix", "open_runs_index"}),
            usage="dynamodb:?region=R&endpoint=URL&prefix=P[&open_runs_index=1]",
            opener="idemflow.stores._openers:open_dynamodb",
            blocking_class="idemflow.stores.dynamodb:DynamoDBStore",
            row_expiries=f"{_TOOLS}:dynamodb",
            async_opener="idemflow.stores._openers:open_async_dynamodb",
            twin="idemflow.stores.dynamodb_async:AsyncDynamoDBStore.twin_of",
            extra="aws",
            test_parameters=MappingProxyType({"conflicts": "idemflow.testing.conflicts:install_from_url"}),
            test_beds=(
                TestBed("dynamodb", f"{_SERVERS}:moto_server", _CLOUD | {Feature.STORE_SUITES}),
                TestBed("dynamodb-local", f"{_SERVERS}:dynamodb_local_server", _CLOUD | {Feature.CONFLICTS}),
            ),
        ),
        Backend(
            name="azure",
            schemes=("azure",),
            capabilities="idemflow.stores._azure_batch:AZURE_CAPABILITIES",
            parameters=frozenset({"connection_string", "prefix"}),
            usage="azure:?connection_string=C&prefix=P",
            opener="idemflow.stores._openers:open_azure",
            blocking_class="idemflow.stores.azure_tables:AzureTableStore",
            row_expiries=f"{_TOOLS}:azure_tables",
            async_opener="idemflow.stores._openers:open_async_azure",
            twin="idemflow.stores.azure_tables_async:AsyncAzureTableStore.twin_of",
            extra="azure",
            test_beds=(TestBed("azure", f"{_SERVERS}:azurite_server", _CLOUD),),
        ),
        Backend(
            name="postgres",
            schemes=("postgresql", "postgres"),
            capabilities="idemflow.stores._postgres_setup:POSTGRES_CAPABILITIES",
            parameters=frozenset({"schema", "pool_size", *_LIBPQ}),
            usage="postgresql://HOST[:PORT]/DATABASE?user=U&schema=S",
            opener="idemflow.stores._openers:open_postgres",
            blocking_class="idemflow.stores.postgres:PostgresStore",
            row_expiries=f"{_TOOLS}:postgres",
            async_opener="idemflow.stores._openers:open_async_postgres",
            twin="idemflow.stores.postgres_async:AsyncPostgresStore.twin_of",
            extra="postgres",
            test_beds=(TestBed("postgres", f"{_SERVERS}:postgres_server", _CLOUD),),
        ),
    ],
)
"""The store backends: :func:`idemflow.open_store` opens their URLs."""


__all__ = ["STORES", "Backend", "Feature", "Registry", "TestBed", "class_path", "load"]
