"""``MODULE:ATTR`` on the command line: the workflows, scaling policy or redaction function a
command names, imported from the project in the current directory.

Every command that runs a project's code (``worker``, ``runs show``, ``abort``, ``console``,
``schedules``) names
it the same way and must refuse a bad name with one line, not a traceback, so the loading is
written once here.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from idemflow.errors import InvalidInputError
from idemflow.running.workflows import Workflow
from idemflow.scheduling.definition import Schedule, check_schedules


def load_callable(spec: str) -> Any:
    """MODULE:ATTR naming a function (``--redact``)."""
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name) if module_name and attr else None
    except ImportError as exc:
        raise InvalidInputError(f"cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise InvalidInputError(f"--redact needs MODULE:ATTR naming a function, not {spec!r}")
    return target


def load_workflows(spec: str) -> list[Any]:
    """``--workflows``: one workflow or a list of them (a stranger's first try names one)."""
    target = load_object(spec, "one workflow or a list of them")
    if isinstance(target, Workflow):
        return [target]
    try:
        found = list(target)
    except TypeError:
        found = [target]
    strangers = [item for item in found if not isinstance(item, Workflow)]
    if strangers:
        raise InvalidInputError(f"{spec} holds {strangers[0]!r}, not a @workflow")
    return found


def load_schedules(spec: str) -> list[Schedule]:
    """``--schedules``: one schedule or a list of them (checked: no two of one name)."""
    target = load_object(spec, "one Schedule or a list of them")
    found = [target] if isinstance(target, Schedule) else None
    if found is None:
        try:
            found = list(target)
        except TypeError:
            found = [target]
    strangers = [item for item in found if not isinstance(item, Schedule)]
    if strangers:
        raise InvalidInputError(f"{spec} holds {strangers[0]!r}, not a Schedule")
    return list(check_schedules(found))


def load_object(spec: str, what: str) -> Any:
    """The object ``spec`` (MODULE:ATTR) names, said to be ``what`` when it names none."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidInputError(f"{spec!r} must be MODULE:ATTR naming {what}")
    # As `python -m` does: the project in the current directory is importable without installing it.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInputError(f"cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise InvalidInputError(f"{module_name!r} has no attribute {attr!r}")
    return target
