"""The console's HTTP answers: the standard library's HTTP server on a pool of threads, one
handler, no framework.

Routes (pages, then the JSON API behind them; docs/console.md documents the API):

    GET  /                          requests, filtered and paged
    GET  /runs/ID?workflow=W        a request's timeline and actions
    GET  /runs/ID/abort?workflow=W  the abort confirmation: the compensations that will run
    POST /runs/ID/ACTION            retry, resume, cancel, abort or fork (form: csrf, action_id, workflow;
                                    cancel also takes children=1: the requests it started too; fork
                                    from_step, new_id and input)
    GET  /dead-letters              dead letters;  POST /dead-letters/redrive
    GET  /login?token=T, POST /login   a browser signs in with the token
    GET  /api/runs, /api/runs/ID, /api/dead-letters, /api/session;  POST /api/runs/ID/ACTION,
         /api/dead-letters/redrive

Requests are answered on a fixed pool of threads (:data:`THREADS`), all against the one store and
queue the console opened (the stores are shared by a worker's threads the same way). The console
that listens, over its store, is :class:`~idemflow.console._server.Console`; this module answers
what it receives.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

from idemflow.console import _pages as pages
from idemflow.console._data import ConsoleData, Filters, Forking
from idemflow.console._guard import SESSION_COOKIE, Caller, Guard, new_action_id
from idemflow.console._settings import ConsoleSettings
from idemflow.errors import ConsoleRefusedError, IdemflowError, InvalidInputError, RequestNotFoundError
from idemflow.serialization import JSON

log = logging.getLogger("idemflow.console")
THREADS = 8
"""Requests answered at once (and store connections held): an operator's console, not a site."""
MAX_BODY = 64 * 1024
"""The largest POST body read (a form or an API call is far smaller)."""


class Served(Protocol):
    """What the handler answers with: the console's checked settings, its data and its guard."""

    settings: ConsoleSettings
    data: ConsoleData
    guard: Guard


class PooledServer(HTTPServer):
    """An HTTP server answering on a fixed pool of threads.

    Not ``ThreadingHTTPServer``'s thread per request: a store keeps a connection per thread that
    uses it (SQLite's are kept until the store closes), so a new thread per page would open a new
    connection per page, and a day of page views would run out of file descriptors.
    """

    console: Served

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="idemflow-console")
        super().__init__(address, handler)  # closes the server (and the pool) if it cannot bind

    def process_request(self, request: Any, client_address: Any) -> None:
        self._pool.submit(self._answer, request, client_address)

    def _answer(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - one broken connection never stops the server
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=True, cancel_futures=True)


