"""The monad laws for Idem, checked by running both sides on a real store.

Equality of computations is observational: same result and same table
contents after running under the same request id on fresh stores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.pipeline import flow
from returns.pointfree import bind as bind_
from returns.pointfree import map_

from idemflow import Idem, Tx, atomic, bind, pure, run
from idemflow.stores import MemoryStore
from idemflow.testing import data_rows

Fn = Callable[[int], Idem[int]]


def step_fn(partition: str, factor: int) -> Fn:
    """A Kleisli arrow that does a real step: adds to a counter, returns a derived value."""

    def arrow(x: int) -> Idem[int]:
        def body(tx: Tx) -> int:
            tx.increment("n", x)
            return x * factor + 1

        return atomic("tablea", partition, body, name=f"add-{partition}")

    return arrow


def observe(m: Idem[int]) -> tuple[Any, Any]:
    store = MemoryStore()
    result = run(m, request_id="law", store=store)
    return result, data_rows(store, "tablea")


arrows = st.builds(step_fn, st.sampled_from(["pa", "pb", "pc"]), st.integers(-3, 3)) | st.just(
    lambda x: pure(x * 2)
)


@given(x=st.integers(-1000, 1000), f=arrows)
@settings(max_examples=50)
def test_left_identity(x: int, f: Fn) -> None:
    assert observe(pure(x).bind(f)) == observe(f(x))


@given(x=st.integers(-1000, 1000), f=arrows)
@settings(max_examples=50)
def test_right_identity(x: int, f: Fn) -> None:
    m = f(x)
    assert observe(m.bind(pure)) == observe(m)


@given(x=st.integers(-1000, 1000), f=arrows, g=arrows, h=arrows)
@settings(max_examples=50)
def test_associativity(x: int, f: Fn, g: Fn, h: Fn) -> None:
    m = f(x)
    assert observe(m.bind(g).bind(h)) == observe(m.bind(lambda y: g(y).bind(h)))


@given(x=st.integers(-1000, 1000), f=arrows)
@settings(max_examples=30)
def test_map_is_bind_then_pure(x: int, f: Fn) -> None:
    m = f(x)
    assert observe(m.map(lambda y: y - 7)) == observe(m.bind(lambda y: pure(y - 7)))


def test_module_bind_and_then() -> None:
    f = step_fn("pa", 2)
    assert observe(bind(pure(3), f)) == observe(pure(3).bind(f))
    assert observe(f(1).then(pure(9)))[0] == 9


def test_returns_flow_and_pointfree() -> None:
    f = step_fn("pa", 3)
    piped = flow(pure(2), bind_(f), map_(lambda y: y + 100))
    assert observe(piped) == observe(pure(2).bind(f).map(lambda y: y + 100))


def test_long_bind_chains_do_not_recurse() -> None:
    m: Idem[int] = pure(0)
    for _ in range(5000):
        m = m.bind(lambda y: pure(y + 1))
    assert run(m, request_id="deep", store=MemoryStore()) == 5000


def test_idem_is_immutable_and_reusable() -> None:
    m = step_fn("pa", 1)(5)
    store = MemoryStore()
    assert run(m, request_id="a", store=store) == run(m, request_id="b", store=store) == 6
    assert data_rows(store, "tablea") == {("tablea", "pa", "n"): 10}
    with pytest.raises(AttributeError):
        m.extra = 1  # type: ignore[attr-defined]
