"""The idemflow error tree: one root, one ``code`` on every error, and where a backend said no.

Every error a caller can see derives from :class:`IdemflowError`, so one
``except IdemflowError`` catches them all, and carries an :class:`ErrorCode`
to branch on (never the message). An error a backend caused also names the
``backend`` (``"dynamodb"``, ``"azure_tables"``, ``"sqs"``, ``"azure_queue"``,
``"sqlite"``, ``"memory"``), the ``operation`` (the API call, ``"TransactWriteItems"``)
and the ``service_code`` (the service's own code, or the HTTP status when that
is all it gave). A store and a queue of one cloud classify alike: a refused
credential is a :class:`ConfigurationError` with ``CREDENTIALS_REFUSED`` from
either, so a worker stops on it. Errors are picklable, because workers run in
other processes and ship errors back.

Names: an error ends in ``Error``; :class:`WorkflowAborted` and
:class:`ChildAborted` are outcomes a workflow chose (``tx.abort``), caught as
results, not failures. The names before 1.0 (``StoreError``,
``TransientStoreError``, ``StoreConfigError``, ``CompensationFailed``,
``RequestFailed``, ``MessageNotDelivered``, ``EffectTimeout``,
``MessageRejected``, ``MissingIdempotencyKey``) still resolve here, with a
:class:`DeprecationWarning`.

>>> try:
...     raise InvalidNameError("table", "", "must not be empty")
... except IdemflowError as exc:
...     print(exc, exc.code)
invalid table '': must not be empty invalid_input
"""

from __future__ import annotations

from idemflow.core.moved import resolve
from idemflow.errors._backend import (
    BackendError,
    ConfigurationError,
    MessageLostError,
    QueueError,
    TransientError,
    backend_error,
)
from idemflow.errors._codes import ErrorCode, IdemflowError
from idemflow.errors._input import (
    ConflictError,
    ContinueAsNewError,
    ForkStepError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    InvalidNameError,
    InvalidScheduleError,
    InvalidValueError,
    LimitExceededError,
    MessageRejectedError,
    MissingIdempotencyKeyError,
    NonDeterminismError,
    RequestExistsError,
    StreamClosedError,
)
from idemflow.errors._outcomes import (
    ChildAborted,
    ChildCancelledError,
    CompensationError,
    ConsoleExposedError,
    ConsoleRefusedError,
    DeliveryRetryError,
    EffectTimeoutError,
    LimitReachedError,
    MessageNotDeliveredError,
    RequestCancelledError,
    RequestFailedError,
    RequestNotFoundError,
    StepFailedError,
    StreamTimeoutError,
    VersionNotHeldError,
    WorkflowAborted,
)

RENAMED: dict[str, str] = {
    "StoreError": "BackendError",
    "TransientStoreError": "TransientError",
    "StoreConfigError": "ConfigurationError",
    "CompensationFailed": "CompensationError",
    "RequestFailed": "RequestFailedError",
    "MessageNotDelivered": "MessageNotDeliveredError",
    "EffectTimeout": "EffectTimeoutError",
    "MessageRejected": "MessageRejectedError",
    "MissingIdempotencyKey": "MissingIdempotencyKeyError",
}
"""Names before 1.0 and the class each now is; they resolve until the next minor release."""


def deprecated_error(module: str, name: str, moved: tuple[str, ...] = ()) -> type[IdemflowError]:
    """For the ``__getattr__`` of a module that exported an error before 1.0: the class an old
    name (renamed, or one of ``moved`` here from that module) stands for, with its
    :class:`DeprecationWarning`; :class:`AttributeError` for any other name.

    The warning is the one every moved name gives (:mod:`idemflow.core.moved`), naming the error's
    public home, :mod:`idemflow`.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     deprecated_error("idemflow", "StoreError").__name__, str(caught[0].message)
    ('BackendError', 'idemflow.StoreError moved: import BackendError from idemflow (renamed from StoreError)')
    """
    new = RENAMED.get(name, name if name in moved else None)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    found = resolve(module, name, {name: f"idemflow:{new}"}, depth=1)
    assert isinstance(found, type) and issubclass(found, IdemflowError)
    return found


def __getattr__(name: str) -> type[IdemflowError]:
    return deprecated_error(__name__, name)


__all__ = [
    "BackendError",
    "ChildAborted",
    "ChildCancelledError",
    "CompensationError",
    "ConfigurationError",
    "ConflictError",
    "ConsoleExposedError",
    "ConsoleRefusedError",
    "ContinueAsNewError",
    "DeliveryRetryError",
    "EffectTimeoutError",
    "ErrorCode",
    "ForkStepError",
    "IdemflowError",
    "IdempotencyKeyReuseError",
    "InvalidInputError",
    "InvalidNameError",
    "InvalidScheduleError",
    "InvalidValueError",
    "LimitExceededError",
    "LimitReachedError",
    "MessageLostError",
    "MessageNotDeliveredError",
    "MessageRejectedError",
    "MissingIdempotencyKeyError",
    "NonDeterminismError",
    "QueueError",
    "RequestCancelledError",
    "RequestExistsError",
    "RequestFailedError",
    "RequestNotFoundError",
    "StepFailedError",
    "StreamClosedError",
    "StreamTimeoutError",
    "TransientError",
    "VersionNotHeldError",
    "WorkflowAborted",
    "backend_error",
]

for _error in (value for value in list(globals().values()) if isinstance(value, type)):
    if issubclass(_error, (IdemflowError, ErrorCode)):
        _error.__module__ = __name__  # one home in tracebacks, reprs and pickles: idemflow.errors
del _error
