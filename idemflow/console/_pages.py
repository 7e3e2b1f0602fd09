"""The console's HTML: the templates shipped as package data, filled with escaped text.

Every value from a store, a queue or a request's input reaches a page through :func:`escape`
(:func:`html.escape`, quotes included) or :func:`shown_json`: a request id or a step's value
cannot become markup. Templates use :class:`string.Template`'s ``$name`` placeholders.
"""

from __future__ import annotations

import json
import time
from functools import cache
from html import escape as escape
from importlib.resources import files
from string import Template
from urllib.parse import quote, urlencode

from idemflow.console._settings import ConsoleSettings, shown_url
from idemflow.serialization import JSON

_NO_STEPS = (
    '<tr><td colspan="7" class="meta">no step shown: none recorded yet, or the request finished '
    "(a finished request's memos are not replayed)</td></tr>"
)
ACTION_LABELS = {"retry": "Retry", "resume": "Resume", "cancel": "Cancel", "abort": "Abort…", "fork": "Fork"}


@cache
def template(name: str) -> Template:
    return Template(files("idemflow.console").joinpath("templates", name).read_text("utf-8"))


def static(name: str) -> bytes | None:
    """A file of ``idemflow/console/static`` (None for any other name)."""
    if "/" in name or name.startswith(".") or not name:
        return None
    found = files("idemflow.console").joinpath("static", name)
    return found.read_bytes() if found.is_file() else None


def layout(settings: ConsoleSettings, title: str, body: str) -> str:
    where = shown_url(settings.store_url)
    if settings.queue_url:
        where += " · " + shown_url(settings.queue_url)
    mode = '<span class="mode">read-only</span>' if settings.read_only else ""
    return template("layout.html").substitute(title=escape(title), where=escape(where), mode=mode, body=body)


def when(epoch: JSON) -> str:
    if not isinstance(epoch, int | float):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch))


def shown_json(value: JSON, limit: int | None = None) -> str:
    text = json.dumps(value, indent=None if limit else 2, sort_keys=True)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return escape(text)


def request_href(workflow: str, request_id: str, **extra: str) -> str:
    return f"/runs/{quote(request_id, safe='')}?" + urlencode({"workflow": workflow, **extra})


def hidden(csrf: str, action_id: str, **fields: str) -> str:
    pairs = {"csrf": csrf, "action_id": action_id, **fields}
    return "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in pairs.items())


def list_page(
    settings: ConsoleSettings, listing: dict[str, JSON], workflows: list[str], query: dict[str, str]
) -> str:
    filters = listing["filters"]
    assert isinstance(filters, dict)
    rows = []
    runs = listing["runs"]
    assert isinstance(runs, list)
    for found in runs:
        assert isinstance(found, dict)
        workflow, request_id, status = str(found["workflow"]), str(found["request_id"]), str(found["status"])
        failure = found.get("failure")
        note = found.get("waiting") or (failure.get("reason") if isinstance(failure, dict) else "") or ""
        rows.append(
            f"<tr><td>{when(found.get('started_at', found.get('finished_at')))}</td>"
            f'<td><span class="status status-{escape(status)}">{escape(status)}</span></td>'
            f"<td>{escape(workflow)} v{escape(str(found.get('version', 1)))}</td>"
            f'<td class="mono">{link(request_href(workflow, request_id), request_id)}</td>'
            f'<td class="tags">{_tags(found.get("tags"))}</td>'
            f"<td>{escape(str(note))}</td></tr>"
        )
    if not rows:
        rows.append('<tr><td colspan="6" class="meta">no request matches</td></tr>')
    status_now = str(filters.get("status", ""))
    statuses = ["", "running", "failed", "cancelled", "completed", "aborted"]
    status_options = "".join(
        f'<option value="{s}"{" selected" if s == status_now else ""}>{s or "any"}</option>' for s in statuses
    )
    match_now = str(filters.get("match", "exact"))
    match_options = "".join(
        f'<option value="{m}"{" selected" if m == match_now else ""}>{m}</option>'
        for m in ("exact", "prefix")
    )
    meta = f"{len(runs)} request(s), {escape(str(listing['order']))}"
    if filters.get("match") == "prefix" and filters.get("id"):
        meta += f"; {listing['scanned']} run records read for this page"
    next_link = ""
    if listing.get("next"):
        kept = {key: value for key, value in query.items() if key != "after" and value}
        next_link = link(
            "/?" + urlencode({**kept, "after": str(listing["next"])}), "next page →", "next-page"
        )
    body = template("list.html").substitute(
        workflow=escape(str(filters.get("workflow", ""))),
        workflow_options="".join(f'<option value="{escape(name)}">' for name in workflows),
        status_options=status_options,
        age=escape(str(filters.get("age", ""))),
        id=escape(str(filters.get("id", ""))),
        match_options=match_options,
        tags=escape(str(filters.get("tags", ""))),
        meta=meta,
        rows="\n".join(rows),
        next=next_link,
    )
    return layout(settings, "Requests", body)


