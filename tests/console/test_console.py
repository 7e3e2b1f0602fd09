"""The console's JSON API and pages over HTTP, without a browser: filters and paging, the timeline
and its redaction, authentication, CSRF and Origin checks, read-only mode, once-only actions."""

from __future__ import annotations

import base64
import html
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from idemflow import InvalidInputError, close_stream, run, set_event, workflow, write_stream
from idemflow.admin import ConsoleExposedError
from idemflow.client import RunStatus, status, submit
from idemflow.console._data import ConsoleData, Filters
from idemflow.console._server import Console
from idemflow.console._settings import ConsoleSettings, parse_basic_auth, shown_url
from idemflow.serialization import JSON
from idemflow.stores import SqliteStore
from idemflow.worker import SqliteQueue, Worker
from tests.support.console_app import WORKFLOWS, booking, shipment, tour
from tests.support.console_http import Client, running

TOKEN = "t0ken-for-the-console-tests"


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SqliteStore, SqliteQueue]]:
    """Three failed shipments, two bookings waiting for a confirmation, one completed shipment."""
    root = tmp_path_factory.mktemp("console")
    store = SqliteStore(str(root / "store.db"))
    store.create_tables("items")
    queue = SqliteQueue(str(root / "queue.db"))
    for n in range(3):
        submit(shipment(f"o{n}"), request_id=f"ship-{n}", store=store, queue=queue)
    for n in range(2):
        card = {"number": "4242", "cvc_token": f"tok_{n}"}
        submit(booking(f"show{n}", card), request_id=f"book-{n}", store=store, queue=queue)
    Worker(WORKFLOWS, store=store, queue=queue, wait=0.05, relay_every=None).run(idle_timeout=0.5)
    yield store, queue
    queue.close()
    store.close()


def _settings(**changes: Any) -> ConsoleSettings:
    base: dict[str, Any] = {"port": 0, "store_url": "sqlite:store.db", "queue_url": "sqlite:queue.db"}
    return ConsoleSettings(**{**base, **changes})


def test_the_list_filters_by_status_workflow_and_request_id(
    backends: tuple[SqliteStore, SqliteQueue],
) -> None:
    store, queue = backends
    with running(_settings(), store, queue) as console:
        client = Client(console.url)
        failed = client.get("/api/runs?status=failed").json()
        assert {found["request_id"] for found in failed["runs"]} >= {"ship-0", "ship-1", "ship-2"}
        assert {found["status"] for found in failed["runs"]} == {"failed"}
        bookings = client.get("/api/runs?workflow=booking").json()
        assert {found["workflow"] for found in bookings["runs"]} == {"booking"}
        exact = client.get("/api/runs?id=book-1").json()
        assert [found["request_id"] for found in exact["runs"]] == ["book-1"]
        prefix = client.get("/api/runs?id=ship-&match=prefix").json()
        assert {found["request_id"] for found in prefix["runs"]} >= {"ship-0", "ship-1", "ship-2"}
        assert client.get("/api/runs?id=ship-&match=exact").json()["runs"] == []
        assert client.get("/api/runs?age=1d").json()["runs"] == []  # none started a day ago
        bad = client.get("/api/runs?status=stuck")
        assert bad.status == 400 and "status must be one of" in bad.json()["error"]
        page = client.get("/?status=failed")
        assert page.status == 200 and "ship-1" in page.body and "book-0" not in page.body


def test_a_request_page_lists_every_step_without_the_workflows_code(
    backends: tuple[SqliteStore, SqliteQueue],
) -> None:
    """``idemflow console`` without ``--workflows``: the steps are read from the store, the atomic
    ones at the places the run record names, for a waiting request and a failed one alike."""
    store, queue = backends
    console = Console(_settings(), store, queue, []).start()
    try:
        client = Client(console.url)
        shown = client.get("/api/runs/book-0").json()
        where = [
            (step["step"], step["kind"], step["name"], step["table"], step["partition"])
            for step in shown["steps"]
        ]
        assert where == [
            (1, "atomic", "hold", "items", "show0"),
            (2, "atomic", "charge", "items", "payments-show0"),
        ]
        assert "note" not in shown and shown["waits_for"] == "waiting for a message on 'confirm'"
        assert shown["compensations"] == ["step 2 (atomic charge)", "step 1 (atomic hold)"]
        assert shown["steps"][1]["value"]["card"]["cvc_token"] == "[redacted]"
        failed = client.get("/api/runs/ship-0").json()
        assert [(step["step"], step["name"]) for step in failed["steps"]] == [(1, "pack")]
        page = client.get("/runs/book-0?workflow=booking").body
        assert "no code of workflow" not in page and "items/payments-show0" in page and "tok_0" not in page
    finally:
        console.close()


