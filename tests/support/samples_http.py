"""Run a sample's ASGI app on uvicorn, on a free loopback port, in a background thread.

Tests then talk to it with a real HTTP client (httpx) over a real socket:
what a browser or a retrying client would see, not an in-process shortcut.
The app's lifespan runs, as under ``serve``: a sample's app given a store URL
opens its asynchronous store there, on the server's loop, and closes it at the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from idemflow.testing.servers import free_port


@contextmanager
def running(app: ASGIApp) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its base URL (``http://127.0.0.1:PORT``)."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on 127.0.0.1:{port}")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
