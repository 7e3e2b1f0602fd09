"""One mapping from a cloud queue's failures to idemflow errors, shared by SQS and Azure Queue.

Each backend says what its SDK exception was (the service could not be
reached; or it answered with an error code and HTTP status, and whether that
code means "no such queue", "not allowed" or "try again"); :func:`queue_error`
turns that into the error a worker acts on: :class:`TransientStoreError`
(retry), :class:`StoreConfigError` (fix the setup) or :class:`StoreError`.
Only our own words, the code and the status go into the message, plus a
``detail`` the backend vouches for: SDK messages may quote request URLs.

>>> azure = Service("the Azure queue service", "authentication failed", "check the connection string")
>>> str(queue_error("send on queue 'jobs'", OSError(), azure, answer=("ServerBusy", 503)))
"send on queue 'jobs': the Azure queue service is busy or failing (ServerBusy, HTTP 503); retry later"
>>> type(queue_error("send on queue 'jobs'", OSError(), azure, answer=("Nope", 403))).__name__
'StoreConfigError'
"""

from __future__ import annotations

from dataclasses import dataclass

from idemflow.errors import StoreConfigError, StoreError, TransientStoreError


@dataclass(frozen=True, slots=True)
class Service:
    """How errors name a queue service and the fix for a refused request."""

    name: str
    """The service as errors name it: ``SQS``, ``the Azure queue service``."""
    refused: str
    """What a 403 or an authentication error code is called: ``access refused``."""
    fix: str
    """What to check then: ``check the AWS credentials and policy``."""


def queue_error(
    where: str,
    exc: BaseException,
    service: Service,
    *,
    unreachable: bool = False,
    answer: tuple[str, int] | None = None,
    missing: bool = False,
    refused: bool = False,
    transient: bool = False,
    detail: str = "",
) -> StoreError:
    """The idemflow error for ``exc``, raised by the operation ``where`` describes.

    ``unreachable``: the service was never reached (connection refused or
    reset, timeout, DNS). ``answer``: the service's ``(error code, HTTP
    status)``, None if it gave none. ``missing``, ``refused`` and
    ``transient`` say what the backend knows its error code to mean; HTTP
    403 is always refused, and 408, 429 and 5xx always transient.
    """
    if unreachable:
        name = type(exc).__name__
        return TransientStoreError(f"{where}: cannot reach {service.name} ({name}); retry later")
    if answer is None:
        return StoreError(f"{where} failed: {type(exc).__name__}{detail}")
    code, status = answer
    if missing:
        return StoreConfigError(f"{where}: the queue does not exist; create it or use create=True")
    if refused or status == 403:
        return StoreConfigError(f"{where}: {service.refused} ({code}); {service.fix}")
    if transient or status in (408, 429) or status >= 500:
        return TransientStoreError(
            f"{where}: {service.name} is busy or failing ({code}, HTTP {status}); retry later"
        )
    return StoreError(f"{where} failed: {code} (HTTP {status}){detail}")


__all__ = ["Service", "queue_error"]
