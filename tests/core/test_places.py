"""The places a record names (``pl``, ``sn``, ``plm``): kept in first-use order, capped, joined
across writers, read back from rows of any shape without raising."""

from __future__ import annotations

from idemflow.core.places import (
    MAX_PLACE_CHARS,
    MAX_PLACES,
    Places,
    from_journal,
    from_rows,
    join,
    places_ref,
    places_row,
)
from idemflow.keys import RUNS_TABLE
from idemflow.records import RunRecord, RunStatus
from idemflow.stores.base import RowRef


def test_places_keep_first_use_order_and_round_trip_through_a_record() -> None:
    places = Places.of([("b", "2"), ("a", "1"), ("b", "2")], 7)
    assert places is not None and places.at == (("b", "2"), ("a", "1"))
    record = RunRecord("fp", RunStatus.COMPLETED, result=1, places=places)
    assert record.to_json()["pl"] == [["b", "2"], ["a", "1"]] and record.to_json()["sn"] == 7
    assert RunRecord.from_json(record.to_json()) == record
    assert Places.of([], 3) is None  # nothing to name: no field at all


def test_a_request_over_the_caps_names_its_first_places_and_says_so() -> None:
    many = Places.of([("t", f"p{n}") for n in range(MAX_PLACES + 5)], 99)
    assert many is not None and len(many.at) == MAX_PLACES and not many.complete
    assert many.to_fields()["plm"] is True
    assert Places.from_fields(many.to_fields()) == many
    long = Places.of([("t", "x" * 255) for _ in range(1)] + [("t", f"{n}" * 255) for n in range(40)], 1)
    assert long is not None and not long.complete
    assert sum(len(t) + len(p) for t, p in long.at) <= MAX_PLACE_CHARS


def test_writers_places_join_and_bad_fields_read_as_none() -> None:
    first = Places.of([("a", "1")], 2)
    later = Places.of([("a", "1"), ("b", "2")], 5)
    assert join(first, None, later) == later and join(None, None) is None
    assert first is not None and first.joined(Places.of([("c", "3")], 1)).steps == 2
    for bad in ({}, {"pl": "x"}, {"pl": [["a"], [1, 2], "z"]}, {"pl": [["a", "1"]], "sn": "3"}):
        found = Places.from_fields(bad)
        assert found is None or found.steps == 0


def test_writers_read_the_places_from_what_they_hold() -> None:
    journal = [
        ("tablea", "p", "atomic a"),
        ("", "", "uuid4"),
        (RUNS_TABLE, "r", "now"),
        ("tableb", "q", "atomic b"),
    ]
    assert from_journal(journal) == Places((("tablea", "p"), ("tableb", "q")), 4)
    met = [
        RowRef("tableb", "q", "mwf|r|s4"),
        RowRef("tablea", "p", "mwf|r|s1"),
        RowRef(RUNS_TABLE, "r", "mwf|r|s3"),
        RowRef("tablea", "p", "dkey"),  # a data row: no place of a memo
        RowRef("tablea", "p", "mother|r|s9"),  # another workflow's memo
    ]
    assert from_rows(met, "wf", "r") == Places((("tablea", "p"), ("tableb", "q")), 4)
    row = places_row(Places((("t", "p"),), 1), "wf", "r", 10.0)
    assert row.ref == places_ref("wf", "r") == RowRef(RUNS_TABLE, "r", "mwf|r|j") and row.expires_at == 10.0
