"""``python -m samples.transfer serve|load|check|demo``: run the bank's API, throw load at it, verify.

    python -m samples.transfer serve --store sqlite:bank.db [--queue sqlite:queue.db] [--port 8000]
    python -m samples.transfer load  --url http://127.0.0.1:8000     (or --store URL [--queue URL])
    python -m samples.transfer check --store sqlite:bank.db
    python -m samples.transfer demo                   # all of it, with SIGKILLed processes

``load`` opens ``--accounts`` accounts and sends ``--transfers`` transfers
from ``--users`` concurrent users, every request 2-4 times under the same
request id (duplicate retries, some racing each other); some go to accounts
that do not exist (refused, or with a queue refunded by a worker after the
debit), some overdraw, some have a bad amount. It then verifies what the
clients saw: every copy of a request got the same answer, and every balance
is its opening balance with exactly the transfers its clients saw completed.
``check`` verifies the tables alone (:func:`~samples.transfer.workflows.ledger`)
and exits 1 on any violation. ``python -m samples.transfer.demo`` is the other
demo: worker processes calling ``run`` directly, SIGKILLed mid-commit.
"""

from __future__ import annotations

import argparse
import functools
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from samples import _harness as harness
from samples._api import Answer, Direct, answer_of
from samples.transfer import workflows
from samples.transfer.api import TransferService, create_app, refusal

# -- the transfer load ------------------------------------------------------------------------


class BankApi(Protocol):
    """What the load calls: :class:`BankHttp`, or :class:`BankDirect` (no HTTP)."""

    def open_account(self, key: str, body: object) -> Answer: ...
    def transfer(self, key: str, body: object) -> Answer: ...
    def transfer_status(self, request_id: str) -> Answer: ...
    def account(self, name: str) -> Answer: ...


class BankHttp:
    """:class:`BankApi` over HTTP."""

    def __init__(self, client: harness.HttpClient) -> None:
        self.client = client

    def open_account(self, key: str, body: object) -> Answer:
        return self.client.request("POST", "/accounts", key=key, body=body)

    def transfer(self, key: str, body: object) -> Answer:
        return self.client.request("POST", "/transfers", key=key, body=body)

    def transfer_status(self, request_id: str) -> Answer:
        return self.client.request("GET", f"/transfers/{request_id}")

    def account(self, name: str) -> Answer:
        return self.client.request("GET", f"/accounts/{name}")


class BankDirect:
    """:class:`BankApi` without HTTP: :class:`~samples.transfer.api.TransferService`'s methods,
    awaited on the event loop of a :class:`~samples._api.Direct`."""

    def __init__(self, call: Direct[TransferService]) -> None:
        self.call, self.service = call, call.service

    def open_account(self, key: str, body: object) -> Answer:
        return self.call(self.service.open_account, key, body)

    def transfer(self, key: str, body: object) -> Answer:
        return self.call(self.service.transfer, key, body)

    def transfer_status(self, request_id: str) -> Answer:
        return self.call(self.service.transfer_status, request_id)

    def account(self, name: str) -> Answer:
        return self.call(self.service.account, name)


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """Sizes of one load. Ids derive from ``seed``: re-running a load is one big duplicate."""

    users: int = 8
    transfers: int = 200
    accounts: int = 6
    balance: int = 1000
    seed: int = 0
    wait: float = 60.0
    """Asynchronous variant: how long to wait for the workers to finish everything."""


@dataclass
class LoadReport(harness.LoadReport[LoadSettings]):
    """What the clients saw; ``problems`` is empty when their answers were consistent."""

    outcomes: Counter[str] = field(default_factory=Counter)

    def lines(self) -> list[str]:
        s = self.settings
        refused = {code: n for code, n in sorted(self.outcomes.items()) if code != "completed"}
        detail = ", ".join(f"{n} {code}" for code, n in refused.items())
        return [
            f"  load      {s.transfers} transfers between {s.accounts} accounts sent {self.sent} times by "
            f"{s.users} users ({self.sent - s.transfers} duplicates)",
            f"  outcome   {self.outcomes['completed']} completed, {sum(refused.values())} refused"
            + (f" ({detail})" if detail else ""),
            f"  [{'FAIL' if self.problems else ' ok '}] answers: every copy of a request got the same "
            "answer; every balance holds exactly the transfers its clients saw completed",
        ]


def account_names(settings: LoadSettings) -> list[str]:
    return [f"load{settings.seed}-a{n}" for n in range(settings.accounts)]


