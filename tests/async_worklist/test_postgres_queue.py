"""PostgresQueue on a real PostgreSQL server: what is its own beside the queue contract
(``tests/conformance/test_queue_contract.py`` runs the contract on it through the registry).

Its URL, the typed errors of a refused login, a missing database and a lost connection, and a
server restart in the middle of a load, after which every message sent is received exactly
once (none lost, none twice acknowledged).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from idemflow.async_worklist.queues import open_queue
from idemflow.async_worklist.queues.postgres import PostgresQueue
from idemflow.async_worklist.queues.registry import QUEUES
from idemflow.errors import ConfigurationError, InvalidNameError, TransientError
from idemflow.stores.registry import LIBPQ_PARAMETERS
from idemflow.testing._postgres import PostgresServer, postgres_server
from idemflow.testing.servers import ServerPool, free_port

pytestmark = [pytest.mark.cloud]


@pytest.fixture
def server(backend_servers: ServerPool) -> PostgresServer:
    started: PostgresServer = backend_servers.get("idemflow.testing.servers:postgres_server")
    return started


@pytest.fixture
def private_server() -> Iterator[PostgresServer]:
    """A server of this test alone, which it may restart."""
    with postgres_server() as server:
        yield server


def _name() -> str:
    return f"pq{uuid.uuid4().hex[:12]}"


def test_a_url_opens_the_queue_it_names_with_its_visibility_timeout(server: PostgresServer) -> None:
    name = _name()
    queue = open_queue(
        f"postgresql://{server.host}:{server.port}/postgres?user=postgres&name={name}&visibility_timeout=7"
    )
    try:
        assert isinstance(queue, PostgresQueue)
        assert (queue.name, queue.visibility_timeout) == (name, 7.0)
        queue.send("hello")
        other = open_queue(server.url(name=name))  # another process's view of the same queue
        try:
            [message] = other.receive()
            assert message.body == "hello"
            other.ack(message)
            assert queue.approximate_size() == 0
        finally:
            other.close()
    finally:
        queue.close()


def test_bad_urls_and_options_are_refused_before_anything_is_opened(server: PostgresServer) -> None:
    with pytest.raises(ConfigurationError, match="HOST"):
        open_queue("postgresql:nowhere?name=q")
    with pytest.raises(ConfigurationError, match="credentials"):
        open_queue(f"postgresql://postgres:secret@{server.host}:{server.port}/postgres?name=q")
    with pytest.raises(ConfigurationError, match="unknown parameter"):
        open_queue(f"postgresql://{server.host}:{server.port}/postgres?nmae=q")
    with pytest.raises(InvalidNameError):
        PostgresQueue(server.conninfo, name="")
    with pytest.raises(ConfigurationError, match="pool_size"):
        PostgresQueue(server.conninfo, pool_size=0)


def test_a_queue_url_takes_every_libpq_parameter_a_store_url_takes() -> None:
    """One database serves both: whatever reaches it from a store URL reaches it from a queue's."""
    assert QUEUES.for_scheme("postgresql").parameters >= LIBPQ_PARAMETERS


def test_a_refused_login_and_a_missing_database_are_configuration_errors(server: PostgresServer) -> None:
    """Not transient, so nobody retries them: the server's own words and the SQLSTATE they mean."""
    where = f"postgresql://{server.host}:{server.port}"
    with pytest.raises(ConfigurationError, match="nobody_here") as refused:
        PostgresQueue(f"{where}/postgres?user=nobody_here", connect_timeout=5)
    with pytest.raises(ConfigurationError, match="no_such_database") as missing:
        PostgresQueue(f"{where}/no_such_database?user=postgres", connect_timeout=5)
    assert (refused.value.service_code, missing.value.service_code) == ("28000", "3D000")
    assert refused.value.backend == missing.value.backend == "postgres"


def test_nothing_listening_is_a_transient_error_naming_the_operation() -> None:
    with pytest.raises(TransientError) as raised:
        PostgresQueue(f"postgresql://127.0.0.1:{free_port()}/postgres?user=postgres", connect_timeout=1)
    assert raised.value.backend == "postgres" and raised.value.operation == "connect"


def test_a_server_restart_mid_load_loses_no_message(
    private_server: PostgresServer,
) -> None:
    """Senders and receivers run on while the server restarts: calls that fail then are
    TransientErrors (retried here as a worker retries), and in the end every body sent was
    received and acknowledged (a message whose ack was lost with its connection comes back once
    its visibility ends, as a queue delivers at least once)."""
    queue = PostgresQueue(private_server.conninfo, name=_name(), visibility_timeout=5, connect_timeout=20)
    sent: list[str] = []
    acked: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def send_many(sender: int) -> None:
        for i in range(300):
            body = f"m{sender}-{i}"
            while True:
                try:
                    queue.send(body)
                    break
                except TransientError:
                    continue  # the send is one statement: it either happened or it did not
            with lock:
                sent.append(body)

    def receive_many() -> None:
        while not stop.is_set():
            try:
                for message in queue.receive(max_messages=10, wait=0.2):
                    queue.ack(message)
                    with lock:
                        acked.append(message.body)
            except TransientError:
                continue

    senders = [threading.Thread(target=send_many, args=(sender,)) for sender in range(2)]
    receivers = [threading.Thread(target=receive_many) for _ in range(2)]
    for thread in senders + receivers:
        thread.start()
    private_server.restart()
    for thread in senders:
        thread.join()
    # What a lost ack leaves comes back after its visibility timeout; wait until all are in.
    deadline_rounds = 0
    while queue.approximate_size() and deadline_rounds < 200:
        stop.wait(0.1)
        deadline_rounds += 1
    stop.set()
    for thread in receivers:
        thread.join()
    queue.close()
    assert set(acked) == set(sent) and len(set(sent)) == 600