def request_page(settings: ConsoleSettings, shown: dict[str, JSON], csrf: str, action_id: str) -> str:
    workflow, request_id = str(shown["workflow"]), str(shown["request_id"])
    steps = shown.get("steps") or []
    assert isinstance(steps, list)
    body = template("request.html").substitute(
        workflow=escape(workflow),
        workflow_q=escape(quote(workflow, safe="")),
        request_id=escape(request_id),
        status=escape(str(shown["status"])),
        version=escape(str(shown.get("version", 1))),
        note=f'<p class="note">{escape(str(shown["note"]))}</p>' if shown.get("note") else "",
        started=when(shown.get("started_at")),
        finished=when(shown.get("finished_at")),
        deadline=when(shown.get("deadline")),
        next_step=escape(str(shown.get("next_step") or "-")),
        waits_for=escape(str(shown.get("waits_for") or "-")),
        retrying=shown_json(shown["retrying"], 300) if shown.get("retrying") else "-",
        failure=_failure(shown.get("failure")),
        parent=_parent(shown.get("parent")),
        tags=_tags(shown.get("tags")) or "-",
        actions=_actions(shown, csrf, action_id),
        steps="\n".join(_step_row(step) for step in steps) or _NO_STEPS,
        children=_step_list(shown.get("children"), "no child request"),
        messages=_step_list(shown.get("messages"), "no message sent or received"),
        events=_events(shown.get("events")),
        streams=_streams(shown.get("streams")),
        input=shown_json(shown.get("input")),
        result=shown_json(shown.get("result", shown.get("reason"))),
    )
    return layout(settings, request_id, body)


def abort_page(settings: ConsoleSettings, shown: dict[str, JSON], csrf: str, action_id: str) -> str:
    workflow, request_id = str(shown["workflow"]), str(shown["request_id"])
    compensations = shown.get("compensations") or []
    assert isinstance(compensations, list)
    listed = "".join(f"<li>{escape(str(item))}</li>" for item in compensations) or (
        '<li class="meta">none: no committed step to undo</li>'
    )
    body = template("abort.html").substitute(
        workflow=escape(workflow),
        request_id=escape(request_id),
        status=escape(str(shown["status"])),
        back=escape(request_href(workflow, request_id)),
        compensations=listed,
        action=escape(f"/runs/{quote(request_id, safe='')}/abort"),
        hidden=hidden(csrf, action_id, workflow=workflow),
    )
    return layout(settings, f"Abort {request_id}", body)