class Handler(BaseHTTPRequestHandler):
    """One request of a connection: routed, checked by the guard, answered as a page or JSON."""

    server: PooledServer
    timeout = 30  # a client that stops sending mid-request frees its thread after this

    def version_string(self) -> str:
        return "idemflow-console"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    # -- dispatch ------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        console = self.server.console
        parts = urlsplit(self.path)
        path, query = parts.path, dict(parse_qsl(parts.query))
        api = path.startswith("/api/")
        self._caller: Caller | None = None
        if path.startswith("/static/"):
            return self._static(path.removeprefix("/static/"))
        if path == "/favicon.ico":
            return self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        if not console.guard.host_ok(self.headers):
            return self._refuse(api, HTTPStatus.FORBIDDEN, "this Host is not the console's (DNS rebinding?)")
        caller = self._caller = console.guard.caller(self.headers)
        try:
            if method == "POST" and not console.guard.same_origin(self.headers):
                return self._refuse(
                    api, HTTPStatus.FORBIDDEN, "cross-site request refused (Origin is not this console)"
                )
            if path == "/login":
                return self._login(method, caller, query)
            if not caller.allowed:
                return self._unauthorized(api, path)
            if method == "POST":
                form = self._form(api)
                token = self.headers.get("X-CSRF-Token") or form.get("csrf")
                if not console.guard.csrf_ok(caller, token if isinstance(token, str) else None):
                    return self._refuse(
                        api, HTTPStatus.FORBIDDEN, "missing or stale CSRF token: reload the page"
                    )
                return self._post(path, query, form, caller, api)
            return self._get(path, query, caller, api)
        except RequestNotFoundError as exc:
            self._refuse(api, HTTPStatus.NOT_FOUND, str(exc))
        except ConsoleRefusedError as exc:
            self._refuse(api, HTTPStatus.FORBIDDEN, str(exc))
        except InvalidInputError as exc:
            self._refuse(api, HTTPStatus.BAD_REQUEST, str(exc))
        except IdemflowError as exc:  # a backend's error names no secret (see idemflow.core.urls)
            self._refuse(api, HTTPStatus.BAD_GATEWAY, f"{type(exc).__name__}: {exc}")
        except Exception:
            log.exception("console: %s %s failed", method, path)
            self._refuse(api, HTTPStatus.INTERNAL_SERVER_ERROR, "the console failed; its log says why")

    def _get(self, path: str, query: dict[str, str], caller: Caller, api: bool) -> None:
        data = self.server.console.data
        settings = self.server.console.settings
        segments = [unquote(part) for part in path.strip("/").split("/")] if path.strip("/") else []
        workflow = query.get("workflow") or None
        match segments:
            case [] if not api:
                listing = data.runs(Filters.parse(query))
                names = sorted({flow.name for flow in data.workflows})
                return self._html(pages.list_page(settings, listing, names, query))
            case ["runs", request_id]:
                shown = data.request(request_id, workflow)
                return self._html(pages.request_page(settings, shown, caller.session.csrf, new_action_id()))
            case ["runs", request_id, "abort"]:
                shown = data.request(request_id, workflow)
                actions = shown.get("actions")
                if not isinstance(actions, list) or "abort" not in actions:
                    raise ConsoleRefusedError(f"abort does not apply to request {request_id!r} here")
                return self._html(pages.abort_page(settings, shown, caller.session.csrf, new_action_id()))
            case ["dead-letters"]:
                letters = data.dead_letters()
                return self._html(
                    pages.dead_letters_page(settings, letters, caller.session.csrf, new_action_id())
                )
            case ["api", "runs"]:
                return self._json(data.runs(Filters.parse(query)))
            case ["api", "runs", request_id]:
                return self._json(data.request(request_id, workflow))
            case ["api", "dead-letters"]:
                return self._json(data.dead_letters())
            case ["api", "session"]:
                return self._json({"csrf": caller.session.csrf, "read_only": settings.read_only})
        self._refuse(api, HTTPStatus.NOT_FOUND, "no such page")

    def _post(
        self, path: str, query: dict[str, str], form: dict[str, Any], caller: Caller, api: bool
    ) -> None:
        console = self.server.console
        data, settings = console.data, console.settings
        segments = [unquote(part) for part in path.strip("/").split("/")]
        action_id = _text(form, "action_id") or self.headers.get("Idempotency-Key")
        if segments[-2:] == ["dead-letters", "redrive"] and len(segments) == (3 if api else 2):
            raw_ids = form.get("ids", form.get("id"))
            ids = [raw_ids] if isinstance(raw_ids, str) else raw_ids
            if ids is not None and not (isinstance(ids, list) and all(isinstance(one, str) for one in ids)):
                raise InvalidInputError("ids must be a list of dead-letter ids")
            outcome = console.guard.once(action_id, lambda: data.redrive(ids))
            if api:
                return self._json(outcome)
            return self._redirect("/dead-letters")
        if len(segments) == (4 if api else 3) and segments[-3] == "runs":
            request_id, action = segments[-2], segments[-1]
            workflow = _text(form, "workflow") or query.get("workflow") or None
            reason = _text(form, "reason")
            children = _flag(form, "children")

            forking = _forking(form) if action == "fork" else None

            def act() -> dict[str, JSON]:
                before = data.request(request_id, workflow) if action == "abort" else {}
                outcome = data.act(action, request_id, workflow, reason, children=children, forking=forking)
                if action == "abort":
                    outcome["compensations"] = before.get("compensations", [])
                return outcome

            outcome = console.guard.once(action_id, act)
            if api:
                return self._json(outcome)
            name = str(outcome["workflow"])
            href = pages.request_href(name, request_id)
            if action == "abort":
                return self._html(pages.aborted_page(settings, outcome, href))
            if action == "fork":  # the new request's page
                return self._redirect(pages.request_href(name, str(outcome["new_request_id"]), watch="1"))
            return self._redirect(pages.request_href(name, request_id, watch="1"))
        self._refuse(api, HTTPStatus.NOT_FOUND, "no such action")

    # -- sign-in -------------------------------------------------------------------------------

    def _login(self, method: str, caller: Caller, query: dict[str, str]) -> None:
        console = self.server.console
        form = self._form(False) if method == "POST" else {}
        token = form.get("token") or query.get("token")
        next_path = str(form.get("next") or query.get("next") or "/")
        if not next_path.startswith("/") or next_path.startswith("//"):
            next_path = "/"  # never an open redirect
        if isinstance(token, str) and console.guard.sign_in(caller, token):
            return self._redirect(next_path)
        status = HTTPStatus.UNAUTHORIZED if token else HTTPStatus.OK
        message = "That token is not this console's." if token else "This console needs its token."
        if console.settings.token is None:
            message = "This console uses basic authentication (or none): there is no token to give."
        self._html(pages.login_page(console.settings, message, next_path), status)

    def _unauthorized(self, api: bool, path: str) -> None:
        settings = self.server.console.settings
        headers = {}
        if settings.basic_auth is not None:
            headers["WWW-Authenticate"] = 'Basic realm="idemflow console", charset="UTF-8"'
        elif settings.token is not None:
            headers["WWW-Authenticate"] = 'Bearer realm="idemflow console"'
        if api:
            return self._send(
                HTTPStatus.UNAUTHORIZED,
                _json_bytes({"error": "authentication required"}),
                "application/json",
                headers,
            )
        html = pages.login_page(
            settings, "This console needs its token.", path if path.startswith("/") else "/"
        )
        self._send(HTTPStatus.UNAUTHORIZED, html.encode(), "text/html; charset=utf-8", headers)

    # -- answers -------------------------------------------------------------------------------

    def _form(self, api: bool) -> dict[str, Any]:
        declared = self.headers.get("Content-Length") or "0"
        if not declared.isdigit():
            raise InvalidInputError(f"Content-Length must be a number of bytes, not {declared[:20]!r}")
        length = int(declared)
        if length > MAX_BODY:
            raise InvalidInputError(f"a request body of {length} bytes is over the console's {MAX_BODY}")
        raw = self.rfile.read(length) if length else b""
        if api or (self.headers.get("Content-Type") or "").startswith("application/json"):
            try:
                parsed = json.loads(raw or b"{}")
            except ValueError as exc:
                raise InvalidInputError("the request body is not JSON") from exc
            if not isinstance(parsed, dict):
                raise InvalidInputError("the request body must be a JSON object")
            return parsed
        return dict(parse_qsl(raw.decode("utf-8", "replace")))

    def _static(self, name: str) -> None:
        body = pages.static(name)
        if body is None:
            return self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")
        kind = (
            "text/css"
            if name.endswith(".css")
            else "text/javascript"
            if name.endswith(".js")
            else "application/octet-stream"
        )
        self._send(HTTPStatus.OK, body, f"{kind}; charset=utf-8", {"Cache-Control": "max-age=300"})

    def _refuse(self, api: bool, status: HTTPStatus, message: str) -> None:
        if api:
            return self._send(
                status, _json_bytes({"error": message, "status": status.value}), "application/json"
            )
        html = pages.message_page(
            self.server.console.settings,
            f"{status.value} {status.phrase}",
            message,
            pages.link("/", "back to requests"),
        )
        self._send(status, html.encode(), "text/html; charset=utf-8")

    def _html(self, html: str, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(status, html.encode(), "text/html; charset=utf-8")

    def _json(self, value: JSON) -> None:
        self._send(HTTPStatus.OK, _json_bytes(value), "application/json")

    def _redirect(self, location: str) -> None:
        self._send(HTTPStatus.SEE_OTHER, b"", "text/plain", {"Location": location})

    def _send(
        self, status: HTTPStatus, body: bytes, kind: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "same-origin")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
        )
        if "Cache-Control" not in (headers or {}):
            self.send_header("Cache-Control", "no-store")
        caller = getattr(self, "_caller", None)
        if caller is not None and caller.new_session and self.server.console.guard.kept(caller.session_id):
            self.send_header(
                "Set-Cookie", f"{SESSION_COOKIE}={caller.session_id}; HttpOnly; SameSite=Strict; Path=/"
            )
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


