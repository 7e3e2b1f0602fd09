"""The reading workload of the chaos suite (:mod:`samples.chaos.reading`): its checks pass a round run
under ``run`` and notice an event that goes back, a stream value read twice, an ``all_of`` call made
twice, a sleep that won against a message sent in time (or a message that won, sent after the
sleep ended), and a child left running under a cancelled request (or a request cancelled by no
one)."""

from __future__ import annotations

import random
import socket
import time
from typing import Any

from idemflow import run
from idemflow.admin import cancel
from idemflow.client import get_event, read_stream, send_message, status, submit
from idemflow.stores import MemoryStore, Store
from idemflow.worker import MemoryQueue
from samples.chaos import reading_checks as checks
from samples.chaos import reading_flows as flows
from samples.chaos.reading_provider import Provider


def _job(rid: str, values: int, *, kid: bool, nudged: bool) -> flows.JobRequest:
    req = flows.job_request(rid, values=values, mark=len(rid), kid=kid, nudged=nudged, quick=True)
    return {**req, "patience": 0.2}  # the any_of's sleep: short, under run


def _round(store: Store, provider: Provider) -> tuple[list[flows.JobRequest], checks.Seen]:
    """Two jobs run under ``run`` against the provider over HTTP, as the workers call it: one with
    a kid and a nudge sent before it started (the nudge wins), one without either (the sleep
    wins); then read as the readers read them."""
    jobs = [_job("j1", 3, kid=True, nudged=True), _job("j2", 2, kid=False, nudged=False)]
    seen = checks.Seen()
    with provider.serve() as url:
        flows.use_provider(url)
        try:
            send_message(store, flows.JOB, "j1", flows.NUDGE, flows.nudge_of("j1"), key="j1.nudge")
            seen.nudged["j1"] = time.time()
            for req in jobs:
                run(flows.job(req), request_id=req["id"], store=store)
        finally:
            flows.use_provider(None)
    for req in jobs:
        rid = req["id"]
        seen.saw_event(rid, get_event(store, flows.JOB, rid, flows.STAGE, timeout=0))
        for value in read_stream(store, flows.JOB, rid, flows.TOKENS, timeout=0):
            seen.saw_token(rid, value)
        seen.ended.add(rid)
    return jobs, seen


def test_the_reading_checks_pass_a_round_and_notice_what_must_never_happen() -> None:
    store, provider = MemoryStore(), Provider(random.Random(1), transient=0.0, lost=0.0, slow=0.0)
    jobs, seen = _round(store, provider)
    results: dict[str, Any] = {req["id"]: status(store, flows.JOB, req["id"]).result for req in jobs}
    assert [results["j1"]["took"], results["j2"]["took"]] == [0, 1]
    assert checks.sleep_due(store, "j1") is None  # the nudge was there: the sleep never began
    assert results["j1"]["kid"] == {"kid of": "j1", "go": "go"}
    verdict = checks.check_round(store, jobs, seen, provider.books())
    assert verdict.problems == [] and verdict.ends == {"completed": 2}
    assert (verdict.nudges_won, verdict.sleeps_won) == (1, 1)
    assert checks.invariants(provider, jobs)(store) == []

    first = provider.books().keys_of()["j1", "a"][0]
    provider.call({"key": "again", "request": "j1", "branch": "a"}, 0)  # branch a made a second time
    seen.saw_event("j2", flows.stages(jobs[1])[0])  # after its last stage
    seen.saw_token("j2", flows.token(jobs[1], 1))  # a value read twice
    seen.nudged["j2"] = results["j2"]["from"]  # a nudge sent as the sleep began: it had to win
    early = (checks.sleep_due(store, "j2") or 0.0) - results["j2"]["from"]
    seen.saw_event("j1.kid", "j9.kid 1 released #2")  # another's kid's
    problems = checks.check_round(store, jobs, seen, provider.books()).problems
    assert problems == [
        "j2: event went back from stage 5 to stage 0",
        f"j1: quote a made 2 times (keys [{first!r}, 'again'])",
        "j1.kid: the reader read 'j9.kid 1 released #2', no stage of it",
        "j2: completed, its reader's last read ['j2 0 started #2'], not 'j2 5 done #2'",
        "j2: stream read ['j2:0/2', 'j2:1/2', 'j2:1/2'], the job writes ['j2:0/2', 'j2:1/2']",
        "j2: the reader read 3 of 2 values",
        "j2: the reader read ['j2:0/2', 'j2:1/2', 'j2:1/2'], the store holds ['j2:0/2', 'j2:1/2']",
        f"j2: the sleep won, though the nudge was sent {early:.2f} s before it ended",
    ]
    assert checks.invariants(provider, jobs)(store) == [problems[1]]  # the books: what the monitor sees


def test_the_reading_checks_notice_a_child_left_running_under_a_cancelled_request() -> None:
    """A job cancelled without ``children=True`` leaves its kid running; a job cancelled by no one
    of the plan is reported too; a cancelled job's handle raises and its stream may be partial."""
    store, queue = MemoryStore(), MemoryQueue()
    jobs = [_job("j3", 4, kid=True, nudged=False), _job("j4", 2, kid=False, nudged=False)]
    submit(flows.kid({"parent": "j3", "mark": 2}), request_id="j3.kid", store=store, queue=queue)
    for req in jobs:
        submit(flows.job(req), request_id=req["id"], store=store, queue=queue)
        cancel(store, flows.JOB, req["id"])
    seen = checks.Seen(cancelled={"j3": "running"})
    problems = checks.check_round(store, jobs, seen, Provider(random.Random(1)).books()).problems
    assert problems == ["j3.kid: running under a cancelled job", "j4: cancelled, but no one cancelled it"]
    cancel(store, flows.KID, "j3.kid")
    seen.cancelled["j4"] = "running"
    verdict = checks.check_round(store, jobs, seen, Provider(random.Random(1)).books())
    assert (verdict.problems, verdict.ends, verdict.kids_cancelled) == ([], {"cancelled": 2}, 1)


def test_the_provider_drops_a_call_cut_short_by_its_callers_death() -> None:
    """A worker SIGKILLed while one of its ``all_of`` branches was being sent leaves a body shorter
    than its ``Content-Length``: nothing is recorded (once, it was booked as a quote of no job)."""
    provider = Provider(random.Random(1), transient=0.0, lost=0.0, slow=0.0)
    with provider.serve() as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as cut:
            cut.sendall(b"POST /quote HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")  # then it died
            cut.shutdown(socket.SHUT_WR)
            assert cut.recv(100) == b""  # no answer
        flows.use_provider(url)
        try:
            assert flows.quote(_job("j5", 1, kid=False, nudged=False), "a")("k5")["quote"] == 1
        finally:
            flows.use_provider(None)
    assert sorted(provider.books().made) == ["k5"]