def dead_letters_page(settings: ConsoleSettings, letters: dict[str, JSON], csrf: str, action_id: str) -> str:
    found = letters["dead_letters"]
    assert isinstance(found, list)
    rows: list[str] = []
    for letter in found:
        assert isinstance(letter, dict)
        button = ""
        if not settings.read_only:
            fields = hidden(csrf, f"{action_id}-{len(rows)}", id=str(letter["id"]))
            button = (
                f'<form method="post" action="/dead-letters/redrive">{fields}'
                '<button type="submit">Redrive</button></form>'
            )
        rows.append(
            f"<tr><td>{when(letter.get('dead_at'))}</td><td>{escape(str(letter['reason']))}</td>"
            f'<td class="mono value">{escape(str(letter["body"])[:400])}</td><td>{button}</td></tr>'
        )
    everything = ""
    if found and not settings.read_only:
        everything = (
            f'<form method="post" action="/dead-letters/redrive" class="actions">{hidden(csrf, action_id)}'
            f'<button type="submit" id="redrive-all">Redrive all {len(found)}</button></form>'
        )
    body = template("dead_letters.html").substitute(
        redrive_all=everything,
        rows="\n".join(rows) or '<tr><td colspan="4" class="meta">no dead letters</td></tr>',
    )
    return layout(settings, "Dead letters", body)


def message_page(settings: ConsoleSettings, heading: str, message: str, more: str = "") -> str:
    body = template("message.html").substitute(heading=escape(heading), message=escape(message), more=more)
    return layout(settings, heading, body)


def login_page(settings: ConsoleSettings, message: str, next_path: str) -> str:
    body = template("login.html").substitute(message=escape(message), next=escape(next_path))
    return layout(settings, "Sign in", body)


def aborted_page(settings: ConsoleSettings, outcome: dict[str, JSON], href: str) -> str:
    """What a confirmed abort did: the compensations it ran, or that the request had ended."""
    compensations = outcome.get("compensations") or []
    assert isinstance(compensations, list)
    if outcome.get("status") == "aborted":
        listed = "".join(f"<li>{escape(str(item))}</li>" for item in compensations)
        more = (
            f'<h2>Compensations run</h2><ol class="compensations" id="compensations-run">{listed}</ol>'
            if listed
            else ""
        )
        message = f"Request {outcome['request_id']} is aborted (it was {outcome['was']})."
    else:
        more, message = (
            "",
            f"Request {outcome['request_id']} had already ended {outcome.get('status')}: nothing was undone.",
        )
    return message_page(
        settings, "Aborted", message, more + "<p>" + link(href, "back to the request", "back") + "</p>"
    )


def link(href: str, text: str, element_id: str = "") -> str:
    ident = f' id="{escape(element_id)}"' if element_id else ""
    return f'<a href="{escape(href)}"{ident}>{escape(text)}</a>'


def _actions(shown: dict[str, JSON], csrf: str, action_id: str) -> str:
    workflow, request_id = str(shown["workflow"]), str(shown["request_id"])
    actions = shown.get("actions") or []
    assert isinstance(actions, list)
    parts = []
    for action in actions:
        name = str(action)
        if name == "abort":
            href = f"/runs/{quote(request_id, safe='')}/abort?" + urlencode({"workflow": workflow})
            parts.append(f'<a href="{escape(href)}" id="abort" class="danger">Abort…</a>')
            continue
        target = escape(f"/runs/{quote(request_id, safe='')}/{name}")
        if name == "fork":  # a new request from a step: which step, and its id if one is wanted
            fields = hidden(csrf, f"{action_id}-fork", workflow=workflow)
            parts.append(
                f'<form method="post" action="{target}">{fields}'
                '<label>from step <input type="number" name="from_step" id="from_step" min="1" '
                'value="1" required></label> <label>new id <input name="new_id" id="new_id"></label> '
                '<button type="submit" id="fork">Fork</button></form>'
            )
            continue
        parts.append(
            f'<form method="post" action="{target}">{hidden(csrf, f"{action_id}-{name}", workflow=workflow)}'
            f'<button type="submit" id="{name}">{ACTION_LABELS[name]}</button></form>'
        )
        if name == "cancel":  # a form of its own (its own action id): the requests it started too
            fields = hidden(csrf, f"{action_id}-cancel-children", workflow=workflow, children="1")
            parts.append(
                f'<form method="post" action="{target}">{fields}'
                '<button type="submit" id="cancel-children">Cancel with children</button></form>'
            )
    return "".join(parts) or '<span class="meta">no action applies</span>'