def _text(form: dict[str, Any], name: str) -> str | None:
    """A form's or JSON body's text field; :class:`InvalidInputError` if it is anything else."""
    value = form.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, not {type(value).__name__}")
    return value or None


def _forking(form: dict[str, Any]) -> Forking:
    """A fork's fields: ``from_step`` (a whole number), ``new_id`` and ``input`` (JSON ``{"args":
    [...], "kwargs": {...}}``), optional; :class:`InvalidInputError` for anything else."""
    raw = form.get("from_step")
    step = raw if type(raw) is int else (int(raw) if isinstance(raw, str) and raw.strip().isdigit() else None)
    if step is None:
        raise InvalidInputError(f"from_step must be a whole number, not {raw!r}")
    given = _text(form, "input")
    arguments = None
    if given is not None:
        try:
            parsed = json.loads(given)
        except ValueError as bad:
            raise InvalidInputError(f"input is not JSON: {bad}") from None
        if not isinstance(parsed, dict) or not isinstance(parsed.get("args", []), list):
            raise InvalidInputError('input must be {"args": [...], "kwargs": {...}}')
        kwargs = parsed.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise InvalidInputError('input must be {"args": [...], "kwargs": {...}}')
        arguments = (list(parsed.get("args", [])), dict(kwargs))
    return Forking(step, _text(form, "new_id"), arguments)


def _flag(form: dict[str, Any], name: str) -> bool:
    """A form's or JSON body's yes-or-no field (``1``, ``true``, ``0``, ``false``, absent: no);
    :class:`InvalidInputError` for anything else."""
    value = form.get(name)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("", "0", "false", "1", "true"):
        return value.lower() in ("1", "true")
    raise InvalidInputError(f"{name} must be true or false, not {value!r}")


def _json_bytes(value: JSON) -> bytes:
    return json.dumps(value).encode()
