"""The operations console over one store (and queue): it listens once built, answers on a
thread of its own (:meth:`Console.start`) or the caller's (:meth:`Console.serve_forever`,
:func:`serve`, which ``idemflow console`` runs), and stops on :meth:`Console.close`.

How it answers each request (routes, sign-in, the pages and the JSON API) is
:mod:`idemflow.console._http`; this module is the console's life: settings checked, data and
guard built, the address bound.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from idemflow.console._data import ConsoleData
from idemflow.console._guard import Guard
from idemflow.console._http import Handler, PooledServer
from idemflow.console._settings import ConsoleSettings
from idemflow.errors import InvalidInputError
from idemflow.running.workflows import Workflow
from idemflow.stores.base import Store
from idemflow.worker import Queue


class Console:
    """A console over one store (and queue), listening once constructed; :meth:`serve_forever`
    or :meth:`start` (a thread) answers requests, :meth:`close` stops it."""

    def __init__(
        self,
        settings: ConsoleSettings,
        store: Store,
        queue: Queue | None = None,
        workflows: Iterable[Workflow[Any, Any]] = (),
    ) -> None:
        self.settings = settings.check()
        self.data = ConsoleData(self.settings, store, queue, workflows)
        self.guard = Guard(self.settings)
        try:
            self.httpd = PooledServer((self.settings.host, self.settings.port), Handler)
        except OSError as exc:  # taken, or not an address of this machine: say which, then stop
            where = f"{self.settings.host}:{self.settings.port}"
            raise InvalidInputError(f"the console cannot listen on {where}: {exc.strerror or exc}") from exc
        self.httpd.console = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{port}"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> Console:
        """Answer requests on a daemon thread (tests, embedding); returns self."""
        self._thread = threading.Thread(target=self.serve_forever, name="idemflow-console", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
        self.httpd.server_close()


def serve(
    settings: ConsoleSettings,
    store: Store,
    queue: Queue | None,
    workflows: Iterable[Workflow[Any, Any]],
    ready: Callable[[str], None] = lambda url: None,
) -> None:
    """Run a console until interrupted (``idemflow console``); ``ready`` gets its URL once it listens."""
    console = Console(settings, store, queue, workflows)
    ready(console.url)
    try:
        console.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        console.close()


__all__ = ["Console", "serve"]
