"""A request's tags: what it is about (``submit(..., tags={"customer": "c-1"})``), to find it by.

Tags are a few short texts a caller attaches to a request when it starts it (``submit``,
``asubmit``, ``run``, ``arun``); its run record keeps them (``tg``) from its claim to its last
rewrite, and ``idemflow runs list --tag customer=c-1`` (``admin.runs(tags=)``, the console) lists
the requests that carry every tag asked for. They are checked here, before anything is
written, so every store can filter on them the same way: a key is 1 to
:data:`MAX_TAG_KEY_CHARS` letters, digits, ``_ - . :``; a value any text up to
:data:`MAX_TAG_VALUE_CHARS` characters; at most :data:`MAX_TAGS` of them.

>>> check_tags({"region": "eu", "customer": "c-1"})
{'customer': 'c-1', 'region': 'eu'}
>>> check_tags({}) is None
True
>>> parse_tag("customer=c-1")
('customer', 'c-1')
>>> carries({"customer": "c-1", "region": "eu"}, (("customer", "c-1"),))
True
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from idemflow.errors import InvalidInputError

MAX_TAGS = 16
"""Tags one request may carry (they are stored in its run record, read by every listing)."""
MAX_TAG_KEY_CHARS = 64
MAX_TAG_VALUE_CHARS = 256

_KEY = re.compile(r"[A-Za-z0-9_.:\-]+")

TagFilter = tuple[tuple[str, str], ...]
"""Tags a listing asks for, as ``(key, value)`` pairs sorted by key: a request must carry all."""


def check_tags(tags: object, where: str = "tags") -> dict[str, str] | None:
    """``tags`` as stored (a dict sorted by key), None for none; :class:`InvalidInputError`
    saying what is wrong with them otherwise."""
    if tags is None:
        return None
    if not isinstance(tags, Mapping):
        raise InvalidInputError(f"{where} must be a mapping of str to str, not {type(tags).__name__}")
    if len(tags) > MAX_TAGS:
        raise InvalidInputError(f"{where}: {len(tags)} tags, at most {MAX_TAGS} are allowed")
    checked = {check_tag_key(key, where): check_tag_value(key, value, where) for key, value in tags.items()}
    return dict(sorted(checked.items())) or None


def check_tag_key(key: object, where: str = "tags") -> str:
    """A tag's key: 1 to 64 ASCII letters, digits, ``_``, ``-``, ``.`` or ``:``."""
    if not isinstance(key, str):
        raise InvalidInputError(f"{where}: a tag's key must be a str, not {type(key).__name__} {key!r}")
    if not key or len(key) > MAX_TAG_KEY_CHARS or not _KEY.fullmatch(key):
        raise InvalidInputError(
            f"{where}: tag key {key[:80]!r} must be 1 to {MAX_TAG_KEY_CHARS} ASCII letters, digits, "
            "'_', '-', '.' or ':'"
        )
    return key


def check_tag_value(key: str, value: object, where: str = "tags") -> str:
    """A tag's value: any text up to 256 characters that UTF-8 can carry."""
    if not isinstance(value, str):
        raise InvalidInputError(
            f"{where}: the value of tag {key!r} must be a str, not {type(value).__name__} {value!r}"
        )
    if len(value) > MAX_TAG_VALUE_CHARS:
        raise InvalidInputError(
            f"{where}: the value of tag {key!r} is {len(value)} characters, at most "
            f"{MAX_TAG_VALUE_CHARS} are allowed"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{where}: the value of tag {key!r} is not valid unicode") from None
    return value


def tag_filter(tags: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> TagFilter:
    """The tags a listing asks for (a mapping or ``(key, value)`` pairs), checked as tags are;
    ``()`` for none. One key asked for with two values matches nothing, so it is refused."""
    if tags is None:
        return ()
    pairs = list(tags.items()) if isinstance(tags, Mapping) else list(tags)
    asked: dict[str, str] = {}
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidInputError(f"tags to list by must be key=value pairs, not {pair!r}")
        key = check_tag_key(pair[0], "tags to list by")
        value = check_tag_value(key, pair[1], "tags to list by")
        if asked.get(key, value) != value:
            raise InvalidInputError(f"tags to list by: tag {key!r} is asked for with two values")
        asked[key] = value
    return tuple(sorted(asked.items()))


def parse_tag(text: str) -> tuple[str, str]:
    """``key=value`` as the command line and the console take a tag (the first ``=`` splits)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise InvalidInputError(f"a tag is key=value, e.g. customer=c-1, not {text!r}")
    key = check_tag_key(key.strip(), "tag")
    return key, check_tag_value(key, value, "tag")


def stored_tags(raw: Any) -> dict[str, str] | None:
    """The tags a run record holds (``tg``), None if it holds none it can read (a record of a
    later release with another form: it is listed as untagged, never refused)."""
    if not isinstance(raw, dict) or not raw:
        return None
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in raw.items()):
        return None
    return dict(raw)


def carries(stored: Mapping[str, str] | None, wanted: TagFilter) -> bool:
    """Whether tags ``stored`` include every ``(key, value)`` of ``wanted``."""
    if not wanted:
        return True
    return stored is not None and all(stored.get(key) == value for key, value in wanted)
