"""What a run is, checked before any write: a :class:`Request` names the workflow and its
version and holds the input's canonical text and fingerprint (with the fingerprints earlier
releases gave the same input, so their duplicates still match).

Every entry point (``run``, ``submit``, a worker's resume, a handler, the test kit) describes a
request the same way before it writes anything, so describing one is kept apart from running it.

>>> from idemflow import pure
>>> request = describe_request(pure(1))
>>> request.workflow, request.version, request.matches(request.fingerprint)
('idem', 1, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from idemflow.engine.monad import AsWritten, Basis, Bind, Call, Idem
from idemflow.errors import InvalidInputError
from idemflow.serialization import JSON, decode, digest, encode, encode_canonical, fingerprint

ANONYMOUS = "idem"
"""Workflow name of a run whose description is not a ``@workflow`` call."""


@dataclass(frozen=True, slots=True)
class Request:
    """What a run is, checked before any write: workflow name, version, input and its fingerprint."""

    workflow: str
    version: int
    fingerprint: str
    call: Call | None
    input_text: str | None = "null"
    """Canonical JSON of ``{"args": [...], "kwargs": {...}}``, taken before the workflow runs;
    None where only a part of the input is compared (``fingerprint=``): then the rest need not be
    JSON (a Lambda context) unless the input is stored, by ``submit``."""
    aliases: tuple[str, ...] = ()
    """Other fingerprints of this same input: the call as written, which 0.1.0 fingerprinted
    (a duplicate of a request it started still matches)."""

    def matches(self, stored: str) -> bool:
        """Is ``stored`` (a run record's fingerprint) this request's input?"""
        return stored == self.fingerprint or stored in self.aliases

    def input(self) -> JSON:
        """The input as it was submitted: a copy the workflow cannot change under us."""
        text = self.input_text
        if text is None:
            assert self.call is not None
            given = {"args": list(self.call.args), "kwargs": self.call.kwargs}
            text = encode(given, f"input of workflow {self.workflow!r}", envelope=2)
        return decode(text)


def describe_request(m: object) -> Request:
    """Name, version and fingerprint of a run (validated before any write)."""
    if not isinstance(m, Idem):
        raise InvalidInputError(f"run() takes an Idem (a workflow call or a step), not {type(m).__name__}")
    node = m.node
    while type(node) is Bind:
        node = node.source
    if type(node) is Call:
        # {"args": [arg]} and {"kwargs": {name: arg}} wrap each argument two levels down.
        where = f"input of workflow {node.name!r}"
        if isinstance(node.compared, Basis):  # compared on a part of the input only
            compared = fingerprint(node.compared.value, f"fingerprint of workflow {node.name!r}")
            return Request(node.name, node.version, compared, node, None)
        given = {"args": list(node.args), "kwargs": node.kwargs}
        text, canonical = encode_canonical(given, where, envelope=2)
        aliases: tuple[str, ...] = ()
        if canonical is not text:  # 0.1.0 fingerprinted numbers as spelled (10.0 was not 10)
            aliases = (digest(text),)
        if isinstance(node.compared, AsWritten):
            args, kwargs = node.compared
            aliases += (digest(encode({"args": list(args), "kwargs": kwargs}, where, envelope=2)),)
        return Request(node.name, node.version, digest(canonical), node, text, aliases)
    return Request(ANONYMOUS, 1, fingerprint(None), None)


def describe(m: object) -> tuple[str, str]:
    """The workflow name and input fingerprint of a run (validated before any write)."""
    request = describe_request(m)
    return request.workflow, request.fingerprint
