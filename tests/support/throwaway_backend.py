"""A throwaway store backend that exists only to prove the registry seam: one module, one entry.

Load it as a pytest plugin and the conformance suite runs on it with no other edit::

    pytest -p tests.support.throwaway_backend tests/conformance/test_store_contract.py -k throwaway

It is a real store (every call reaches a :class:`~idemflow.stores.memory.MemoryStore`)
behind a class and a URL scheme of its own, so nothing in idemflow or the suites can know
it by name: the suites find it through :data:`~idemflow.stores.registry.STORES` only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from idemflow.async_worklist.queues.base import Queue
from idemflow.core.urls import Url
from idemflow.stores.base import Store
from idemflow.stores.memory import MemoryStore
from idemflow.stores.registry import STORES, Backend, TestBed
from idemflow.testing import StoreWrapper
from idemflow.testing.servers import Clock


class ThrowawayStore(StoreWrapper):
    """A store of its own class over an in-memory one."""

    def __init__(self) -> None:
        super().__init__(MemoryStore())


def open_throwaway(url: Url, *, create: bool = True) -> Store:
    return ThrowawayStore()


class NoServer:
    """Its test bed: nothing to start; every URL opens a fresh store."""

    def store_url(self, prefix: str, folder: Path, *, exact_calls: bool = False) -> str:
        return "throwaway:"

    def queue(self, name: str, folder: Path, *, visibility_timeout: float, clock: Clock | None) -> Queue:
        raise NotImplementedError("a store backend only")

    def queue_url(self, name: str, folder: Path, *, visibility_timeout: float) -> str:
        raise NotImplementedError("a store backend only")


@contextmanager
def no_server() -> Iterator[NoServer]:
    yield NoServer()


ENTRY = Backend(
    name="throwaway",
    schemes=("throwaway",),
    parameters=frozenset(),
    usage="throwaway:",
    opener=f"{__name__}:open_throwaway",
    blocking_class=f"{__name__}:ThrowawayStore",
    test_beds=(TestBed("throwaway", f"{__name__}:no_server"),),
)
"""Registered when this module is loaded as a plugin (``-p``), not when a doctest run imports it."""


def pytest_configure(config: object) -> None:
    STORES.register(ENTRY)


def pytest_unconfigure(config: object) -> None:
    STORES.unregister(ENTRY.name)
