"""The backend registries: a backend is one module and one entry, and nothing else names it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from idemflow import open_store
from idemflow.errors import ConfigurationError, InvalidInputError
from idemflow.stores import async_twin
from idemflow.stores.async_adapters import InlineStore
from idemflow.stores.memory import MemoryStore
from idemflow.stores.registry import STORES, Backend, Feature, TestBed, load
from idemflow.testing.servers import ROOT


def test_a_backend_registered_by_a_plugin_alone_runs_the_conformance_suite() -> None:
    """tests/support/throwaway_backend.py is the only file naming it: loaded with ``-p``, the store
    contract collects and passes it like the built-in backends."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "tests.support.throwaway_backend",
        "tests/conformance/test_store_contract.py",
        "-k",
        "throwaway",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed and int(passed.group(1)) >= 20, done.stdout[-2000:]


def _entry(name: str, scheme: str, kind: str) -> Backend:
    return Backend(
        name=name,
        schemes=(scheme,),
        parameters=frozenset(),
        usage=f"{scheme}:",
        opener="idemflow.stores._openers:open_memory",
        blocking_class="idemflow.stores.memory:MemoryStore",
        test_beds=(TestBed(kind, "idemflow.testing.servers:in_memory"),),
    )


@pytest.mark.parametrize(
    ("name", "scheme", "kind", "says"),
    [
        ("memory", "fresh", "fresh", "['memory'] already registered"),
        ("fresh", "sqlite", "fresh", "['sqlite'] already registered"),
        ("fresh", "fresh", "azure", "['azure'] already registered"),
    ],
)
def test_a_name_scheme_or_test_kind_belongs_to_one_backend(
    name: str, scheme: str, kind: str, says: str
) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(says)):
        STORES.register(_entry(name, scheme, kind))
    assert "fresh" not in [entry.name for entry in STORES]


def test_a_registered_scheme_opens_and_unregistered_it_is_unknown() -> None:
    STORES.register(_entry("scratch", "scratch", "scratch"))
    try:
        assert isinstance(open_store("scratch:"), MemoryStore)
        assert "scratch" in STORES.kinds(without=(Feature.SERVER,))
    finally:
        STORES.unregister("scratch")
    with pytest.raises(ConfigurationError, match="unknown scheme; use memory:, sqlite:PATH"):
        open_store("scratch:")


def test_an_entry_that_cannot_be_imported_names_its_extra() -> None:
    entry = _entry("missing", "missing", "missing")
    STORES.register(
        Backend(
            **{**{f: getattr(entry, f) for f in entry.__slots__}, "opener": "no_such_sdk:open", "extra": "x"}
        )
    )
    try:
        with pytest.raises(ConfigurationError, match=re.escape("pip install 'idemflow[x]'")):
            open_store("missing:")
    finally:
        STORES.unregister("missing")


@pytest.mark.parametrize(
    "entry", [entry for entry in STORES if entry.capabilities], ids=lambda entry: entry.name
)
def test_an_entry_states_the_capabilities_its_stores_have(entry: Backend) -> None:
    assert entry.capabilities is not None
    assert load(entry.capabilities) == load(entry.blocking_class).capabilities


def test_the_twin_of_a_store_without_an_sdk_twin_is_the_store_adapted() -> None:
    store = MemoryStore()
    twin = async_twin(store)
    assert isinstance(twin, InlineStore) and twin.store is store


def test_opening_stores_imports_no_test_tooling() -> None:
    code = (
        "import sys, idemflow.stores as s, idemflow.async_worklist.queues as q;"
        "s.open_store('memory:'); q.open_queue('memory:');"
        "print(sorted(m for m in sys.modules if m.startswith('idemflow.testing')))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
