"""Who may use the console, and which POSTs it carries out.

- **Authentication** (whenever a token or basic auth is set): a request carries
  ``Authorization: Bearer T`` or ``Basic``, or the cookie of a browser session that signed
  in once at ``/login`` with the token. Comparisons are constant-time.
- **Cross-site requests**: every POST must come from the console's own pages. A POST whose
  ``Origin`` (or, without one, ``Referer``) names another origin than the ``Host`` it was sent
  to is refused, and a POST that rides on a cookie must carry its session's CSRF token (a
  per-session random secret, embedded in every form). A POST authenticated by an
  ``Authorization`` header needs no CSRF token: a browser never adds that header on its own.
  On loopback without authentication the ``Host`` itself is checked too, so a page of another
  site cannot reach the console by rebinding a DNS name to 127.0.0.1.
- **Double submits**: each form carries a one-time action id; a second POST with the same id
  (a double click, a resent form) waits for the first and gets its outcome, without acting again.
"""

from __future__ import annotations

import base64
import hmac
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit

from idemflow.console._settings import ConsoleSettings

SESSION_COOKIE = "idemflow_console"
MAX_SESSIONS = 10_000
"""Sessions kept (oldest forgotten first): a forgotten one only signs in again."""
MAX_ACTIONS = 10_000
"""Action ids remembered for double-submit detection."""


@dataclass(slots=True)
class Session:
    """A browser's session: its CSRF secret, and whether it signed in with the token."""

    csrf: str
    signed_in: bool = False


@dataclass(frozen=True, slots=True)
class Caller:
    """What the guard learned about one HTTP request."""

    session_id: str
    session: Session
    new_session: bool
    by_header: bool
    """Authenticated by an ``Authorization`` header (no CSRF token needed)."""
    allowed: bool
    """Authenticated, or no authentication is configured."""


class Guard:
    """Sessions, authentication, cross-site checks and one-time action ids of one console."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self._settings = settings
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()
        self._actions = _OnceOnly()

    def caller(self, headers: Any) -> Caller:
        """The session of a request (a new one if it has none) and whether it is authenticated."""
        session_id = _cookie(headers.get("Cookie"))
        with self._lock:
            session = self._sessions.get(session_id) if session_id else None
        new = session is None
        if session is None:
            session_id = secrets.token_urlsafe(24)
            session = Session(csrf=secrets.token_urlsafe(24))
        assert session_id is not None
        by_header = self._header_ok(headers.get("Authorization"))
        if new and not by_header and not self._settings.authenticated:
            self._keep(session_id, session)  # its CSRF token must outlive this page
        allowed = not self._settings.authenticated or by_header or session.signed_in
        return Caller(session_id, session, new, by_header, allowed)

    def sign_in(self, caller: Caller, token: str) -> bool:
        """Mark the caller's session signed in (and keep it) if ``token`` is the console's token."""
        expected = self._settings.token
        if expected is None or not hmac.compare_digest(token.encode(), expected.encode()):
            return False
        caller.session.signed_in = True
        self._keep(caller.session_id, caller.session)
        return True

    def kept(self, session_id: str) -> bool:
        """Whether this session is one the console remembers (its cookie is worth setting)."""
        with self._lock:
            return session_id in self._sessions

    def _keep(self, session_id: str, session: Session) -> None:
        """Remember a session. Only sessions that need it are kept (a signed-in browser's, or any
        browser's when no authentication is set), so requests without credentials cannot push
        signed-in sessions out."""
        with self._lock:
            self._sessions[session_id] = session
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)

    def host_ok(self, headers: Any) -> bool:
        """Without authentication (loopback only), the Host header must name loopback: a page of
        another site whose name was rebound to 127.0.0.1 is refused. With authentication any Host
        is accepted (a rebound page has no credentials), so a reverse proxy may pass its own."""
        if self._settings.authenticated or not self._settings.loopback:
            return True
        host = (headers.get("Host") or "").rpartition(":")[0] or headers.get("Host") or ""
        return host.strip("[]") in ("127.0.0.1", "localhost", "::1", self._settings.host)

    def same_origin(self, headers: Any) -> bool:
        """A POST's Origin (or Referer) is the console's own, as the Host header names it."""
        host = headers.get("Host") or ""
        claimed = headers.get("Origin")
        if claimed is None or claimed == "null":
            referer = headers.get("Referer")
            if referer is None:
                return claimed is None  # no browser sent it ("null" is an opaque, sandboxed origin)
            claimed = referer
        parts = urlsplit(claimed)
        return parts.scheme in ("http", "https") and parts.netloc == host

    def csrf_ok(self, caller: Caller, token: str | None) -> bool:
        """A cookie-borne POST carries its session's CSRF token; a header-authenticated one need not."""
        if caller.by_header:
            return True
        return (
            token is not None and not caller.new_session and hmac.compare_digest(token, caller.session.csrf)
        )

    def once(self, action_id: str | None, act: Callable[[], Any]) -> Any:
        """``act()``'s outcome, computed once per action id (None: every time)."""
        return act() if not action_id else self._actions.run(action_id, act)

    def _header_ok(self, header: str | None) -> bool:
        if header is None:
            return False
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self._settings.token is not None:
            return hmac.compare_digest(value.encode(), self._settings.token.encode())
        if scheme.lower() == "basic" and self._settings.basic_auth is not None:
            try:
                user, _, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            want_user, want_password = self._settings.basic_auth
            return hmac.compare_digest(user.encode(), want_user.encode()) & hmac.compare_digest(
                password.encode(), want_password.encode()
            )
        return False


def new_action_id() -> str:
    """The one-time id a rendered form carries."""
    return secrets.token_urlsafe(16)


def _cookie(header: str | None) -> str | None:
    if not header:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # noqa: BLE001 - a malformed cookie header is no session
        return None
    morsel = jar.get(SESSION_COOKIE)
    return None if morsel is None else morsel.value


class _OnceOnly:
    """Outcomes by action id: the first caller acts, concurrent and later ones get its outcome."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: OrderedDict[str, _Pending] = OrderedDict()

    def run(self, action_id: str, act: Callable[[], Any]) -> Any:
        with self._lock:
            pending = self._done.get(action_id)
            first = pending is None
            if pending is None:
                pending = self._done[action_id] = _Pending()
                while len(self._done) > MAX_ACTIONS:
                    self._done.popitem(last=False)
        if first:
            try:
                pending.value = act()
            except BaseException as exc:
                pending.error = exc
                raise
            finally:
                pending.ready.set()
            return pending.value
        pending.ready.wait()
        if pending.error is not None:
            raise pending.error
        return pending.value


class _Pending:
    __slots__ = ("error", "ready", "value")

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
