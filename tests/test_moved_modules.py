"""Modules renamed for what they hold still import from their old paths, warning, until 1.1."""

from __future__ import annotations

import importlib

import pytest

MOVED = [
    ("idemflow.stores.aio", "idemflow.stores.async_adapters", "to_async"),
    ("idemflow.stores.dynamodb_aio", "idemflow.stores.dynamodb_async", "AsyncDynamoDBStore"),
    ("idemflow.stores.azure_tables_aio", "idemflow.stores.azure_tables_async", "AsyncAzureTableStore"),
    ("idemflow.async_worklist.queues.aio", "idemflow.async_worklist.queues.async_adapters", "to_async_queue"),
    ("idemflow.async_worklist.queues.sqs_aio", "idemflow.async_worklist.queues.sqs_async", "AsyncSqsQueue"),
    (
        "idemflow.async_worklist.queues.azure_queue_aio",
        "idemflow.async_worklist.queues.azure_queue_async",
        "AsyncAzureQueue",
    ),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED, ids=[old for old, _, _ in MOVED])
def test_an_old_path_gives_the_same_object_and_says_where_it_moved(old: str, new: str, name: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"^{old}\.{name} moved: import {name} from {new}$"):
        value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), name)


def test_an_old_module_path_knows_no_more_names_than_the_new_one() -> None:
    with pytest.raises(AttributeError):
        importlib.import_module("idemflow.stores.aio").no_such_name  # noqa: B018
