"""What the console's pages and JSON API show and do, as JSON: every read and action is a call of
:mod:`idemflow.admin` (``runs``, ``show``, ``retry``, ``cancel``, ``abort_request``,
``fork``, ``dead_letters``, ``redrive``), so the console is exactly as safe beside running workers as the
``idemflow`` command.

A listing reads a page of run records, never the table: the filters a store can apply while
paging (workflow, status, age, tags) go to :func:`idemflow.admin.runs`; a request id is looked up in its
own partition (one read); a request id *prefix* is a filter the console applies to the pages it
reads, at most :data:`PREFIX_BUDGET` records per page it shows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from idemflow.admin import (
    RunSummary,
    abort_request,
    cancel,
    dead_letters,
    fork,
    redrive,
    retry,
    runs,
    show,
)
from idemflow.console._settings import ConsoleSettings
from idemflow.core.tags import TagFilter, carries, parse_tag, tag_filter
from idemflow.errors import ConsoleRefusedError, InvalidInputError, RequestNotFoundError
from idemflow.keys import RUN, RUNS_TABLE
from idemflow.operator.collection import parse_duration
from idemflow.records import RunRecord, RunStatus
from idemflow.running.workflows import Workflow
from idemflow.serialization import JSON
from idemflow.stores.base import Store
from idemflow.worker import Queue

PREFIX_BUDGET = 5000
"""Run records a prefix search reads for one page before it shows what it found so far."""
LISTED_STATUSES = tuple(status.value for status in RunStatus if status.value not in ("pending", "unknown"))
ACTIONS = ("retry", "resume", "cancel", "abort", "fork")
_UNDOABLE = ("atomic", "effect", "start")
"""Step kinds whose compensation an abort runs (a child started is aborted in turn)."""


@dataclass(frozen=True, slots=True)
class Forking:
    """What a fork is asked for: the first step run anew, the new id (None: one is made), and a
    finished request's input given again (``(args, kwargs)``)."""

    from_step: int
    new_id: str | None = None
    input: tuple[list[Any], dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class Filters:
    """A listing's filters, as the list page's form and ``/api/runs`` take them."""

    workflow: str | None = None
    status: RunStatus | None = None
    older_than: str | None = None
    request_id: str | None = None
    prefix: bool = False
    after: str | None = None
    tags: TagFilter = ()
    """Tags every request listed carries: the ``tags`` parameter, ``key=value`` pairs separated by
    commas (``customer=c-1,region=eu``)."""

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Filters:
        """Filters from query parameters; :class:`InvalidInputError` naming the bad one."""
        status = params.get("status") or None
        if status is not None and status not in LISTED_STATUSES:
            raise InvalidInputError(f"status must be one of {', '.join(LISTED_STATUSES)}, not {status!r}")
        older = params.get("age") or None
        if older is not None:
            parse_duration(older)  # its own error names the forms it takes
        match = params.get("match") or "exact"
        if match not in ("exact", "prefix"):
            raise InvalidInputError(f"match must be exact or prefix, not {match!r}")
        given = (params.get("tags") or "").split(",")
        tags = tag_filter(parse_tag(pair.strip()) for pair in given if pair.strip())
        return cls(
            workflow=params.get("workflow") or None,
            status=None if status is None else RunStatus(status),
            older_than=older,
            request_id=params.get("id") or None,
            prefix=match == "prefix",
            after=params.get("after") or None,
            tags=tags,
        )

    def to_json(self) -> dict[str, JSON]:
        shown: dict[str, JSON] = {
            "workflow": self.workflow,
            "status": None if self.status is None else self.status.value,
            "age": self.older_than,
            "id": self.request_id,
            "match": "prefix" if self.prefix else "exact",
            "tags": ",".join(f"{key}={value}" for key, value in self.tags) or None,
        }
        return {key: value for key, value in shown.items() if value is not None}


class ConsoleData:
    """The console's reads and actions over one store, an optional queue and the workflows' code."""

    def __init__(
        self,
        settings: ConsoleSettings,
        store: Store,
        queue: Queue | None,
        workflows: Iterable[Workflow[Any, Any]],
    ) -> None:
        self.settings = settings
        self.store = store
        self.queue = queue
        self.workflows = list(workflows)
        self._names = {flow.name for flow in self.workflows}

    # -- reads ---------------------------------------------------------------------------------

    def runs(self, filters: Filters) -> dict[str, JSON]:
        """A page of requests: ``{"runs": [...], "next": cursor|None, "order": ..., "scanned": n}``."""
        older = None if filters.older_than is None else parse_duration(filters.older_than)
        size = self.settings.page_size
        if filters.request_id is not None and not filters.prefix:
            found = [
                summary
                for summary in self._by_id(filters.request_id)
                if (filters.workflow is None or summary.workflow == filters.workflow)
                and (filters.status is None or summary.status is filters.status)
                and carries(summary.record.tags, filters.tags)
            ]
            return self._page(found, None, "one partition", len(found), filters)
        if filters.request_id is None:
            page = runs(
                self.store,
                workflow=filters.workflow,
                status=filters.status,
                older_than=older,
                limit=size,
                after=filters.after,
                tags=dict(filters.tags),
            )
            return self._page(list(page.runs), page.next, page.order, len(page.runs), filters)
        found, after, scanned, order = [], filters.after, 0, ""
        while len(found) < size and scanned < PREFIX_BUDGET:
            page = runs(
                self.store,
                workflow=filters.workflow,
                status=filters.status,
                older_than=older,
                limit=min(500, PREFIX_BUDGET),
                after=after,
                tags=dict(filters.tags),
            )
            order, after, scanned = page.order, page.next, scanned + len(page.runs)
            found += [summary for summary in page.runs if summary.request_id.startswith(filters.request_id)]
            if after is None:
                break
        return self._page(found, after, order, scanned, filters)

    def request(self, request_id: str, workflow: str | None) -> dict[str, JSON]:
        """A request's page: its timeline as :func:`idemflow.admin.show` lists it (replayed with the
        code given, else read from the store), what it waits for, its children and messages, the
        compensations an abort would run, and the actions allowed on it now."""
        summary = self._one(request_id, workflow)
        record = summary.record
        flows = [flow for flow in self.workflows if flow.name == summary.workflow]
        shown = show(self.store, flows, summary.workflow, request_id).to_json()  # no code: the store's
        notes = shown.get("notes")
        note = "; ".join(str(text) for text in notes) if isinstance(notes, list) else None
        redact = self.settings.redact
        for event in _listed(shown, "events"):
            event["value"] = redact(event.get("value"))
        steps = shown.get("steps", [])
        assert isinstance(steps, list)
        for step in steps:
            assert isinstance(step, dict)
            step["value"] = redact(step.get("value"))
        if "result" in shown:
            shown["result"] = redact(shown["result"])
        if record.input is not None:
            shown["input"] = redact(record.input)
        shown["children"] = [step for step in steps if _kind(step) in ("start", "wait")]
        shown["messages"] = [step for step in steps if _kind(step) in ("send", "receive")]
        if record.parent is not None:
            shown["parent"] = {"workflow": record.parent.workflow, "request_id": record.parent.request_id}
        shown["compensations"] = [
            f"step {step['step']} ({step['kind']} {step['name']})"
            for step in reversed(steps)
            if isinstance(step, dict) and step.get("outcome") == "committed" and _kind(step) in _UNDOABLE
        ]
        shown["actions"] = list(self.allowed(record.status, bool(flows)))
        if note is not None:
            shown["note"] = note
        return shown

    def dead_letters(self) -> dict[str, JSON]:
        """The queue's dead letters, bodies through the redaction hook where they are JSON."""
        if self.queue is None:
            raise ConsoleRefusedError("no queue was given (--queue): dead letters are not shown")
        letters: list[JSON] = []
        for letter in dead_letters(self.queue, limit=500):
            body: JSON
            try:
                body = json.dumps(self.settings.redact(json.loads(letter.body)))
            except ValueError:
                body = letter.body
            letters.append(
                {"id": letter.id, "dead_at": letter.dead_at, "reason": letter.reason, "body": body[:2000]}
            )
        return {"dead_letters": letters}

    def allowed(self, status: RunStatus, have_code: bool) -> Iterable[str]:
        """The actions this console offers on a request in ``status`` (a fork, on any request,
        needs the queue and the workflow's code)."""
        if self.settings.read_only:
            return
        if not status.final:
            if self.queue is not None and status in (RunStatus.FAILED, RunStatus.RUNNING):
                yield "retry"
            if self.queue is not None and status is RunStatus.CANCELLED:
                yield "resume"
            if status in (RunStatus.RUNNING, RunStatus.FAILED):
                yield "cancel"
            if have_code:
                yield "abort"
        if have_code and self.queue is not None:
            yield "fork"

    # -- actions -------------------------------------------------------------------------------

    def act(
        self,
        action: str,
        request_id: str,
        workflow: str | None,
        reason: str | None,
        *,
        children: bool = False,
        forking: Forking | None = None,
    ) -> dict[str, JSON]:
        """Carry out ``action`` through :mod:`idemflow.admin`; what it found and did (``children``:
        a cancel cancels the requests it started too; ``forking``: a fork's step, new id, input)."""
        if self.settings.read_only:
            raise ConsoleRefusedError("this console is read-only")
        if action not in ACTIONS:
            raise InvalidInputError(f"no action {action!r}: one of {', '.join(ACTIONS)}")
        summary = self._one(request_id, workflow)
        name = summary.workflow
        if action in ("retry", "resume"):
            if self.queue is None:
                raise ConsoleRefusedError(f"{action} needs the queue (--queue)")
            was = retry(self.store, self.queue, name, request_id)
            return {
                "action": action,
                "request_id": request_id,
                "workflow": name,
                "was": was.value,
                "done": not was.final,
            }
        if action == "cancel":
            said = reason or "cancelled from the console"
            was = cancel(self.store, name, request_id, reason=said, children=children)
            done = not was.final and was is not RunStatus.CANCELLED
            answer: dict[str, JSON] = {
                "action": action,
                "request_id": request_id,
                "workflow": name,
                "was": was.value,
                "done": done,
            }
            return {**answer, "children": True} if children else answer
        flows = [flow for flow in self.workflows if flow.name == name]
        if not flows:
            raise ConsoleRefusedError(f"{action} needs the code of workflow {name!r} (--workflows)")
        if action == "fork":
            return self._fork(name, request_id, flows, forking)
        before = summary.status
        ended = abort_request(
            self.store, flows, name, request_id, reason=reason or "aborted from the console"
        )
        return {
            "action": action,
            "request_id": request_id,
            "workflow": name,
            "was": before.value,
            "status": ended.status.value,
            "done": ended.status is RunStatus.ABORTED and not before.final,
        }

    def _fork(
        self, name: str, request_id: str, flows: list[Workflow[Any, Any]], forking: Forking | None
    ) -> dict[str, JSON]:
        if self.queue is None:
            raise ConsoleRefusedError("fork needs the queue (--queue)")
        if forking is None:
            raise InvalidInputError("fork needs from_step, the first step run anew")
        handle = fork(
            self.store,
            flows,
            name,
            request_id,
            from_step=forking.from_step,
            new_request_id=forking.new_id,
            queue=self.queue,
            input=forking.input,
        )
        return {
            "action": "fork",
            "request_id": request_id,
            "workflow": name,
            "new_request_id": handle.request_id,
            "from_step": forking.from_step,
            "done": True,
        }

    def redrive(self, ids: list[str] | None) -> dict[str, JSON]:
        if self.settings.read_only:
            raise ConsoleRefusedError("this console is read-only")
        if self.queue is None:
            raise ConsoleRefusedError("redrive needs the queue (--queue)")
        return {"action": "redrive", "moved": redrive(self.queue, ids)}

    # -- lookups -------------------------------------------------------------------------------

    def _by_id(self, request_id: str) -> list[RunSummary]:
        """Every request with this id (one per workflow at most): one partition of run records."""
        found = []
        for _, key, row in self.store.scan(RUNS_TABLE, request_id):
            if not key.startswith(RUN):
                continue
            try:
                found.append(RunSummary(key[len(RUN) :], request_id, RunRecord.from_json(row.value)))
            except (KeyError, TypeError, ValueError):
                continue  # a record this version cannot read
        return found

    def _one(self, request_id: str, workflow: str | None) -> RunSummary:
        found = [
            summary for summary in self._by_id(request_id) if workflow is None or summary.workflow == workflow
        ]
        if not found:
            raise RequestNotFoundError(
                f"no request {request_id!r}" + ("" if workflow is None else f" of workflow {workflow!r}")
            )
        if len(found) > 1:
            names = ", ".join(sorted(summary.workflow for summary in found))
            raise InvalidInputError(
                f"request id {request_id!r} names requests of workflows {names}: pass workflow="
            )
        return found[0]

    def _page(
        self, found: list[RunSummary], after: str | None, order: str, scanned: int, filters: Filters
    ) -> dict[str, JSON]:
        listed: list[JSON] = []
        for summary in found:
            shown = summary.to_json()
            shown["actions"] = list(self.allowed(summary.status, summary.workflow in self._names))
            listed.append(shown)
        return {
            "runs": listed,
            "next": after,
            "order": order,
            "scanned": scanned,
            "filters": filters.to_json(),
        }


def _kind(step: JSON) -> str:
    return str(step.get("kind")) if isinstance(step, dict) else ""


def _listed(shown: dict[str, JSON], name: str) -> list[dict[str, JSON]]:
    """The entries of the list ``shown[name]`` (a page's events, streams)."""
    found = shown.get(name) or []
    assert isinstance(found, list)
    return [entry for entry in found if isinstance(entry, dict)]
