"""The public API by role: each public name importable from exactly one public module, every
public module with an ``__all__`` that names only what it has, every old path of a name 1.0
moved still working with a DeprecationWarning that names the new place."""

from __future__ import annotations

import importlib
import inspect
import warnings
from pathlib import Path
from types import ModuleType

import pytest

import idemflow
from idemflow.core.moved import new_place

PUBLIC_MODULES = (
    "idemflow",
    "idemflow.client",
    "idemflow.worker",
    "idemflow.admin",
    "idemflow.stores",
    "idemflow.testing",
    "idemflow.asgi",
    "idemflow.aws_lambda",
    "idemflow.azure_functions",
)

DEPRECATED_MODULES = (
    "idemflow",
    "idemflow.arunner",
    "idemflow.async_worklist",
    "idemflow.async_worklist.aworker",
    "idemflow.compensation",
    "idemflow.gc",
    "idemflow.helpers",
    "idemflow.operations",
    "idemflow.stores",
)


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def _exported(name: str) -> list[str]:
    return list(getattr(_module(name), "__all__", ()))


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_module_declares_what_it_exports(name: str) -> None:
    module = _module(name)
    assert isinstance(getattr(module, "__all__", None), list), f"{name} has no __all__"
    missing = [entry for entry in module.__all__ if not hasattr(module, entry)]
    assert missing == [], f"{name}.__all__ names what it lacks: {missing}"
    assert len(set(module.__all__)) == len(module.__all__), f"{name}.__all__ repeats a name"


def test_no_public_name_is_importable_from_two_public_modules() -> None:
    homes: dict[str, list[str]] = {}
    for name in PUBLIC_MODULES:
        for entry in _exported(name):
            homes.setdefault(entry, []).append(name)
    for entry in homes:
        for name in PUBLIC_MODULES:
            found = vars(_module(name)).get(entry)
            # defined there, or given under a name of its own (not merely imported to be used)
            defined = getattr(found, "__module__", None) == name or getattr(found, "__name__", entry) != entry
            if name not in homes[entry] and found is not None and defined:
                homes[entry].append(name)
    shared = {entry: places for entry, places in homes.items() if len(places) > 1}
    assert shared == {}


def test_no_public_function_shares_its_name_with_a_module_of_the_package() -> None:
    submodules = {
        info.name.rpartition(".")[2]
        for info in __import__("pkgutil").walk_packages(idemflow.__path__, "idemflow.")
    }
    shadowing = [
        f"{name}.{entry}"
        for name in PUBLIC_MODULES
        for entry in _exported(name)
        if entry in submodules and inspect.isfunction(getattr(_module(name), entry))
    ]
    assert shadowing == []


def _awaited(function: object) -> bool:
    """An asyncio function: a coroutine function, or an asynchronous iterator's (``async for``)."""
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


def test_every_coroutine_function_is_the_twin_of_a_blocking_one_and_back() -> None:
    """One asyncio naming rule: ``a`` + the blocking name, for functions (and async iterators)."""
    unpaired = []
    for name in PUBLIC_MODULES:
        module = _module(name)
        for entry in _exported(name):
            found = getattr(module, entry)
            if _awaited(found) and entry[1:] not in module.__all__:
                unpaired.append(f"{name}.{entry}")
    assert unpaired == []


ASYNCIO_ONLY = {
    "idemflow.asgi.Idempotency": "ASGI apps are asyncio: there is no blocking twin to name it after",
    "idemflow.worker.ThreadedQueue": "a blocking queue adapted to AsyncQueue, not a twin of a class",
}


def test_every_asyncio_class_is_async_plus_its_blocking_twins_name() -> None:
    misnamed = []
    for name in PUBLIC_MODULES:
        module = _module(name)
        for entry in _exported(name):
            found = getattr(module, entry)
            if not inspect.isclass(found) or f"{name}.{entry}" in ASYNCIO_ONLY:
                continue
            members = vars(found)
            awaited = [  # coroutine methods that are not the ``a`` twins of blocking ones beside them
                method
                for method, member in members.items()
                if not method.startswith("_")
                and inspect.iscoroutinefunction(member)
                and not (method[1:] in members and not inspect.iscoroutinefunction(members[method[1:]]))
            ]
            if awaited and not (entry.startswith("Async") and entry[5:] in module.__all__):
                misnamed.append(f"{name}.{entry}")
    assert misnamed == []


@pytest.mark.parametrize("name", ["idemflow.client", "idemflow.admin"])
def test_every_blocking_function_of_the_client_and_the_operator_has_its_twin(name: str) -> None:
    module = _module(name)
    functions = [entry for entry in _exported(name) if inspect.isfunction(getattr(module, entry))]
    blocking = [entry for entry in functions if not _awaited(getattr(module, entry))]
    assert [entry for entry in blocking if "a" + entry not in functions] == []


