"""The auction workload: ``samples.auction``'s ``bid`` (``now()``, place the bid if it is in time,
not the seller's, above the minimum and beats the maximum; checkpoint; lead; count) on items
registered by the sample's ``register``, and its hand-written baselines on SQLite, DynamoDB and
Azure Tables (see :mod:`benchmarks.common.workloads`).

Why apart: the auction's baselines are the longest code of the workloads; on their own they read
as one application.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from benchmarks.common.backends import Backend, create_dynamodb_table
from benchmarks.common.counting import Tally, counter_bytes, row_bytes
from benchmarks.common.workload_base import Workload, _dumps, _etag_update, _PerThread
from idemflow import Idem, run
from idemflow.stores import Store
from samples.auction import workflows as auction_sample

ITEMS = 16
BIDDERS = 64
"""Bidders come back (u0..u63), so each item's list of bidders stays short, as in a real auction."""
SELLER = "house"
CLOSES_AT = 4.0e9
MIN_PRICE = 1
EVERYONE = auction_sample.EVERYONE


def _item(i: int) -> str:
    return f"i{i % ITEMS}"


def _bidder(i: int) -> str:
    return f"u{i % BIDDERS}"


def auction_request(i: int) -> Idem[Any]:
    return auction_sample.bid({"item": _item(i), "bidder": _bidder(i), "amount": i + 1})


def auction_prepare(store: Store) -> None:
    run(auction_sample.deposit({"owner": SELLER, "amount": 0}), request_id="open-house", store=store)
    for n in range(ITEMS):
        item: Any = {"id": f"i{n}", "title": "Lot", "seller": SELLER, "min_price": MIN_PRICE}
        item["closes_at"] = CLOSES_AT
        run(auction_sample.register(item), request_id=f"list-i{n}", store=store)


def _terms(item: str) -> dict[str, Any]:
    return {"id": item, "title": "Lot", "seller": SELLER, "min_price": MIN_PRICE, "closes_at": CLOSES_AT}


def _admissible(terms: dict[str, Any], bidder: str, amount: int, t: float) -> None:
    """The sample's refusals other than ``too_low``: closed, the seller's own item, below the minimum."""
    if t >= terms["closes_at"] or bidder == terms["seller"] or amount < terms["min_price"]:
        raise ValueError("refused")


class AuctionSqlite:
    def __init__(self, backend: Backend, tag: str) -> None:
        self.tally = Tally()
        self.db = _PerThread(
            backend,
            tag,
            [
                "CREATE TABLE items (item TEXT PRIMARY KEY, terms TEXT, closed TEXT, max TEXT, "
                "count INTEGER, bidders TEXT)",
                "CREATE TABLE bids (item TEXT, bid TEXT, placed TEXT, PRIMARY KEY (item, bid))",
                "CREATE TABLE winners (item TEXT PRIMARY KEY, amount INTEGER, leader TEXT)",
                "CREATE TABLE popular (item TEXT PRIMARY KEY, n INTEGER)",
            ],
        )
        conn = self.db.conn()
        for n in range(ITEMS):
            conn.execute(
                "INSERT INTO items VALUES (?, ?, NULL, NULL, 0, '[]')", (f"i{n}", _dumps(_terms(f"i{n}")))
            )

    def __call__(self, i: int) -> None:
        conn, item, bidder, amount, t = self.db.conn(), _item(i), _bidder(i), i + 1, time.time()
        conn.execute("BEGIN IMMEDIATE")
        try:
            terms_text, closed, best_text, count, bidders_text = conn.execute(
                "SELECT terms, closed, max, count, bidders FROM items WHERE item = ?", (item,)
            ).fetchone()
            if closed is not None:
                raise ValueError("refused")
            _admissible(json.loads(terms_text), bidder, amount, t)
            best = None if best_text is None else json.loads(best_text)
            if best is not None and amount <= best["amount"]:
                conn.execute("ROLLBACK")
                self.tally.read()
                return
            seq, bid_id, bidders = count + 1, str(uuid.uuid4()), json.loads(bidders_text)
            placed = {"bid": bid_id, "item": item, "bidder": bidder, "amount": amount, "at": t, "seq": seq}
            text = _dumps(placed)
            conn.execute("INSERT INTO bids VALUES (?, ?, ?)", (item, bid_id, text))
            if bidder not in bidders:
                bidders_text = _dumps([*bidders, bidder])
                self.tally.wrote(1, row_bytes(item, "bidders", bidders_text), calls=0)
            conn.execute(
                "UPDATE items SET max = ?, count = ?, bidders = ? WHERE item = ?",
                (text, seq, bidders_text, item),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO winners VALUES (?, ?, ?) ON CONFLICT (item) DO UPDATE "
            "SET amount = excluded.amount, leader = excluded.leader WHERE excluded.amount > winners.amount",
            (item, amount, text),
        )
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO popular VALUES (?, 1) ON CONFLICT (item) DO UPDATE SET n = n + 1", (item,))
        conn.execute("COMMIT")
        self.tally.read()
        self.tally.wrote(
            3,
            row_bytes(item, f"b:{bid_id}", text)
            + row_bytes(item, "max", text)
            + counter_bytes(item, "count"),
        )
        self.tally.wrote(1, row_bytes(item, "leader", text))
        self.tally.wrote(1, counter_bytes(EVERYONE, item))

    def close(self) -> None:
        self.db.close()


