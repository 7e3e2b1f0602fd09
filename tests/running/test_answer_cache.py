"""A handler's cache of finished answers: duplicates in one process cost no store call."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import pytest

from idemflow import (
    AnswerCache,
    Idem,
    IdempotencyKeyReuseError,
    InvalidInputError,
    WorkflowAborted,
    atomic,
    idempotent,
    idempotent_function,
)
from idemflow.stores import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_duplicate_in_the_same_process_costs_no_store_call() -> None:
    store, calls, replays = MemoryStore(), [], []

    @idempotent_function(store, key="order.id", on_replay=lambda result: replays.append(result) or result)
    def charge(order: dict[str, Any]) -> dict[str, Any]:
        calls.append(order["id"])
        return {"charged": order["amount"]}

    assert charge({"id": "o-1", "amount": 5}) == {"charged": 5}
    before = store.round_trips
    assert charge({"id": "o-1", "amount": 5}) == {"charged": 5}
    assert store.round_trips == before and calls == ["o-1"] and replays == [{"charged": 5}]


def test_another_input_under_a_kept_key_is_refused_by_the_store() -> None:
    store = MemoryStore()

    @idempotent_function(store, key="order.id")
    def charge(order: dict[str, Any]) -> int:
        return int(order["amount"])

    charge({"id": "o-1", "amount": 5})
    with pytest.raises(IdempotencyKeyReuseError):
        charge({"id": "o-1", "amount": 6})


def test_the_cache_keeps_at_most_its_entries_for_at_most_its_age() -> None:
    store, clock = MemoryStore(), Clock()
    cache = AnswerCache(max_entries=2, max_age=60, clock=clock)

    @idempotent(store, key=lambda n: str(n), cache=cache)
    def count(n: int) -> Generator[Idem[Any], Any, Any]:
        return (yield atomic("counts", str(n), lambda tx: tx.increment("n") or n))

    for n in (1, 2, 3):
        count(n)
    assert len(cache) == 2
    before = store.round_trips
    count(3)
    assert store.round_trips == before  # kept
    count(1)
    assert store.round_trips > before  # the oldest was dropped: the store answered
    clock.now += 61
    before = store.round_trips
    count(3)
    assert store.round_trips > before  # too old


def test_no_cache_means_every_duplicate_asks_the_store() -> None:
    store = MemoryStore()

    @idempotent_function(store, key=lambda n: str(n), cache=None)
    def square(n: int) -> int:
        return n * n

    square(3)
    before = store.round_trips
    assert square(3) == 9 and store.round_trips > before


def test_an_aborted_answer_is_kept_too() -> None:
    store = MemoryStore()

    @idempotent(store, key=lambda n: str(n))
    def refuse(n: int) -> Generator[Idem[Any], Any, Any]:
        return (yield atomic("counts", str(n), lambda tx: tx.abort("no")))

    with pytest.raises(WorkflowAborted):
        refuse(1)
    before = store.round_trips
    with pytest.raises(WorkflowAborted):
        refuse(1)
    assert store.round_trips == before


def test_an_async_handler_answers_a_kept_duplicate_without_the_store() -> None:
    store, calls = MemoryStore(), []

    @idempotent_function(store, key=lambda n: str(n))
    async def double(n: int) -> int:
        calls.append(n)
        return 2 * n

    async def twice() -> list[int]:
        return [await double(4), await double(4)]

    assert asyncio.run(twice()) == [8, 8] and calls == [4]


@pytest.mark.parametrize(
    "options", [{"max_entries": 0}, {"max_entries": True}, {"max_age": 0}, {"max_age": float("inf")}]
)
def test_a_cache_that_keeps_nothing_or_forever_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError, match="AnswerCache"):
        AnswerCache(**options)


def test_every_duplicate_answered_from_the_cache_gets_its_own_copy() -> None:
    """A caller (or an ``on_replay`` hook) changing its answer changes no later duplicate's."""
    store = MemoryStore()

    def marked(result: dict[str, Any]) -> dict[str, Any]:
        result["replayed"] = True
        return result

    @idempotent_function(store, key="order.id", on_replay=marked)
    def charge(order: dict[str, Any]) -> dict[str, Any]:
        return {"charged": order["amount"], "lines": [1, 2]}

    first = charge({"id": "o-1", "amount": 5})
    first["lines"].append(3)
    before = store.round_trips
    second = charge({"id": "o-1", "amount": 5})
    assert second == {"charged": 5, "lines": [1, 2], "replayed": True}
    second["lines"].clear()
    assert charge({"id": "o-1", "amount": 5}) == {"charged": 5, "lines": [1, 2], "replayed": True}
    assert store.round_trips == before  # all answered from the cache


def test_an_async_handler_gives_every_kept_duplicate_its_own_copy() -> None:
    store = MemoryStore()

    @idempotent_function(store, key=lambda n: str(n))
    async def listed(n: int) -> list[int]:
        return list(range(n))

    async def thrice() -> list[list[int]]:
        answers = []
        for _ in range(3):
            answer = await listed(3)
            answers.append(list(answer))
            answer.append(99)
        return answers

    assert asyncio.run(thrice()) == [[0, 1, 2]] * 3


def test_an_aborted_answer_kept_gives_every_duplicate_its_own_reason() -> None:
    store = MemoryStore()

    @idempotent(store, key=lambda n: str(n))
    def refuse(n: int) -> Generator[Idem[Any], Any, Any]:
        return (yield atomic("counts", str(n), lambda tx: tx.abort({"why": ["closed"]})))

    for _ in range(3):
        with pytest.raises(WorkflowAborted) as aborted:
            refuse(1)
        assert aborted.value.reason == {"why": ["closed"]}
        aborted.value.reason["why"].append("changed")