def test_paging_walks_every_request_once(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    queue = SqliteQueue(str(tmp_path / "q.db"))
    for n in range(23):
        submit(shipment(f"p{n}"), request_id=f"page-{n:02}", store=store, queue=queue)
    with running(_settings(page_size=5), store, queue) as console:
        client = Client(console.url)
        seen: list[str] = []
        after = ""
        for _ in range(10):
            page = client.get("/api/runs" + (f"?after={after}" if after else "")).json()
            assert len(page["runs"]) <= 5
            seen += [found["request_id"] for found in page["runs"]]
            if page["next"] is None:
                break
            after = page["next"]
        assert sorted(seen) == [f"page-{n:02}" for n in range(23)]
        assert client.get("/").body.count("next page") == 1


def test_a_request_page_shows_its_timeline_with_secrets_redacted(
    backends: tuple[SqliteStore, SqliteQueue],
) -> None:
    store, queue = backends
    with running(_settings(), store, queue) as console:
        shown = Client(console.url).get("/api/runs/book-0").json()
        assert [(step["step"], step["name"], step["outcome"]) for step in shown["steps"]] == [
            (1, "hold", "committed"),
            (2, "charge", "committed"),
        ]
        assert shown["waits_for"] == "waiting for a message on 'confirm'"
        assert shown["compensations"] == ["step 2 (atomic charge)", "step 1 (atomic hold)"]
        assert shown["input"]["args"][1] == {"number": "4242", "cvc_token": "[redacted]"}
        assert shown["steps"][1]["value"]["card"]["cvc_token"] == "[redacted]"
        page = Client(console.url).get("/runs/book-0?workflow=booking").body
        assert "tok_0" not in page and "[redacted]" in page and "waiting for a message" in page
        failed = Client(console.url).get("/api/runs/ship-0").json()
        assert failed["failure"]["reason"] == "RuntimeError: the carrier refused the parcel"
        assert failed["failure"]["identity"] == "atomic ship"  # the failed step, named
        failed_page = Client(console.url).get("/runs/ship-0?workflow=shipment").body
        assert "step 2: atomic ship" in failed_page
        assert Client(console.url).get("/api/runs/nobody").status == 404


def test_a_redaction_hook_of_ones_own_replaces_the_default(backends: tuple[SqliteStore, SqliteQueue]) -> None:
    store, queue = backends

    def hide_cards(value: JSON) -> JSON:
        if isinstance(value, dict):
            return "[card]" if "number" in value else {key: hide_cards(inner) for key, inner in value.items()}
        return [hide_cards(inner) for inner in value] if isinstance(value, list) else value

    with running(_settings(redact=hide_cards), store, queue) as console:
        shown = Client(console.url).get("/api/runs/book-1").json()
        assert shown["input"]["args"] == ["show1", "[card]"]
        assert shown["steps"][1]["value"] == {"card": "[card]", "charge": "ch_1"}


def test_without_the_token_every_page_and_call_is_refused(backends: tuple[SqliteStore, SqliteQueue]) -> None:
    store, queue = backends
    with running(_settings(token=TOKEN), store, queue) as console:
        stranger = Client(console.url)
        first = stranger.get("/")
        assert first.status == 401 and "Set-Cookie" not in first.headers  # no session kept for it
        assert stranger.get("/api/runs").status == 401
        assert stranger.get("/runs/ship-0?workflow=shipment").status == 401
        assert stranger.get("/login?token=wrong-token-of-some-length").status == 401
        assert stranger.get("/").status == 401
        assert Client(console.url).get("/api/runs", Authorization=f"Bearer {TOKEN}").status == 200
        assert Client(console.url).get("/api/runs", Authorization="Bearer " + TOKEN[:-1] + "x").status == 401
        browser = Client(console.url)
        signed = browser.get(f"/login?token={TOKEN}&next=/dead-letters")
        assert signed.status == 303 and signed.headers["Location"] == "/dead-letters"
        assert browser.get("/").status == 200
        assert Client(console.url).get("/login?token=x&next=//evil.example").status == 401
        assert browser.get(f"/login?token={TOKEN}&next=//evil.example").headers["Location"] == "/"


def test_basic_auth(backends: tuple[SqliteStore, SqliteQueue]) -> None:
    store, queue = backends
    with running(_settings(basic_auth=("ops", "correct horse")), store, queue) as console:
        refused = Client(console.url).get("/")
        assert refused.status == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
        good = base64.b64encode(b"ops:correct horse").decode()
        bad = base64.b64encode(b"ops:wrong horse").decode()
        assert Client(console.url).get("/", Authorization=f"Basic {good}").status == 200
        assert Client(console.url).get("/", Authorization=f"Basic {bad}").status == 401
        assert Client(console.url).get("/", Authorization="Basic !!!").status == 401


def test_a_post_needs_the_sessions_csrf_token_and_the_consoles_origin(
    backends: tuple[SqliteStore, SqliteQueue],
) -> None:
    store, queue = backends
    with running(_settings(), store, queue) as console:
        browser = Client(console.url)
        page = browser.get("/runs/ship-2?workflow=shipment")
        form = {"workflow": "shipment", "action_id": page.action_id("cancel"), "csrf": page.csrf()}
        assert browser.post_form("/runs/ship-2/cancel", {**form, "csrf": "forged"}).status == 403
        assert (
            browser.post_form("/runs/ship-2/cancel", {k: v for k, v in form.items() if k != "csrf"}).status
            == 403
        )
        other = Client(console.url)
        other.get("/")
        assert other.post_form("/runs/ship-2/cancel", form).status == 403  # another session's token
        cross = browser.post_form("/runs/ship-2/cancel", form, Origin="http://evil.example")
        assert cross.status == 403 and "cross-site" in cross.body
        referer = browser.post_form(
            "/runs/ship-2/cancel", form, Origin="null", Referer="http://evil.example/x"
        )
        assert referer.status == 403
        assert status(store, "shipment", "ship-2").status is RunStatus.FAILED  # nothing happened
        done = browser.post_form("/runs/ship-2/cancel", form)
        assert done.status == 303 and "/runs/ship-2?" in done.headers["Location"]
        assert status(store, "shipment", "ship-2").status is RunStatus.CANCELLED
        shown = browser.get("/api/runs/ship-2").json()
        assert shown["actions"] == ["resume", "abort", "fork"]


def test_the_host_header_must_be_loopback_on_loopback(backends: tuple[SqliteStore, SqliteQueue]) -> None:
    store, queue = backends
    with running(_settings(), store, queue) as console:
        assert Client(console.url).get("/", Host="evil.example").status == 403
        assert Client(console.url).get("/", Host=f"localhost:{console.url.rsplit(':', 1)[1]}").status == 200
    with running(_settings(token=TOKEN), store, queue) as console:  # behind a proxy passing its Host
        proxied = Client(console.url, headers={"Authorization": f"Bearer {TOKEN}", "Host": "ops.example"})
        assert proxied.get("/").status == 200
        cross = proxied.post_json("/api/runs/ship-0/cancel", {}, Origin="https://evil.example")
        assert cross.status == 403
        assert proxied.post_json("/api/runs/nobody/cancel", {}, Origin="https://ops.example").status == 404


def test_a_double_submit_acts_once(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    queue = SqliteQueue(str(tmp_path / "q.db"))
    store.create_tables("items")
    submit(shipment("d"), request_id="dbl", store=store, queue=queue)
    Worker(WORKFLOWS, store=store, queue=queue, wait=0.05, relay_every=None).run(idle_timeout=0.5)
    assert status(store, "shipment", "dbl").status is RunStatus.FAILED
    assert queue.approximate_size() == 0
    with running(_settings(), store, queue) as console:
        browser = Client(console.url)
        page = browser.get("/runs/dbl?workflow=shipment")
        form = {"workflow": "shipment", "action_id": page.action_id("retry"), "csrf": page.csrf()}
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: browser.post_form("/runs/dbl/retry", form), range(4)))
        assert [answer.status for answer in answers] == [303] * 4
        assert queue.approximate_size() == 1  # one pointer: the retry ran once
        again = browser.get("/runs/dbl?workflow=shipment")
        form["action_id"] = again.action_id("retry")
        assert browser.post_form("/runs/dbl/retry", form).status == 303
        assert queue.approximate_size() == 2  # a new form is a new action


