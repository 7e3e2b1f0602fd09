"""SIGTERM and SIGINT as a request to stop, for the processes idemflow runs (a worker, the
worker pool's supervisor).

Why apart: both install the same two handlers for the length of a ``run`` and put the previous
ones back after, and only the main thread may install them.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

__all__ = ["stop_on_signals"]


def stop_on_signals(stop: Callable[[signal.Signals], None]) -> Callable[[], None]:
    """Call ``stop`` with the signal on SIGTERM or SIGINT; return what restores the previous
    handlers. Off the main thread (where Python refuses handlers) nothing is installed.

    >>> restore = stop_on_signals(lambda sig: None)
    >>> signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    True
    >>> restore()
    >>> signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    True
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def graceful(signum: int, _frame: object) -> None:
        stop(signal.Signals(signum))

    for sig in previous:
        signal.signal(sig, graceful)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
