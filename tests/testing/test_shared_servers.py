"""The plugin's servers under pytest-xdist: one of each shareable kind for every worker, started
by the controller and stopped after the last worker (:mod:`idemflow.testing._shared_servers`)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

USER_TEST = """
import json, os
from pathlib import Path

from idemflow import open_store
from idemflow.stores.registry import STORES


def test_one_azurite_for_all(idemflow_servers, tmp_path):
    _, bed = STORES.bed("azure")
    server = idemflow_servers.get(bed.server)
    store = open_store(server.store_url("t" + os.environ["PYTEST_XDIST_WORKER"][2:] + "x", tmp_path))
    store.create_tables("items")  # the server answers this worker
    store.close()
    seen = Path(os.environ["SEEN"]) / os.environ["PYTEST_XDIST_WORKER"]
    seen.write_text(json.dumps(server.table_port))
"""


@pytest.mark.cloud
@pytest.mark.backend("azure")
def test_every_worker_gets_the_one_server_the_controller_started_and_stops(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--dist each`` runs the test on both workers: both reach the same Azurite, which no
    longer listens once the run is over."""
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.setenv("SEEN", str(seen))
    pytester.makeconftest('pytest_plugins = ["idemflow.testing.plugin"]\n')
    pytester.makepyfile(test_user=USER_TEST)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "each", "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)
    ports = {path.name: json.loads(path.read_text()) for path in seen.iterdir()}
    assert sorted(ports) == ["gw0", "gw1"] and len(set(ports.values())) == 1, ports
    with socket.socket() as sock, pytest.raises(OSError):
        sock.settimeout(2)
        sock.connect(("127.0.0.1", next(iter(ports.values()))))
