"""Store and queue URLs (``scheme:target?name=value&...``), parsed without echoing secrets.

A URL may hold an account key (``connection_string=...``), credentials in an
endpoint (``http://user:password@host``) or be a connection string pasted in
place of a URL. So errors name the kind of URL, its scheme when it has a
recognizable one, the parameter names involved and what is wrong; never the
target, a query value or anything else of the URL.

>>> url = parse_url("sqs:jobs?region=eu-west-1", "queue", {"sqs": {"region"}}, "sqs:NAME")
>>> url.scheme, url.target, url.params
('sqs', 'jobs', {'region': 'eu-west-1'})
>>> parse_url("AccountName=a;AccountKey=s3cr3t;BlobEndpoint=http://h:1", "store", {}, "memory:")
Traceback (most recent call last):
...
idemflow.errors.ConfigurationError: store URL: unknown scheme (none recognizable before ':'); use memory:
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from idemflow.errors import ConfigurationError

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,19}")
"""An unknown scheme shown in errors: short and lowercase like every scheme, unlike a key."""
_PARAMETER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
_CREDENTIALS = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*:)?//[^/?#]*@")
"""An authority with userinfo: ``//user:password@host``, with or without a scheme before it."""


@dataclass(frozen=True, slots=True)
class Url:
    """A parsed URL: scheme, target (between ``:`` and ``?``) and percent-decoded parameters."""

    kind: str
    scheme: str
    target: str
    params: dict[str, str]

    def error(self, problem: str) -> ConfigurationError:
        """A configuration error naming the scheme and ``problem``, and nothing else of the URL."""
        shown = f"{self.scheme}:" + ("…" if self.target or self.params else "")
        return ConfigurationError(f"{self.kind} URL {shown!r}: {problem}")

    def seconds(self, name: str) -> float | None:
        """Parameter ``name`` as a number of seconds, if given."""
        if name not in self.params:
            return None
        try:
            return float(self.params[name])
        except ValueError:
            raise self.error(f"{name} must be a number") from None  # the value may be a secret

    def flag(self, name: str) -> bool | None:
        """Parameter ``name`` as a boolean (``true false 1 0``), if given."""
        if name not in self.params:
            return None
        value = self.params[name].lower()
        if value not in ("true", "false", "1", "0"):
            raise self.error(f"{name} must be true or false")
        return value in ("true", "1")

    def endpoint(self, name: str) -> str | None:
        """Parameter ``name`` as an ``http(s)://host[:port][/path]`` endpoint, if given.

        Refused (without quoting it) if it carries credentials, a query or a
        fragment, or is not such a URL: the SDKs quote a bad endpoint in theirs.
        """
        value = self.params.get(name)
        if value is None:
            return None
        if _CREDENTIALS.match(value):
            raise self.error(
                f"{name} must not carry credentials (user:password@); "
                "give them through the SDK's credential chain"
            )
        if not _is_endpoint(value):
            raise self.error(f"{name} must be an http:// or https:// URL (host, optional port and path)")
        return value


def _is_endpoint(value: str) -> bool:
    """``http(s)://host[:port][/path]``: what the SDKs take as an endpoint, nothing more."""
    try:
        parts = urlsplit(value)
        port = parts.port  # raises for a port that is not a number in range
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and (port is None or port > 0)
        and "?" not in value
        and "#" not in value
    )


def parse_url(url: object, kind: str, schemes: Mapping[str, Collection[str]], usage: str) -> Url:
    """Split ``url`` into a :class:`Url`, checking its scheme and parameter names.

    ``schemes`` maps each scheme ``kind`` URLs take to the parameters it
    accepts; ``usage`` lists the forms for error messages. Query values are
    percent-decoded with ``+`` kept, as account keys contain it.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"{kind} URL must be a str, not {type(url).__name__}")
    scheme, colon, rest = url.partition(":")
    if not colon or (scheme not in schemes and not _SCHEME.fullmatch(scheme)):
        raise ConfigurationError(f"{kind} URL: unknown scheme (none recognizable before ':'); use {usage}")
    target, _, query = rest.partition("?")
    params: dict[str, str] = {}
    readable: set[str] = set()  # names given as name=value and shaped like a name: safe to show
    for part in query.split("&"):
        if part:
            name, equals, value = part.partition("=")
            params[unquote(name)] = unquote(value)
            if equals and _PARAMETER_NAME.fullmatch(unquote(name)):
                readable.add(unquote(name))
    parsed = Url(kind, scheme, target, params)
    if scheme not in schemes:
        raise parsed.error(f"unknown scheme; use {usage}")
    if _CREDENTIALS.match(target):
        raise parsed.error("must not carry credentials (user:password@) before its '?'")
    unknown = sorted(set(params) - set(schemes[scheme]))
    if unknown:
        names = [name if name in readable else "<not a name=value pair>" for name in unknown]
        raise parsed.error(f"unknown parameter(s) {names}; {scheme}: takes {sorted(schemes[scheme])}")
    return parsed


__all__ = ["Url", "parse_url"]
