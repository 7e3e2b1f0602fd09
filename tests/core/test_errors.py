"""The error tree: one root, a code on every error, backend fields that survive pickling, the
names before 1.0 still resolving (with a warning), and one classification per backend family."""

from __future__ import annotations

import importlib
import inspect
import pickle
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest

from idemflow import errors
from idemflow.errors import (
    BackendError,
    ConfigurationError,
    ErrorCode,
    IdemflowError,
    TransientError,
    backend_error,
)

CLASSES = [
    value
    for value in vars(errors).values()
    if inspect.isclass(value) and issubclass(value, IdemflowError) and value.__module__ == errors.__name__
]
OUTCOMES = {"WorkflowAborted", "ChildAborted"}
"""Aborts a workflow chose: caught as outcomes, named for them (docs/decisions.md)."""


def test_every_error_class_is_in_the_tree_with_a_code_and_a_regular_name() -> None:
    assert len(CLASSES) == 36
    for cls in CLASSES:
        assert isinstance(cls.code, ErrorCode), cls
        assert cls.__name__.endswith("Error") or cls.__name__ in OUTCOMES, cls
        assert cls.__name__ in errors.__all__
    assert {cls.code for cls in CLASSES} - {ErrorCode.BACKEND_FAILED} >= {
        ErrorCode.INVALID_INPUT,
        ErrorCode.LIMIT_EXCEEDED,
        ErrorCode.CONFLICT,
        ErrorCode.TRANSIENT,
        ErrorCode.MISCONFIGURED,
        ErrorCode.MESSAGE_LOST,
        ErrorCode.ABORTED,
    }


MADE: list[IdemflowError] = [
    errors.InvalidNameError("table", "", "must not be empty"),
    errors.LimitExceededError("here", "too big", backend="dynamodb", operation="PutItem", service_code="V"),
    errors.MessageRejectedError("not JSON"),
    errors.MissingIdempotencyKeyError("send one"),
    errors.MessageLostError("gone", backend="sqs", operation="ChangeMessageVisibility"),
    errors.QueueError("no"),
    errors.RequestFailedError("wf", "r", 2, "boom", 3),
    errors.EffectTimeoutError("charge", 1.5),
    errors.StreamClosedError("wf", "r", "log", 3, 5),
    errors.StreamTimeoutError("wf", "r", "log", 3, 1.5),
    errors.StepFailedError("wf", "r", 1, "atomic a", "boom"),
    errors.VersionNotHeldError("wf", "r", 2, (1,)),
    errors.ForkStepError("wf", "r", 9, "the request has 3 steps: from_step is 1 to 4"),
    errors.RequestExistsError("wf", "r-2"),
    errors.DeliveryRetryError("m1", 2, "the store is down"),
    errors.ConsoleExposedError("0.0.0.0"),
    errors.LimitReachedError("wf", "r", "concurrency slot of workflow wf (2 at once)", 0.25),
    errors.ChildAborted("why", "child", "r-c"),
    errors.RequestCancelledError("wf", "r", "customer called"),
    errors.ChildCancelledError("child", "r-c", {"by": "ops"}),
    backend_error(
        "refused", ErrorCode.CREDENTIALS_REFUSED, backend="sqs", operation="SendMessage", service_code="403"
    ),
    backend_error(
        "busy",
        ErrorCode.THROTTLED,
        backend="azure_queue",
        operation="send_message",
        service_code="ServerBusy",
    ),
]


