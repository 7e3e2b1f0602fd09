"""How a cloud queue words an error its backend family already classified (SQS and Azure Queue).

The class and the code come from the family's table, shared with that cloud's
store (:mod:`idemflow.stores._aws_errors`, :mod:`idemflow.stores._azure_errors`),
so a refused key is the same :class:`~idemflow.errors.ConfigurationError` from
a queue as from a store. This module only words it for a queue: only our own
words, the service's code and status go into the message, plus a ``detail``
the backend vouches for (SDK messages may quote request URLs).

>>> azure = Service("azure_queue", "the Azure queue service", "authentication failed", "check the key")
>>> error = queue_error("send on queue 'jobs'", azure, ErrorCode.TRANSIENT, "send_message", "ServerBusy", 503)
>>> str(error), error.code, error.backend
("send on queue 'jobs': the Azure queue service is busy or failing (ServerBusy, HTTP 503); retry later", \
<ErrorCode.TRANSIENT: 'transient'>, 'azure_queue')
"""

from __future__ import annotations

from dataclasses import dataclass

from idemflow.errors import BackendError, ErrorCode, backend_error


@dataclass(frozen=True, slots=True)
class Service:
    """How errors name a queue service and the fix for a refused request."""

    backend: str
    """The backend as errors report it: ``sqs``, ``azure_queue``."""
    name: str
    """The service as messages name it: ``SQS``, ``the Azure queue service``."""
    refused: str
    """What a refused credential is called: ``access refused``."""
    fix: str
    """What to check then: ``check the AWS credentials and policy``."""


def queue_error(
    where: str,
    service: Service,
    meant: ErrorCode,
    operation: str | None,
    service_code: str,
    status: int = 0,
    detail: str = "",
) -> BackendError:
    """The error for a failure of the operation ``where`` describes, classified as ``meant``.

    ``status`` is the HTTP status of the service's answer, 0 when it gave none
    (then ``service_code`` names the SDK's exception); ``operation`` the SDK call.
    """
    answered = f"{service_code}, HTTP {status}"
    match meant:
        case ErrorCode.TRANSIENT | ErrorCode.THROTTLED if not status:
            message = f"{where}: cannot reach {service.name} ({service_code}); retry later"
        case ErrorCode.TRANSIENT | ErrorCode.THROTTLED:
            message = f"{where}: {service.name} is busy or failing ({answered}); retry later"
        case ErrorCode.NOT_FOUND:
            message = f"{where}: the queue does not exist; create it or use create=True"
        case ErrorCode.CREDENTIALS_REFUSED:
            message = f"{where}: {service.refused} ({service_code}); {service.fix}"
        case _ if not status:
            message = f"{where} failed: {service_code}{detail}"
        case _:
            message = f"{where} failed: {service_code} (HTTP {status}){detail}"
    return backend_error(
        message, meant, backend=service.backend, operation=operation, service_code=service_code
    )


__all__ = ["Service", "queue_error"]
