"""What the Lambda handlers read from the invocation's context object.

Why a module of its own: the HTTP and SQS handlers' parts (:mod:`idemflow.integrations.lambda_http`,
:mod:`idemflow.integrations.lambda_queues`) and the public face :mod:`idemflow.aws_lambda`, which
re-exports it, all name this type; here it sits below all three.
"""

from __future__ import annotations

from typing import Protocol


class LambdaContext(Protocol):
    """What the handlers read from Lambda's context object: the time the invocation has left."""

    def get_remaining_time_in_millis(self) -> int: ...


__all__ = ["LambdaContext"]