class AuctionDynamo:
    """Conditions instead of reads: the bid's update checks the terms, the seller and the maximum."""

    def __init__(self, backend: Backend, tag: str) -> None:
        self.tally = Tally()
        self.client = backend.dynamodb
        self.bids, self.winners, self.popular = f"{tag}pbids", f"{tag}pwinners", f"{tag}ppopular"
        for table in (self.bids, self.winners, self.popular):
            create_dynamodb_table(self.client, table)
        for n in range(ITEMS):
            self.client.put_item(
                TableName=self.bids,
                Item={
                    "pk": {"S": f"i{n}"},
                    "sk": {"S": "item"},
                    "closes_at": {"N": repr(CLOSES_AT)},
                    "min_price": {"N": str(MIN_PRICE)},
                    "seller": {"S": SELLER},
                    "count": {"N": "0"},
                },
            )

    def __call__(self, i: int) -> None:
        from botocore.exceptions import ClientError

        item, bidder, amount, t = _item(i), _bidder(i), i + 1, time.time()
        try:
            old = self.client.update_item(
                TableName=self.bids,
                Key={"pk": {"S": item}, "sk": {"S": "item"}},
                UpdateExpression="SET #max = :a ADD #count :one, bidders :who",
                ConditionExpression="attribute_not_exists(closed) AND closes_at > :t AND min_price <= :a "
                "AND seller <> :b AND (attribute_not_exists(#max) OR #max < :a)",
                ExpressionAttributeNames={"#max": "max", "#count": "count"},
                ExpressionAttributeValues={
                    ":a": {"N": str(amount)},
                    ":t": {"N": repr(t)},
                    ":b": {"S": bidder},
                    ":who": {"SS": [bidder]},
                    ":one": {"N": "1"},
                },
                ReturnValues="UPDATED_OLD",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                self.tally.wrote(0, 0)
                return  # too low (or closed, or the seller's): refused, nothing written
            raise
        before = old.get("Attributes", {})
        seq, bid_id = int(before["count"]["N"]) + 1, str(uuid.uuid4())
        placed = {"bid": bid_id, "item": item, "bidder": bidder, "amount": amount, "at": t, "seq": seq}
        text = _dumps(placed)
        self.client.put_item(
            TableName=self.bids, Item={"pk": {"S": item}, "sk": {"S": f"b:{bid_id}"}, "v": {"S": text}}
        )
        try:
            self.client.update_item(
                TableName=self.winners,
                Key={"pk": {"S": item}, "sk": {"S": "leader"}},
                UpdateExpression="SET amount = :a, v = :v",
                ConditionExpression="attribute_not_exists(amount) OR amount < :a",
                ExpressionAttributeValues={":a": {"N": str(amount)}, ":v": {"S": text}},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
        self.client.update_item(
            TableName=self.popular,
            Key={"pk": {"S": EVERYONE}, "sk": {"S": item}},
            UpdateExpression="ADD n :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        new_bidder = bidder not in before.get("bidders", {}).get("SS", [])
        self.tally.wrote(
            2 + new_bidder,
            row_bytes(item, "max", str(amount))
            + counter_bytes(item, "count")
            + (row_bytes(item, "bidders", bidder) if new_bidder else 0),
        )
        self.tally.wrote(1, row_bytes(item, f"b:{bid_id}", text))
        self.tally.wrote(1, row_bytes(item, "leader", text))
        self.tally.wrote(1, counter_bytes(EVERYONE, item))

    def close(self) -> None:
        """The client belongs to the backend."""


class AuctionAzure:
    def __init__(self, backend: Backend, tag: str) -> None:
        self.tally = Tally()
        service = backend.tables
        self.bids = service.create_table(f"{tag}pbids")
        self.winners = service.create_table(f"{tag}pwinners")
        self.popular = service.create_table(f"{tag}ppopular")
        for n in range(ITEMS):
            terms = _dumps(_terms(f"i{n}"))
            self.bids.create_entity(
                {"PartitionKey": f"i{n}", "RowKey": "item", "terms": terms, "count": 0, "bidders": "[]"}
            )

    def __call__(self, i: int) -> None:
        item, bidder, amount, t = _item(i), _bidder(i), i + 1, time.time()
        placed: dict[str, Any] = {}
        grew: list[str] = []

        def place(entity: dict[str, Any] | None) -> dict[str, Any] | None:
            assert entity is not None
            if entity.get("closed") is not None:
                raise ValueError("refused")
            _admissible(json.loads(entity["terms"]), bidder, amount, t)
            best = entity.get("max")
            if best is not None and amount <= best:
                return None
            placed.clear()
            grew.clear()
            seq, bidders = int(entity["count"]) + 1, json.loads(entity["bidders"])
            placed.update({"item": item, "bidder": bidder, "amount": amount, "at": t, "seq": seq})
            if bidder not in bidders:
                grew.append(_dumps([*bidders, bidder]))
            new = {"terms": entity["terms"], "count": seq, "max": amount}
            return new | {"bidders": grew[0] if grew else entity["bidders"]}

        reads, writes = _etag_update(self.bids, item, "item", place)
        if not placed:
            self.tally.read(reads)
            return
        bid_id = str(uuid.uuid4())
        text = _dumps({"bid": bid_id, **placed})
        # Keyed by the bid id, as the sample: under 32 concurrent users two bids once got the same
        # count on Azurite despite the ETag condition (a duplicate row key).
        self.bids.create_entity({"PartitionKey": item, "RowKey": f"b-{bid_id}", "v": text})

        def lead(entity: dict[str, Any] | None) -> dict[str, Any] | None:
            if entity is not None and entity["amount"] >= amount:
                return None
            return {"amount": amount, "v": text}

        def count(entity: dict[str, Any] | None) -> dict[str, Any]:
            return {"n": (0 if entity is None else int(entity["n"])) + 1}

        for table, partition, row, change in (
            (self.winners, item, "leader", lead),
            (self.popular, EVERYONE, item, count),
        ):
            more_reads, more_writes = _etag_update(table, partition, row, change)
            reads, writes = reads + more_reads, writes + more_writes
        self.tally.read(reads)
        self.tally.wrote(
            5 + bool(grew),
            row_bytes(item, "max", str(amount))
            + counter_bytes(item, "count")
            + (row_bytes(item, "bidders", grew[0]) if grew else 0)
            + row_bytes(item, f"b-{bid_id}", text)
            + row_bytes(item, "leader", text)
            + counter_bytes(EVERYONE, item),
            calls=writes + 1,
        )

    def close(self) -> None:
        """The service belongs to the backend."""


AUCTION_WORKLOAD = Workload(
    "auction",
    auction_sample.TABLES,
    auction_sample.WORKFLOWS,
    auction_prepare,
    auction_request,
    {"sqlite": AuctionSqlite, "moto": AuctionDynamo, "azurite": AuctionAzure},
)