@pytest.mark.parametrize(
    "blocking",
    ["retry", "cancel", "relay", "runs", "abort_request", "collect", "show", "fork", "check_deploy"],
)
def test_the_operators_commands_each_have_an_asyncio_twin(blocking: str) -> None:
    import idemflow.admin

    assert inspect.iscoroutinefunction(getattr(idemflow.admin, "a" + blocking))


def test_each_api_has_its_own_handle() -> None:
    from idemflow.client import AsyncPending, Pending

    assert inspect.iscoroutinefunction(AsyncPending.result)
    assert not inspect.iscoroutinefunction(Pending.result)
    assert not hasattr(Pending, "aresult")


MOVED = sorted(
    (old, entry, target)
    for old in DEPRECATED_MODULES
    for entry, target in getattr(_module(old), "_MOVES", {}).items()
)


@pytest.mark.parametrize(("old", "entry", "target"), MOVED, ids=[f"{o}.{e}" for o, e, _ in MOVED])
def test_an_old_path_still_imports_with_a_warning_naming_the_new_place(
    old: str, entry: str, target: str
) -> None:
    module, renamed = new_place(target, entry)
    with pytest.warns(DeprecationWarning, match=rf"^{old}\.{entry} moved: import {renamed} from {module}\b"):
        found = getattr(_module(old), entry)
    assert found is getattr(_module(module), renamed)
    assert renamed in _exported(module), f"{target} is not a public place"


def test_an_old_from_import_warns_at_the_importing_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from idemflow.async_worklist import submit  # noqa: F401
    # the import system asks twice (hasattr, then the name): each time it is this line's
    assert caught and {warning.filename for warning in caught} == {__file__}


def test_a_name_that_never_existed_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _module("idemflow.async_worklist").nothing  # noqa: B018


def test_the_suite_refuses_an_old_path() -> None:
    """pyproject's filterwarnings make a moved path an error in the tests themselves."""
    with pytest.raises(DeprecationWarning, match="moved"):
        _module("idemflow.gc").collect  # noqa: B018


def test_a_handle_used_with_the_other_api_is_a_type_error(tmp_path: Path) -> None:
    """What 0.x found at run time (a blocking call on an asynchronous handle), mypy now reports."""
    from mypy import api as mypy

    misuse = tmp_path / "misuse.py"
    misuse.write_text(
        "from idemflow.client import AsyncPending, Pending\n\n\n"
        "async def misuse(blocking: Pending, awaited: AsyncPending) -> None:\n"
        "    await blocking.status()\n"
        "    awaited.status().value\n"
    )
    report, _, exit_status = mypy.run(["--strict", "--follow-imports=silent", str(misuse)])
    assert exit_status == 1
    # mypy's cache may give the path of an earlier identical file: match from the file's name on
    assert 'misuse.py:5: error: Incompatible types in "await"' in report
    assert 'misuse.py:6: error: "Coroutine[Any, Any, RunStatus]" has no attribute "value"' in report


def test_continue_as_new_is_a_step_written_from_the_root() -> None:
    """The step and its error are what a workflow is written with; the status says the incarnation."""
    import idemflow.client

    assert {"continue_as_new", "ContinueAsNewError"} <= set(idemflow.__all__)
    assert idemflow.client.RequestStatus(idemflow.client.RunStatus.RUNNING).incarnation == 1


def test_events_and_streams_are_written_from_the_root_and_read_from_the_client() -> None:
    """What a workflow publishes is written with steps beside ``send`` and read from outside."""
    import idemflow.client

    assert {"set_event", "write_stream", "close_stream", "StreamClosedError", "StreamTimeoutError"} <= set(
        idemflow.__all__
    )
    assert {"get_event", "aget_event", "read_stream", "aread_stream"} <= set(idemflow.client.__all__)
    assert inspect.iscoroutinefunction(idemflow.client.aget_event)
    assert inspect.isasyncgenfunction(idemflow.client.aread_stream)
    assert inspect.isgeneratorfunction(idemflow.client.read_stream)


def test_cancellation_is_an_outcome_error_of_the_root_as_a_failure_is() -> None:
    for name in ("RequestCancelledError", "ChildCancelledError", "RequestFailedError"):
        assert name in idemflow.__all__ and name in idemflow.errors.__all__
        assert getattr(idemflow, name) is getattr(idemflow.errors, name)
    assert issubclass(idemflow.ChildCancelledError, idemflow.RequestCancelledError)
    assert idemflow.RequestCancelledError.code is idemflow.ErrorCode.CANCELLED
