"""A Lambda sandbox on loopback: AWS's own runtime client against a Runtime API the tests serve.

:class:`Sandbox` starts ``python -m awslambdaric module.handler`` (the runtime interface
client Lambda's Python images run) with ``AWS_LAMBDA_RUNTIME_API`` pointing at a
:class:`RuntimeApi` of its own: ``GET /2018-06-01/runtime/invocation/next`` long-polls for the
next queued event, ``POST .../invocation/{id}/response`` and ``/error`` finish it,
``/init/error`` reports a handler that failed to load. The test invokes (queue an event, wait
for its answer), freezes the sandbox between invocations (SIGSTOP, as Lambda does once a
handler returned), thaws it (SIGCONT) and kills it mid-invocation (SIGKILL; a new sandbox
then takes the next events, as Lambda starts one).

Each sandbox has its own server, so an event is never handed to a killed sandbox's poll.
:class:`EventSourceMapping` plays the SQS event-source mapping: it receives messages with the
SDK and builds the event Lambda hands the function (:func:`sqs_event`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "/2018-06-01/runtime"
ACCOUNT = "123456789012"
FUNCTION_ARN = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:idemflow-worker"


class InvocationFailed(Exception):
    """The handler raised: the body Lambda's runtime client posted to ``/error``."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('errorType')}: {error.get('errorMessage')}")
        self.error = error


@dataclass
class Invocation:
    """One event on its way through the sandbox; ``done`` is set once it was answered."""

    request_id: str
    event: Any
    deadline_ms: int
    done: threading.Event = field(default_factory=threading.Event)
    response: Any = None
    error: dict[str, Any] | None = None
    taken: threading.Event = field(default_factory=threading.Event)

    def result(self, timeout: float) -> Any:
        """The handler's answer; :class:`InvocationFailed` if it raised, TimeoutError if none came."""
        if not self.done.wait(timeout):
            raise TimeoutError(f"invocation {self.request_id} got no answer within {timeout}s")
        if self.error is not None:
            raise InvocationFailed(self.error)
        return self.response


def _trace_id() -> str:
    """An X-Ray trace header: the runtime client's native code needs one on every invocation."""
    return f"Root=1-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:24]};Sampled=0"