def _step_row(step: JSON) -> str:
    assert isinstance(step, dict)
    return (
        f"<tr><td>{escape(str(step.get('step')))}</td><td>{escape(str(step.get('kind')))}</td>"
        f"<td>{escape(str(step.get('name')))}</td>"
        f'<td class="mono">{escape(str(step.get("table")))}/{escape(str(step.get("partition")))}</td>'
        f'<td class="outcome">{escape(str(step.get("outcome")))}</td><td>{when(step.get("at"))}</td>'
        f'<td class="mono value">{shown_json(step.get("value"), 200)}</td></tr>'
    )


def _step_list(steps: JSON, empty: str) -> str:
    if not isinstance(steps, list) or not steps:
        return f'<p class="meta">{escape(empty)}</p>'
    items = "".join(
        f"<li>step {escape(str(s.get('step')))}: {escape(str(s.get('kind')))} {escape(str(s.get('name')))} → "
        f'<span class="mono">{shown_json(s.get("value"), 200)}</span></li>'
        for s in steps
        if isinstance(s, dict)
    )
    return f"<ul>{items}</ul>"


def _events(events: JSON) -> str:
    """The events a request set, each with the value it holds now (through the redaction hook)."""
    if not isinstance(events, list) or not events:
        return '<p class="meta" id="events">no event set</p>'
    rows = "".join(
        f'<tr><td class="mono">{escape(str(e.get("key")))}</td>'
        f'<td class="mono value">{shown_json(e.get("value"), 200)}</td>'
        f"<td>{escape(str(e.get('step')))}</td><td>{when(e.get('at'))}</td></tr>"
        for e in events
        if isinstance(e, dict)
    )
    head = "<thead><tr><th>Key</th><th>Value</th><th>Set at step</th><th>Set (UTC)</th></tr></thead>"
    return f'<table class="events" id="events">{head}<tbody>{rows}</tbody></table>'


def _streams(streams: JSON) -> str:
    """The streams a request wrote: how many values each holds, and whether it is closed."""
    if not isinstance(streams, list) or not streams:
        return '<p class="meta" id="streams">no stream written</p>'
    rows = "".join(
        f'<tr><td class="mono">{escape(str(s.get("key")))}</td><td>{escape(str(s.get("length")))}</td>'
        f"<td>{_stream_state(s)}</td></tr>"
        for s in streams
        if isinstance(s, dict)
    )
    head = "<thead><tr><th>Key</th><th>Values</th><th>State</th></tr></thead>"
    return f'<table class="streams" id="streams">{head}<tbody>{rows}</tbody></table>'


def _stream_state(stream: dict[str, JSON]) -> str:
    if not stream.get("closed"):
        return "open"
    return "closed at step " + escape(str(stream.get("closed_at_step")))


def _failure(failure: JSON) -> str:
    if not isinstance(failure, dict):
        return "-"
    step, identity = failure.get("step"), failure.get("identity")
    named = f"step {step}" if identity is None else f"step {step}: {identity}"
    where = f" ({named}, {failure.get('attempts')} attempt(s))" if step else ""
    return escape(str(failure.get("reason")) + where)


def _tags(tags: JSON) -> str:
    """A request's tags as ``key=value`` items, each escaped (empty for none)."""
    if not isinstance(tags, dict):
        return ""
    return " ".join(f'<span class="tag">{escape(f"{key}={value}")}</span>' for key, value in tags.items())


def _parent(parent: JSON) -> str:
    if not isinstance(parent, dict):
        return "-"
    return link(
        request_href(str(parent["workflow"]), str(parent["request_id"])),
        f"{parent['workflow']} / {parent['request_id']}",
    )