@pytest.mark.parametrize("error", MADE, ids=lambda e: f"{type(e).__name__}-{e.code}")
def test_pickling_keeps_the_code_and_where_the_backend_said_it(error: IdemflowError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    fields = ("code", "backend", "operation", "service_code")
    assert [getattr(copy, name) for name in fields] == [getattr(error, name) for name in fields]


def test_the_class_follows_the_code() -> None:
    made = {
        code: backend_error("x", code, backend="memory", operation=None, service_code=None)
        for code in ErrorCode
    }
    assert {code for code, error in made.items() if isinstance(error, TransientError)} == {
        ErrorCode.TRANSIENT,
        ErrorCode.THROTTLED,
    }
    assert {code for code, error in made.items() if isinstance(error, ConfigurationError)} == {
        ErrorCode.CREDENTIALS_REFUSED,
        ErrorCode.NOT_FOUND,
        ErrorCode.MISCONFIGURED,
    }
    assert type(made[ErrorCode.BACKEND_FAILED]) is BackendError


OLD = [  # (module, old name, the class it now is)
    ("idemflow", "StoreError", "BackendError"),
    ("idemflow", "TransientStoreError", "TransientError"),
    ("idemflow", "StoreConfigError", "ConfigurationError"),
    ("idemflow", "CompensationFailed", "CompensationError"),
    ("idemflow", "RequestFailed", "RequestFailedError"),
    ("idemflow", "MessageNotDelivered", "MessageNotDeliveredError"),
    ("idemflow", "EffectTimeout", "EffectTimeoutError"),
    ("idemflow.errors", "StoreError", "BackendError"),
    ("idemflow.errors", "MessageRejected", "MessageRejectedError"),
    ("idemflow.errors", "MissingIdempotencyKey", "MissingIdempotencyKeyError"),
    ("idemflow.compensation", "CompensationFailed", "CompensationError"),
    ("idemflow.async_worklist", "MessageRejected", "MessageRejectedError"),
    ("idemflow.async_worklist", "MessageNotDelivered", "MessageNotDeliveredError"),
    ("idemflow.async_worklist.messages", "MessageRejected", "MessageRejectedError"),
    ("idemflow.asgi", "MissingIdempotencyKey", "MissingIdempotencyKeyError"),
    ("idemflow.async_worklist.queues.base", "MessageLostError", "MessageLostError"),
]


@pytest.mark.parametrize(("module", "old", "new"), OLD)
def test_an_old_name_or_home_resolves_with_a_deprecation_warning(module: str, old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} moved: import {new} from idemflow\b"):
        found = getattr(importlib.import_module(module), old)
    assert found is getattr(errors, new)


def test_an_old_name_works_in_an_except_clause_and_new_names_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from idemflow import BackendError as New  # noqa: F401 - imported to prove it does not warn
        from idemflow.errors import ConfigurationError as Config

        with pytest.raises(AttributeError):
            errors.__getattr__("NoSuchError")
    with pytest.warns(DeprecationWarning):
        from idemflow.errors import StoreError  # type: ignore[attr-defined]
    with pytest.raises(StoreError):
        raise Config("refused")


# -- the SQLite family: the store and the queue classify sqlite3 alike ------------------------------


def test_sqlite_store_and_queue_raise_the_same_error_for_a_file_that_cannot_open(tmp_path: Path) -> None:
    from idemflow import open_store
    from idemflow.async_worklist.queues import open_queue

    folder = tmp_path / "a-folder"
    folder.mkdir()

    def opened(action: Any) -> IdemflowError:
        with pytest.raises(ConfigurationError) as caught:
            action()
        return caught.value

    found = [
        opened(lambda: open_store(f"sqlite:{folder}").read(errors_row())),
        opened(lambda: open_queue(f"sqlite:{folder}").send("x")),
    ]
    for error in found:
        assert (error.code, error.backend, error.operation) == (ErrorCode.MISCONFIGURED, "sqlite", "connect")
        assert error.service_code == "SQLITE_CANTOPEN"
        assert str(folder) in str(error)


def errors_row() -> Any:
    from idemflow.stores.base import RowRef

    return RowRef("accounts", "p", "k")


@pytest.mark.parametrize(
    ("name", "code", "error"),
    [
        ("SQLITE_BUSY", ErrorCode.TRANSIENT, TransientError),
        ("SQLITE_BUSY_SNAPSHOT", ErrorCode.TRANSIENT, TransientError),
        ("SQLITE_READONLY_DBMOVED", ErrorCode.MISCONFIGURED, ConfigurationError),
        ("SQLITE_CORRUPT", ErrorCode.BACKEND_FAILED, BackendError),
    ],
)
def test_sqlite_result_codes_decide_the_class(name: str, code: ErrorCode, error: type[Exception]) -> None:
    from idemflow.stores._sqlite_errors import sqlite_error

    failure = sqlite3.OperationalError("what sqlite said")
    failure.sqlite_errorname = name
    made = sqlite_error("read failed", failure, "SELECT")
    assert type(made) is error and (made.code, made.service_code) == (code, name)
    assert str(made) == "read failed: what sqlite said"
