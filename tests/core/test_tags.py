"""A request's tags as values: what is accepted, how it is stored, what a run record reads back."""

from __future__ import annotations

from typing import Any

import pytest

from idemflow.core.tags import MAX_TAGS, carries, check_tags, parse_tag, stored_tags, tag_filter
from idemflow.errors import InvalidInputError
from idemflow.records import RunRecord, RunStatus
from idemflow.serialization import encode

BAD_TAGS: list[tuple[Any, str]] = [
    (["customer", "c-1"], "mapping of str to str"),
    ({"": "c-1"}, "tag key ''"),
    ({"cust omer": "c-1"}, "tag key 'cust omer'"),
    ({"kündin": "c-1"}, "ASCII letters"),
    ({"k" * 65: "v"}, "1 to 64"),
    ({1: "c-1"}, "key must be a str"),
    ({"customer": 1}, "must be a str, not int"),
    ({"customer": None}, "must be a str, not NoneType"),
    ({"customer": "x" * 257}, "257 characters"),
    ({"customer": "\ud800"}, "not valid unicode"),
    ({f"k{n}": "v" for n in range(MAX_TAGS + 1)}, "17 tags"),
]
"""Tags refused, and what the refusal says (also used by the tests that check nothing is written)."""


@pytest.mark.parametrize(("tags", "said"), BAD_TAGS, ids=[said for _, said in BAD_TAGS])
def test_bad_tags_are_refused_saying_what_is_wrong(tags: Any, said: str) -> None:
    with pytest.raises(InvalidInputError, match="tags") as refused:
        check_tags(tags)
    assert said in str(refused.value)


def test_good_tags_are_stored_sorted_and_none_for_none() -> None:
    most = {f"k{n:02}": "v" * 256 for n in range(MAX_TAGS)}
    assert list(check_tags(dict(reversed(most.items()))) or {}) == sorted(most)
    assert check_tags({"a.b:c-d_e": ""}) == {"a.b:c-d_e": ""}  # an empty value is a value
    assert check_tags(None) is None and check_tags({}) is None


def test_a_record_without_tags_writes_no_field_and_one_with_tags_reads_them_back() -> None:
    bare = RunRecord("fp", RunStatus.RUNNING, started_at=1.0)
    assert "tg" not in bare.to_json() and RunRecord.from_json(bare.to_json()).tags is None
    tagged = RunRecord("fp", RunStatus.RUNNING, started_at=1.0, tags={"customer": "c-1"})
    done = tagged.finished(RunStatus.COMPLETED, 2.0, result=1)
    assert done.to_json()["tg"] == {"customer": "c-1"}  # the input goes, the tags stay
    assert RunRecord.from_json(done.to_json()) == done
    assert encode(bare.to_json()) == '{"fp":"fp","st":1.0,"status":"running"}'


@pytest.mark.parametrize("held", [["customer"], {"customer": 1}, "c-1", {}])
def test_tags_of_a_form_this_release_does_not_write_read_as_none(held: Any) -> None:
    assert stored_tags(held) is None
    assert RunRecord.from_json({"fp": "x", "status": "running", "tg": held}).tags is None


def test_a_listing_asks_for_every_tag_given() -> None:
    wanted = tag_filter({"region": "eu", "customer": "c-1"})
    assert wanted == (("customer", "c-1"), ("region", "eu"))
    assert carries({"customer": "c-1", "region": "eu", "tier": "gold"}, wanted)
    assert not carries({"customer": "c-1"}, wanted) and not carries(None, wanted)
    assert carries(None, ())
    with pytest.raises(InvalidInputError, match="two values"):
        tag_filter([("customer", "c-1"), ("customer", "c-2")])
    with pytest.raises(InvalidInputError, match="key=value"):
        tag_filter(["customer"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("text", "pair"),
    [("customer=c-1", ("customer", "c-1")), ("q=a=b", ("q", "a=b")), ("empty=", ("empty", ""))],
)
def test_a_tag_on_the_command_line_is_key_equals_value(text: str, pair: tuple[str, str]) -> None:
    assert parse_tag(text) == pair


@pytest.mark.parametrize("text", ["customer", "=c-1", "bad key=v"])
def test_a_tag_that_is_not_key_equals_value_is_refused(text: str) -> None:
    with pytest.raises(InvalidInputError, match="tag"):
        parse_tag(text)
