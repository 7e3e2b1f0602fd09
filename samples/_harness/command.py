"""The ``serve | load | check | demo`` command line every sample has, given the sample's side.

One parser and one dispatcher for the three samples, so their commands cannot drift apart.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import httpx

from idemflow import IdemflowError
from idemflow.stores import AsyncStore, Store
from idemflow.worker import AsyncQueue, Queue
from samples._api import Direct, Service, serve
from samples._harness.clients import HttpClient
from samples._harness.demo import LoadReport, Verdict, open_with

Option = tuple[str, type[int] | type[float], int | float, str]
"""A size option of a command: ``(flag, type, default, what it is)``."""


def command_parser(sample: Sample[Any]) -> argparse.ArgumentParser:
    """The parser of ``python -m samples.<sample> serve|load|check|demo``."""
    name, helps = sample.name, sample.help
    parser = argparse.ArgumentParser(prog=f"python -m samples.{name}", description=f"The {name} sample.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_ = commands.add_parser("serve", help="run the HTTP API")
    serve_.add_argument("--store", required=True, help=f"store URL, e.g. sqlite:{name}.db")
    serve_.add_argument("--queue", help=helps["queue"])
    serve_.add_argument("--host", default="127.0.0.1")
    serve_.add_argument("--port", type=int, default=8000)
    load = commands.add_parser("load", help=helps["load"])
    load.add_argument("--url", action="append", default=[], help="API server URL (repeatable)")
    load.add_argument("--store", help="store URL: call the workflows directly instead of an API")
    load.add_argument("--queue", help="with --store: submit to this queue (workers must be running)")
    load.add_argument("--users", type=int, default=8, help="concurrent users (default 8)")
    load.add_argument("--seed", type=int, default=0, help="the same seed sends the same requests again")
    load.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the workers (queue)")
    check = commands.add_parser("check", help=helps["check"])
    check.add_argument("--store", required=True)
    for flag, kind, default, what in sample.check_options:
        check.add_argument(flag, type=kind, default=default, help=f"{what} (default {default:g})")
    demo = commands.add_parser("demo", help=helps["demo"])
    demo.add_argument("--data", type=Path, default=Path("demo-data"), help="directory of the SQLite files")
    demo.add_argument("--kills", type=int, default=6, help="processes to SIGKILL (default 6)")
    demo.add_argument("--workers", type=int, default=2, help="`idemflow worker` processes (default 2)")
    demo.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    for command, options in ((load, sample.load_sizes), (demo, sample.demo_sizes)):
        for flag, kind, default, what in options:
            command.add_argument(flag, type=kind, default=default, help=f"{what} (default {default:g})")
    return parser


def demo_seed(args: argparse.Namespace) -> int:
    return int(args.seed) if args.seed is not None else secrets.randbelow(1_000_000)


ApiT = TypeVar("ApiT")


@dataclass(frozen=True)
class Sample(Generic[ApiT]):
    """A sample's side of the command line: its API, its commands, their help and sizes."""

    name: str
    tables: Sequence[str]
    app: Callable[[str | Store | AsyncStore, str | Queue | AsyncQueue | None], Any]
    """The ASGI app of the sample's API over a store (asynchronous with a queue); URLs are opened
    in its lifespan, an asynchronous store with ``open_async_store``."""
    service: Callable[[str, str | None], Service]
    """The sample's service over a store URL (and queue URL, if any)."""
    check: Callable[..., Verdict]
    """``check(store, **options)``: the tables' verdict, given the values of :attr:`check_options`
    (by their flag's name: ``--late`` is ``late=``)."""
    http: Callable[[HttpClient], ApiT]
    """What the load calls, over HTTP ..."""
    direct: Callable[[Direct[Any]], ApiT]
    """... or the service's methods without HTTP (submitting to the queue, if any)."""
    load: Callable[[argparse.Namespace, ApiT], LoadReport[Any]]
    demo: Callable[[argparse.Namespace], int]
    help: Mapping[str, str]
    """The help of ``serve --queue``, ``load``, ``check`` and ``demo``."""
    load_sizes: Sequence[Option] = ()
    demo_sizes: Sequence[Option] = ()
    check_options: Sequence[Option] = ()

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Run one command; the exit status is 0 when everything checked out, 1 if not, 2 on an error."""
        args = command_parser(self).parse_args(argv)
        try:
            return self._command(args)
        except (IdemflowError, httpx.TransportError) as exc:  # a bad URL, an unreachable server or store
            print(f"python -m samples.{self.name}: error: {exc}", file=sys.stderr)
            return 2

    def _command(self, args: argparse.Namespace) -> int:
        name = self.name
        if args.command == "serve":
            open_with(args.store, self.tables).close()  # the tables; the app opens an asynchronous store
            serve(self.app(args.store, args.queue), args.host, args.port)
            return 0
        if args.command == "check":
            options = [flag[2:].replace("-", "_") for flag, *_rest in self.check_options]
            verdict = self.check(
                open_with(args.store, self.tables), **{option: getattr(args, option) for option in options}
            )
            print("\n".join([f"idemflow {name} check", *verdict.lines(), "PASS" if verdict.ok else "FAIL"]))
            return 0 if verdict.ok else 1
        if args.command == "demo":
            return self.demo(args)
        if args.url:
            report = self.load(args, self.http(HttpClient(args.url)))
        elif args.store:
            open_with(args.store, self.tables).close()
            with Direct(self.service(args.store, args.queue)) as call:
                report = self.load(args, self.direct(call))
        else:
            print("load needs --url (an API server) or --store (direct calls)", file=sys.stderr)
            return 2
        problems = [f"  - {problem}" for problem in report.problems[:20]]
        print("\n".join([f"idemflow {name} load", *report.lines(), *problems]))
        return 0 if not report.problems else 1


__all__ = [
    "Option",
    "Sample",
    "command_parser",
    "demo_seed",
]