def test_read_only_hides_and_refuses_actions(backends: tuple[SqliteStore, SqliteQueue]) -> None:
    store, queue = backends
    with running(_settings(read_only=True), store, queue) as console:
        browser = Client(console.url)
        page = browser.get("/runs/ship-1?workflow=shipment")
        assert page.status == 200 and "read-only" in page.body
        assert 'id="retry"' not in page.body and 'id="abort"' not in page.body
        assert browser.get("/api/runs/ship-1").json()["actions"] == []
        refused = browser.post_json(
            "/api/runs/ship-1/retry",
            {"workflow": "shipment"},
            X_CSRF_Token=browser.get("/api/session").json()["csrf"],
        )
        assert refused.status == 403 and "read-only" in refused.json()["error"]
        assert browser.get("/runs/ship-1/abort?workflow=shipment").status == 403
        assert status(store, "shipment", "ship-1").status is RunStatus.FAILED


def test_the_json_api_acts_with_a_bearer_token_or_a_sessions_csrf_token(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    queue = SqliteQueue(str(tmp_path / "q.db"))
    store.create_tables("items")
    submit(booking("api", {"number": "1"}), request_id="api-1", store=store, queue=queue)
    submit(booking("api", {"number": "2"}), request_id="api-2", store=store, queue=queue)
    Worker(WORKFLOWS, store=store, queue=queue, wait=0.05, relay_every=None).run(idle_timeout=0.5)
    with running(_settings(token=TOKEN), store, queue) as console:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        done = Client(console.url).post_json("/api/runs/api-1/abort", {"reason": "sold out"}, **bearer).json()
        assert done["status"] == "aborted" and done["compensations"] == [
            "step 2 (atomic charge)",
            "step 1 (atomic hold)",
        ]
        assert status(store, "booking", "api-1").reason == "sold out"
        cookie_only = Client(console.url)
        cookie_only.get(f"/login?token={TOKEN}")
        assert cookie_only.post_json("/api/runs/api-2/cancel", {}).status == 403  # no CSRF token
        csrf = cookie_only.get("/api/session").json()["csrf"]
        cancelled = cookie_only.post_json("/api/runs/api-2/cancel", {}, X_CSRF_Token=csrf).json()
        assert cancelled == {
            "action": "cancel",
            "request_id": "api-2",
            "workflow": "booking",
            "was": "running",
            "done": True,
        }
        assert Client(console.url).post_json("/api/runs/api-2/explode", {}, **bearer).status == 400


def test_dead_letters_are_listed_redacted_and_redriven(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    queue = SqliteQueue(str(tmp_path / "q.db"))
    queue.send('{"password": "hunter2", "n": 1}')
    [message] = queue.receive()
    queue.dead_letter(message, "unreadable")
    with running(_settings(), store, queue) as console:
        browser = Client(console.url)
        letters = browser.get("/api/dead-letters").json()["dead_letters"]
        assert [(letter["reason"], "hunter2" in letter["body"]) for letter in letters] == [
            ("unreadable", False)
        ]
        page = browser.get("/dead-letters")
        assert "hunter2" not in page.body and "unreadable" in page.body
        moved = browser.post_form("/dead-letters/redrive", {"csrf": page.csrf(), "action_id": "x1"})
        assert moved.status == 303
        assert browser.get("/api/dead-letters").json()["dead_letters"] == []
        assert queue.approximate_size() == 1
    with running(_settings(queue_url=None), store, None) as console:
        assert Client(console.url).get("/api/dead-letters").status == 403


def test_pages_escape_what_they_show_and_never_show_a_secret_of_a_url(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    queue = SqliteQueue(str(tmp_path / "q.db"))
    submit(shipment("x"), request_id="<script>alert(1)</script>", store=store, queue=queue)
    url = "azure:?connection_string=AccountName%3Da%3BAccountKey%3Ds3cr3tKEY"
    with running(
        _settings(store_url=url, queue_url="sqs:jobs?endpoint_url=http://u:pw@h:1"), store, queue
    ) as console:
        page = Client(console.url).get("/")
        assert "<script>alert" not in page.body and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.body
        assert "s3cr3tKEY" not in page.body and "pw@" not in page.body
        assert "azure:?connection_string=…" in page.body


def test_a_console_beyond_loopback_needs_authentication() -> None:
    with pytest.raises(ConsoleExposedError, match="--token"):
        ConsoleSettings(host="0.0.0.0", port=0).check()
    assert ConsoleSettings(host="0.0.0.0", port=0, token=TOKEN).check().authenticated
    assert ConsoleSettings(host="::1", port=0).check().loopback
    with pytest.raises(InvalidInputError, match="16 characters"):
        ConsoleSettings(token="short").check()
    with pytest.raises(InvalidInputError, match="USER:PASSWORD"):
        parse_basic_auth("ops")
    assert shown_url("AccountName=a;AccountKey=k;EndpointSuffix=x") == "(a store URL)"
    assert (
        shown_url("dynamodb:?region=eu-west-1&endpoint_url=http://k:s@h")
        == "dynamodb:?region=…&endpoint_url=…"
    )


def test_the_command_refuses_to_listen_openly_and_serves_on_loopback(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 's.db'}"
    SqliteStore(str(tmp_path / "s.db")).close()
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "idemflow",
            "console",
            "--store",
            store_url,
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2 and "without authentication" in refused.stderr
    with running(_settings(), SqliteStore(str(tmp_path / "s.db")), None) as taken:
        port = taken.url.rsplit(":", 1)[1]
        busy = subprocess.run(
            [sys.executable, "-m", "idemflow", "console", "--store", store_url, "--port", port],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert busy.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr
    assert "Traceback" not in busy.stderr
    serving = subprocess.Popen(
        [sys.executable, "-m", "idemflow", "console", "--store", store_url, "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert serving.stdout is not None
        line = serving.stdout.readline()
        assert line.startswith("console: http://127.0.0.1:")
        answer = Client(line.split(" ", 1)[1].strip()).get("/api/runs")
        assert answer.status == 200 and answer.json()["runs"] == []
    finally:
        serving.terminate()
        serving.wait(timeout=30)


def test_odd_request_ids_and_bodies(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    queue = SqliteQueue(str(tmp_path / "q.db"))
    odd = ["a/b", "spaces and ?&#", "ünïcode-✓", "%2F"]
    for request_id in odd:
        submit(shipment("w"), request_id=request_id, store=store, queue=queue)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with running(_settings(token=TOKEN), store, queue) as console:
        client = Client(console.url, headers=bearer)
        listed = client.get("/")
        for request_id in odd:
            href = re.search(r'href="(/runs/[^"]+)">' + re.escape(html.escape(request_id)) + "<", listed.body)
            assert href is not None, request_id
            page = client.get(html.unescape(href.group(1)))
            assert page.status == 200 and f'<span class="reqid">{html.escape(request_id)}</span>' in page.body
        assert client.get("/?after=not-a-cursor!").status == 400
        assert client.get("/?age=banana").status == 400
        garbage = client.send("POST", "/api/runs/a%2Fb/cancel", b"{}", {"Content-Length": "abc"})
        assert garbage.status == 400
        assert client.post_json("/api/runs/a%2Fb/cancel", {"reason": 5}).status == 400
        assert client.post_json("/api/runs/a%2Fb/cancel", {"workflow": ["x"]}).status == 400
        assert client.post_json("/api/dead-letters/redrive", {"ids": [1]}).status == 400
        assert client.send("POST", "/api/runs/a%2Fb/cancel", b"[1]", {}).status == 400
        assert status(store, "shipment", "a/b").status is RunStatus.RUNNING
        assert client.post_json("/api/runs/a%2Fb/cancel", {"reason": "odd"}).json()["done"] is True


def test_a_parent_shows_its_child_and_message_and_the_child_its_parent(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    queue = SqliteQueue(str(tmp_path / "q.db"))
    store.create_tables("items")
    submit(tour("rome"), request_id="tour-rome", store=store, queue=queue)
    Worker(WORKFLOWS, store=store, queue=queue, wait=0.05, relay_every=None).run(idle_timeout=0.5)
    with running(_settings(), store, queue) as console:
        client = Client(console.url)
        parent = client.get("/api/runs/tour-rome").json()
        assert [(step["kind"], step["name"]) for step in parent["children"]] == [("start", "booking")]
        assert [step["kind"] for step in parent["messages"]] == ["send"]
        assert "rome-seat" in parent["waits_for"]
        assert parent["compensations"][-1] == "step 1 (start booking)"
        child = client.get("/api/runs/rome-seat").json()
        assert child["parent"] == {"workflow": "tour", "request_id": "tour-rome"}
        page = client.get("/runs/rome-seat?workflow=booking").body
        assert 'href="/runs/tour-rome?workflow=tour"' in page


def test_pages_reuse_the_stores_connections(backends: tuple[SqliteStore, SqliteQueue]) -> None:
    """Each page is answered on one of a few threads, so the store's per-thread connections are
    opened once, not once per page (SQLite keeps each until the store closes)."""
    store, queue = backends
    descriptors = Path("/proc/self/fd")
    with running(_settings(), store, queue) as console:
        client = Client(console.url)

        def page(_: int) -> int:
            return client.get("/runs/book-0?workflow=booking").status

        with ThreadPoolExecutor(16) as pool:
            assert set(pool.map(page, range(64))) == {200}  # every thread of the console has served
            before = len(list(descriptors.iterdir()))
            assert set(pool.map(page, range(200))) == {200}
        assert len(list(descriptors.iterdir())) <= before + 8  # a thread per page: +400


def test_the_list_filters_by_tags_and_a_request_page_shows_them(tmp_path: Path) -> None:
    """The tags field (``key=value`` pairs, commas between) keeps the requests carrying every one,
    on the list, its JSON and an exact request id; a request's page shows its tags, escaped; a
    tag that is not ``key=value`` is a 400 naming it."""
    store = SqliteStore(str(tmp_path / "s.db"))
    queue = SqliteQueue(str(tmp_path / "q.db"))
    tags = {"ship-eu": {"customer": "c-1", "region": "eu"}, "ship-us": {"customer": "c-1"}, "ship-x": None}
    for request_id, tagged in tags.items():
        submit(shipment(request_id), request_id=request_id, store=store, queue=queue, tags=tagged)
    submit(shipment("odd"), request_id="ship-odd", store=store, queue=queue, tags={"note": "<b>&"})
    data = ConsoleData(_settings(), store, queue, WORKFLOWS)

    def ids(**params: str) -> list[str]:
        listing = data.runs(Filters.parse(params))
        return sorted(str(found["request_id"]) for found in listing["runs"])  # type: ignore[union-attr, index]

    assert ids(tags="customer=c-1") == ["ship-eu", "ship-us"]
    assert ids(tags=" region=eu , customer=c-1 ") == ["ship-eu"]
    assert ids(tags="customer=c-1", id="ship-x") == [] and ids(tags="region=eu", id="ship-eu") == ["ship-eu"]
    assert ids(tags="customer=c-1", id="ship-", match="prefix") == ["ship-eu", "ship-us"]
    assert Filters.parse({"tags": "region=eu,customer=c-1"}).to_json()["tags"] == "customer=c-1,region=eu"
    with pytest.raises(InvalidInputError, match="key=value"):
        Filters.parse({"tags": "customer"})
    with running(_settings(), store, queue) as console:
        client = Client(console.url)
        listed = client.get("/api/runs?tags=customer%3Dc-1").json()
        assert {found["request_id"]: found["tags"] for found in listed["runs"]} == {
            "ship-eu": {"customer": "c-1", "region": "eu"},
            "ship-us": {"customer": "c-1"},
        }
        page = client.get("/?tags=region%3Deu").body
        assert 'name="tags" value="region=eu"' in page and '<span class="tag">region=eu</span>' in page
        assert "ship-us" not in page
        shown = client.get("/runs/ship-odd?workflow=shipment").body
        assert '<dd id="tags"><span class="tag">note=&lt;b&gt;&amp;</span></dd>' in shown
        assert client.get("/api/runs/ship-eu").json()["tags"] == {"customer": "c-1", "region": "eu"}
        bad = client.get("/api/runs?tags=customer")
        assert bad.status == 400 and "a tag is key=value" in bad.json()["error"]
    queue.close()
    store.close()


def test_a_request_page_shows_its_events_and_streams_without_its_code(tmp_path: Path) -> None:
    """Events and streams are read beside the run record: shown (event values redacted) even by a
    console not given the workflow's code."""

    @workflow("console-publisher")
    def publisher(n: int) -> Any:
        yield set_event("payment", {"card": {"number": "4242", "cvc_token": "tok_9"}})
        for i in range(n):
            yield write_stream("progress", i)
        yield close_stream("progress")
        yield write_stream("notes", "left open")

    store = SqliteStore(str(tmp_path / "s.db"))
    run(publisher(3), request_id="pub-1", store=store)
    with running(_settings(), store, None) as console:
        client = Client(console.url)
        shown = client.get("/api/runs/pub-1").json()
        assert shown["events"][0]["key"] == "payment"
        assert shown["events"][0]["value"]["card"]["cvc_token"] == "[redacted]"
        streams = [(s["key"], s["length"], s["closed"]) for s in shown["streams"]]
        assert streams == [("notes", 1, False), ("progress", 3, True)]
        page = client.get("/runs/pub-1?workflow=console-publisher").body
        assert 'id="events"' in page and 'id="streams"' in page
        assert "tok_9" not in page and "closed at step 5" in page and "open" in page


def test_cancel_with_children_reaches_the_requests_it_started(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    queue = SqliteQueue(str(tmp_path / "q.db"))
    store.create_tables("items")
    submit(tour("oslo"), request_id="tour-oslo", store=store, queue=queue)
    Worker(WORKFLOWS, store=store, queue=queue, wait=0.05, relay_every=None).run(idle_timeout=0.5)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with running(_settings(token=TOKEN), store, queue) as console:
        client = Client(console.url, headers=bearer)
        page = client.get("/runs/tour-oslo?workflow=tour").body
        assert 'id="cancel"' in page and 'id="cancel-children"' in page
        assert 'name="children" value="1"' in page  # the second form says so
        refused = client.post_json("/api/runs/tour-oslo/cancel", {"children": "maybe"})
        assert refused.status == 400 and status(store, "tour", "tour-oslo").status is RunStatus.RUNNING
        done = client.post_json("/api/runs/tour-oslo/cancel", {"children": True, "reason": "storm"}).json()
        assert done == {
            "action": "cancel",
            "request_id": "tour-oslo",
            "workflow": "tour",
            "was": "running",
            "done": True,
            "children": True,
        }
        for flow, request_id in [("tour", "tour-oslo"), ("booking", "oslo-seat")]:
            seen = status(store, flow, request_id)
            assert (seen.status, seen.reason) == (RunStatus.CANCELLED, "storm"), request_id


def test_a_fork_is_a_csrf_protected_post_that_opens_the_new_requests_page(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    queue = SqliteQueue(str(tmp_path / "q.db"))
    store.create_tables("items")
    submit(shipment("f"), request_id="forked", store=store, queue=queue)
    Worker(WORKFLOWS, store=store, queue=queue, wait=0.05, relay_every=None).run(idle_timeout=0.5)
    assert status(store, "shipment", "forked").status is RunStatus.FAILED
    with running(_settings(), store, queue) as console:
        browser = Client(console.url)
        page = browser.get("/runs/forked?workflow=shipment")
        assert 'id="fork"' in page.body and 'name="from_step"' in page.body
        form = {"workflow": "shipment", "action_id": page.action_id("fork"), "csrf": page.csrf()}
        fork_form = {**form, "from_step": "2", "new_id": "forked-again"}
        assert browser.post_form("/runs/forked/fork", {**fork_form, "csrf": "forged"}).status == 403
        assert status(store, "shipment", "forked-again").status is RunStatus.UNKNOWN  # nothing happened
        refused = browser.post_form("/runs/forked/fork", {**fork_form, "from_step": "7"})
        assert refused.status == 400 and "cannot fork" in refused.body
        done = browser.post_form(
            "/runs/forked/fork", {**fork_form, "action_id": page.action_id("fork") + "x"}
        )
        assert done.status == 303 and "/runs/forked-again?" in done.headers["Location"]
        assert status(store, "shipment", "forked-again").status is RunStatus.RUNNING  # queued for the workers
        api = browser.get("/api/runs/forked").json()
        assert api["actions"][-1] == "fork"