class RuntimeApi:
    """The Runtime API endpoints awslambdaric calls, over HTTP/1.1 on a free loopback port."""

    def __init__(self) -> None:
        self._pending: deque[Invocation] = deque()
        self._by_id: dict[str, Invocation] = {}
        self._ready = threading.Condition()
        self._closed = False
        self.init_errors: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go as two writes: no 40 ms delayed-ACK stall

            def log_message(self, format: str, *args: Any) -> None:
                return

            def handle(self) -> None:
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):  # a sandbox killed while it asked
                    self.close_connection = True

            def do_GET(self) -> None:
                if self.path != f"{PREFIX}/invocation/next":
                    return self._answer(404, b"{}")
                invocation = api._next()
                if invocation is None:  # the server is closing: its sandbox is gone
                    self.close_connection = True
                    return None
                body = json.dumps(invocation.event).encode()
                headers = {
                    "Lambda-Runtime-Aws-Request-Id": invocation.request_id,
                    "Lambda-Runtime-Deadline-Ms": str(invocation.deadline_ms),
                    "Lambda-Runtime-Invoked-Function-Arn": FUNCTION_ARN,
                    "Lambda-Runtime-Trace-Id": _trace_id(),
                }
                self._answer(200, body, headers)
                invocation.taken.set()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                payload = self.rfile.read(length) if length else b""
                parts = self.path[len(PREFIX) :].strip("/").split("/")
                if parts == ["init", "error"]:
                    api._init_failed(json.loads(payload or b"{}"))
                    return self._answer(202, b"{}")
                if len(parts) == 3 and parts[0] == "invocation" and parts[2] in ("response", "error"):
                    invocation = api._by_id.get(parts[1])
                    if invocation is None:
                        return self._answer(400, b"{}")
                    if parts[2] == "response":
                        invocation.response = json.loads(payload) if payload else None
                    else:
                        invocation.error = json.loads(payload or b"{}")
                    invocation.done.set()
                    return self._answer(202, b"{}")
                self._answer(404, b"{}")

            def _answer(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # a sandbox killed while it asked
                    self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def queue(self, event: Any, timeout: float) -> Invocation:
        """Queue ``event``; the sandbox's next poll takes it with ``timeout`` seconds to run."""
        deadline_ms = int((time.time() + timeout) * 1000)
        invocation = Invocation(str(uuid.uuid4()), event, deadline_ms)
        with self._ready:
            if self.init_errors:
                invocation.error = self.init_errors[0]
                invocation.done.set()
                return invocation
            self._by_id[invocation.request_id] = invocation
            self._pending.append(invocation)
            self._ready.notify_all()
        return invocation

    def _init_failed(self, error: dict[str, Any]) -> None:
        """The handler did not load: every invocation of this sandbox fails with that error, as on Lambda."""
        with self._ready:
            self.init_errors.append(error)
            for invocation in self._by_id.values():
                if not invocation.done.is_set():
                    invocation.error = error
                    invocation.done.set()

    def _next(self) -> Invocation | None:
        with self._ready:
            while not self._pending and not self._closed:
                self._ready.wait()
            return None if self._closed else self._pending.popleft()

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        self._server.shutdown()
        self._server.server_close()


LAMBDA_ENV = {
    "AWS_LAMBDA_FUNCTION_NAME": "idemflow-worker",
    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
    "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/idemflow-worker",
    "AWS_LAMBDA_LOG_STREAM_NAME": "2026/11/27/[$LATEST]0123456789abcdef",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.11",
    "LAMBDA_TASK_ROOT": str(ROOT),
}


@dataclass
class SandboxCounts:
    """What a test did to its sandboxes, for its report."""

    invocations: int = 0
    freezes: int = 0
    kills: int = 0
    sandboxes: int = 0


class Sandbox:
    """One Lambda execution environment: a runtime-client process and its Runtime API."""

    def __init__(self, handler: str, env: dict[str, str], counts: SandboxCounts | None = None) -> None:
        self.api = RuntimeApi()
        self.counts = counts if counts is not None else SandboxCounts()
        self.counts.sandboxes += 1
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        full = {
            **os.environ,
            **LAMBDA_ENV,
            **env,
            "AWS_LAMBDA_RUNTIME_API": self.api.address,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        command = [sys.executable, "-m", "awslambdaric", handler]
        self.process = subprocess.Popen(
            command, env=full, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.frozen = False

    def invoke_async(self, event: Any, timeout: float = 30.0) -> Invocation:
        """Queue ``event`` for this sandbox; wait on the returned :class:`Invocation`."""
        if self.frozen:
            raise RuntimeError("thaw the sandbox before invoking it (Lambda thaws it for an event)")
        self.counts.invocations += 1
        return self.api.queue(event, timeout)

    def invoke(self, event: Any, timeout: float = 30.0) -> Any:
        """The handler's answer to ``event`` (:class:`InvocationFailed` if it raised)."""
        invocation = self.invoke_async(event, timeout)
        try:
            return invocation.result(timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; sandbox output:\n{self.output()}") from exc

    def freeze(self) -> None:
        """SIGSTOP: the sandbox between invocations (no thread of it runs until thawed)."""
        self.process.send_signal(signal.SIGSTOP)
        self.frozen = True
        self.counts.freezes += 1

    def thaw(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.frozen = False

    def kill(self) -> None:
        """SIGKILL, as Lambda ends a sandbox that timed out or crashed."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.counts.kills += 1

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read()[-4000:].decode(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.api.close()
        self._log.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def sqs_event(raw: Sequence[Mapping[str, Any]], queue: str, region: str = "us-east-1") -> dict[str, Any]:
    """The event Lambda's SQS event-source mapping hands a function for received messages."""
    records = []
    for message in raw:
        attributes = message.get("MessageAttributes", {})
        first_receive = message["Attributes"]["ApproximateFirstReceiveTimestamp"]
        records.append(
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": {
                    "ApproximateReceiveCount": message["Attributes"]["ApproximateReceiveCount"],
                    "SentTimestamp": message["Attributes"]["SentTimestamp"],
                    "SenderId": message["Attributes"].get("SenderId", "AIDAIENQZJOLO23YVJ4VO"),
                    "ApproximateFirstReceiveTimestamp": first_receive,
                },
                "messageAttributes": {
                    name: {
                        "stringValue": value.get("StringValue"),
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": value["DataType"],
                    }
                    for name, value in attributes.items()
                },
                "md5OfBody": message["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{region}:{ACCOUNT}:{queue}",
                "awsRegion": region,
            }
        )
    return {"Records": records}


class EventSourceMapping:
    """The event-source mapping's side: receive up to 10 messages (visibility 2 s), as one event."""

    def __init__(self, endpoint: str, region: str, name: str) -> None:
        self.client = boto3.client("sqs", endpoint_url=endpoint, region_name=region)
        self.url = self.client.get_queue_url(QueueName=name)["QueueUrl"]
        self.name = name

    def batch(self, wait: int = 1) -> dict[str, Any] | None:
        answer = self.client.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=wait,
            VisibilityTimeout=2,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        raw = answer.get("Messages", [])
        return sqs_event(raw, self.name) if raw else None
