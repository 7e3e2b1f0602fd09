"""The chaos suite (``python -m idemflow.testing.chaos``): a short run inside the test suite,
and proof that its invariant checks would notice a double count."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from idemflow import MemoryStore, atomic, run
from idemflow.testing import chaos
from idemflow.testing import chaos_workflows as cw


@pytest.mark.slow
def test_a_short_chaos_run_finds_no_anomaly(tmp_path: Path) -> None:
    out = tmp_path / "chaos.md"
    status = chaos.main(
        ["--seconds", "20", "--seed", "7", "--workdir", str(tmp_path / "data"), "--out", str(out)]
    )
    summary = out.read_text()
    assert status == 0, summary
    total = re.search(r"\| \*\*total\*\* \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", summary)
    assert total is not None, summary
    rounds, requests, duplicates, kills, faults, anomalies = map(int, total.groups())
    assert rounds >= 3 and requests > 0 and duplicates > 0 and kills > 0 and faults > 0
    assert anomalies == 0 and "None found." in summary


def test_survey_invariants_notice_a_double_count() -> None:
    store = MemoryStore()
    requests = [(f"r{n}", {"poll": "p", "user": f"u{n}", "answer": "red"}) for n in range(2)]
    for request_id, response in requests:
        run(cw.survey(response), request_id=request_id, store=store)
    assert chaos.survey_invariants(store, requests, final=True) == []
    run(atomic(cw.TALLIES, "p", lambda tx: tx.increment("red")), request_id="extra", store=store)
    while_running = chaos.survey_invariants(store, requests, final=False)
    assert while_running == ["answer 'red' counted 3 times but recorded 2 times"]
    assert any("tallies" in problem for problem in chaos.survey_invariants(store, requests, final=True))


def test_spam_is_compensated() -> None:
    store = MemoryStore()
    outcome = cw.survey({"poll": "p", "user": "s", "answer": cw.SPAM})
    from idemflow.compensation import run_result

    assert run_result(outcome, request_id="s", store=store).failure().reason == "spam"
    assert cw.responses(store, "p") == {} and cw.tallies(store, "p") == {}


def test_the_summary_table_adds_up(tmp_path: Path) -> None:
    totals = [chaos.Totals("a", 1, 10, 15, 2, 3), chaos.Totals("b", 2, 5, 5, 0, 1, ["bad thing"])]
    text = chaos.render(totals, chaos.Options(1.0, 1, tmp_path, None), 1.0)
    assert "| **total** | 3 | 15 | 5 | 2 | 4 | 1 |" in text and "- bad thing" in text