def transfer_plan(settings: LoadSettings, rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """``(request id, body)``: one in 11 to an account nobody opened, one in 17 with amount 0."""
    names = account_names(settings)
    plan: list[tuple[str, dict[str, Any]]] = []
    for n in range(settings.transfers):
        src, dst = rng.sample(names, 2)
        if n % 11 == 4:
            dst = f"load{settings.seed}-nobody{n}"
        amount = 0 if n % 17 == 9 else rng.randint(1, max(1, settings.balance // 2))
        plan.append((f"load{settings.seed}-t{n}", {"src": src, "dst": dst, "amount": amount}))
    return plan


def run_load(api: BankApi, settings: LoadSettings) -> LoadReport:
    """Open the accounts, send the transfers with duplicates, verify what the clients saw.

    Transfers answered ``202`` (the asynchronous variant) are first waited
    for, up to ``settings.wait`` seconds, until the workers finished them all;
    one that aborted after its debit (no such destination) ends as that refusal.
    """
    rng = random.Random(settings.seed)
    report = LoadReport(settings)
    names = account_names(settings)
    opens: list[tuple[str, harness.Send]] = []
    for name in names:
        opening = {"account": name, "balance": settings.balance}
        opens.append((f"open-{name}", functools.partial(api.open_account, f"open-{name}", opening)))
    opened = harness.send_all(
        opens,
        users=settings.users,
        rng=rng,
        label="accounts",
    )
    report.problems += [f"opening {key}: {got[0]}" for key, got in opened.items() if got[0].status != 201]
    plan = transfer_plan(settings, rng)
    sends = {key: functools.partial(api.transfer, key, body) for key, body in plan}
    answers = harness.send_all(list(sends.items()), users=settings.users, rng=rng, label="transfers")
    report.sent = sum(map(len, answers.values()))
    report.problems += harness.settle(
        answers,
        sends,
        api.transfer_status,
        done=200,
        wait=settings.wait,
        what="transfer",
        aborted=lambda found: answer_of(refusal(found.get("reason"))),
    )
    report.problems += harness.disagreements(answers)
    expected = dict.fromkeys(names, settings.balance)
    for key, body in plan:
        first = answers[key][0]
        if first.status == 200:
            report.outcomes["completed"] += 1
            expected[body["src"]] -= body["amount"]
            expected[body["dst"]] += body["amount"]
        else:
            report.outcomes[str(first.body.get("error"))] += 1
    for name in names:
        found = api.account(name)
        balance = found.body.get("balance") if found.status == 200 else found
        if balance != expected[name]:
            report.problems.append(
                f"account {name!r}: balance {balance}, but the transfers its clients saw completed "
                f"give {expected[name]}"
            )
    return report


# -- the demo: load through API servers and workers that get SIGKILLed ---------------------------


@dataclass(frozen=True, slots=True)
class DemoSettings(harness.FleetSettings):
    """One transfer demo: the processes (:class:`~samples._harness.FleetSettings`) and the load."""

    load: LoadSettings = LoadSettings(transfers=300)


class DemoReport(harness.DemoReport[DemoSettings, LoadReport, workflows.Ledger]):
    def render(self) -> str:
        s = self.settings
        return self.text(
            f"idemflow transfer demo: {self.store}, seed {s.load.seed}",
            f"{s.servers} API servers (asynchronous: answer once debited) and {s.workers} "
            "`idemflow worker` processes crediting or refunding",
            2,
            "every transfer applied exactly once, money conserved",
        )


def run_demo(settings: DemoSettings) -> DemoReport:
    """Servers and workers on one store and queue, SIGKILLed during a load; then the ledger check."""
    found = harness.run_demo(
        settings,
        "transfer",
        workflows.TABLES,
        workflows.ledger,
        total=2 * settings.load.transfers,
        seed=settings.load.seed,
        load=lambda client: run_load(BankHttp(client), settings.load),
    )
    return DemoReport(settings, *found)


# -- commands -----------------------------------------------------------------------------------


def _load(args: argparse.Namespace, api: BankApi) -> LoadReport:
    return run_load(
        api, LoadSettings(args.users, args.transfers, args.accounts, args.balance, args.seed, args.wait)
    )


def _demo(args: argparse.Namespace) -> int:
    load = LoadSettings(transfers=args.transfers, seed=harness.demo_seed(args))
    print(f"transfer demo: {args.transfers} transfers, duplicates, {args.kills} SIGKILLs ...", flush=True)
    result = run_demo(DemoSettings(data=args.data, kills=args.kills, workers=args.workers, load=load))
    print(result.render())
    return 0 if result.ok else 1


SAMPLE = harness.Sample[BankApi](
    "transfer",
    workflows.TABLES,
    app=lambda store, queue: create_app(TransferService(store, queue)),
    service=TransferService,
    check=workflows.ledger,
    http=BankHttp,
    direct=BankDirect,
    load=_load,
    demo=_demo,
    help={
        "queue": "queue URL: answer once debited, workers credit or refund (async variant)",
        "load": "simulate concurrent clients sending transfers, with duplicates",
        "check": "verify money is conserved and every balance matches the audit log; exit 1 if not",
        "demo": "load with SIGKILLed servers and workers, then check (SQLite)",
    },
    load_sizes=[
        ("--transfers", int, 200, "distinct transfers"),
        ("--accounts", int, 6, "accounts"),
        ("--balance", int, 1000, "opening balance of each account"),
    ],
    demo_sizes=[("--transfers", int, 300, "distinct transfers")],
)
main = SAMPLE.main


__all__ = [
    "BankApi",
    "BankDirect",
    "BankHttp",
    "DemoReport",
    "DemoSettings",
    "LoadReport",
    "LoadSettings",
    "main",
    "run_demo",
    "run_load",
]
