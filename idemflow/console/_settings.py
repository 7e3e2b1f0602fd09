"""What ``idemflow console`` is started with, checked before it listens.

A console that can retry, cancel and abort requests must never be reachable without a password
by accident: listening on anything but loopback without ``--token`` or ``--basic-auth`` is a
:class:`~idemflow.errors.ConsoleExposedError` at start, not a warning.

>>> ConsoleSettings(host="0.0.0.0", port=8080).check()  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
idemflow.errors.ConsoleExposedError: the console would listen on '0.0.0.0' without authentication: ...
>>> shown_url("azure:?connection_string=DefaultEndpointsProtocol%3Dhttp%3BAccountKey%3Ds3cr3t")
'azure:?connection_string=…'
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from idemflow.errors import ConsoleExposedError, InvalidInputError
from idemflow.serialization import JSON

Redact = Callable[[JSON], JSON]
"""A redaction hook: the JSON value as the page would show it, in; what it may show, out."""

SECRET_NAMES = re.compile(r"secret|passw|token|api[-_]?key|credential|authori[sz]ation|private[-_]?key", re.I)
"""Keys whose values the default redaction hides, wherever they sit in an input or result."""

REDACTED = "[redacted]"


def redact_secrets(value: JSON) -> JSON:
    """The default hook: every value under a key named like a secret becomes ``[redacted]``.

    >>> redact_secrets({"user": "ann", "card": {"token": "tok_1", "last4": "4242"}})
    {'user': 'ann', 'card': {'token': '[redacted]', 'last4': '4242'}}
    """
    if isinstance(value, dict):
        return {
            key: REDACTED if SECRET_NAMES.search(key) else redact_secrets(inner)
            for key, inner in value.items()
        }
    if isinstance(value, list):
        return [redact_secrets(inner) for inner in value]
    return value


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """How the console listens, who may use it and what it may do."""

    host: str = "127.0.0.1"
    port: int = 8080
    read_only: bool = False
    """Pages and the API only read; every action is hidden and refused (403)."""
    token: str | None = None
    """A bearer token (``Authorization: Bearer T``, or once at ``/login`` in a browser)."""
    basic_auth: tuple[str, str] | None = None
    """A user and password for HTTP basic authentication."""
    redact: Redact = field(default=redact_secrets)
    store_url: str = ""
    """The store URL, shown in page headers with its secrets cut (:func:`shown_url`)."""
    queue_url: str | None = None
    page_size: int = 50

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def authenticated(self) -> bool:
        return self.token is not None or self.basic_auth is not None

    def check(self) -> ConsoleSettings:
        """These settings, or the typed error that says what to fix (before anything listens)."""
        if not 0 <= self.port <= 65535:
            raise InvalidInputError(f"--port must be 0..65535, not {self.port}")
        if self.token is not None and self.basic_auth is not None:
            raise InvalidInputError("pass one of --token and --basic-auth, not both")
        if self.token is not None and len(self.token) < 16:
            raise InvalidInputError(
                "--token must be at least 16 characters (it guards retry, cancel and abort)"
            )
        if not self.loopback and not self.authenticated:
            raise ConsoleExposedError(self.host)
        return self


def parse_basic_auth(text: str) -> tuple[str, str]:
    """``USER:PASS`` as a pair; :class:`InvalidInputError` naming the shape, never the password.

    >>> parse_basic_auth("ops:correct horse")
    ('ops', 'correct horse')
    """
    user, colon, password = text.partition(":")
    if not user or not colon or len(password) < 8:
        raise InvalidInputError("--basic-auth must be USER:PASSWORD, the password at least 8 characters")
    return user, password


_USERINFO = re.compile(r"//[^/?#@]*@")


def shown_url(url: str | None) -> str:
    """A store or queue URL as a page header may show it: scheme and target without credentials,
    parameter names without their values (an account key or connection string is one)."""
    if not url:
        return ""
    scheme, colon, rest = url.partition(":")
    if not colon or not re.fullmatch(r"[a-z][a-z0-9+.-]{0,19}", scheme):
        return "(a store URL)"  # a pasted connection string: nothing of it is shown
    target, question, query = rest.partition("?")
    target = _USERINFO.sub("//…@", target)
    if ";" in target or "=" in target:
        target = "…"
    names = [part.partition("=")[0] for part in query.split("&") if part]
    shown_query = "&".join(f"{name}=…" for name in names if re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", name))
    return f"{scheme}:{target}" + (f"?{shown_query}" if question and shown_query else "")
