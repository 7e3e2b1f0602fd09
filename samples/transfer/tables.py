"""The bank's two tables and the shapes of what goes in and out of a transfer.

:mod:`samples.transfer.workflows` (the steps) and :mod:`samples.transfer.checks` (reading and
verifying the tables) both build on these; the checks never import the steps.
"""

from __future__ import annotations

from typing import TypedDict

from returns.result import Result

from idemflow import WorkflowAborted

ACCOUNTS = "accounts"
"""One partition per account: ``balance``, ``opened`` (the opening balance), and ``refunds``
once a debit was undone."""
TRANSFERS = "transfers"
"""Audit trail: partition = source account, key = transfer id, value = the transfer."""
TABLES = (ACCOUNTS, TRANSFERS)


class OpenRequest(TypedDict):
    """Input of :func:`~samples.transfer.workflows.open_account`."""

    account: str
    balance: int


class TransferRequest(TypedDict):
    """Input of :func:`~samples.transfer.workflows.transfer` (the request id travels beside it, in
    ``run``)."""

    src: str
    dst: str
    amount: int


class Receipt(TypedDict):
    """Result of a completed :func:`~samples.transfer.workflows.transfer`."""

    transfer: str
    """Key of the audit row in ``transfers/<src>``."""
    left: int
    """Source balance right after the debit."""


Outcome = Result[Receipt, WorkflowAborted]
"""What :func:`idemflow.run_result` gives for one transfer request."""


def missing(account: str) -> str:
    """The abort reason for an account that was never opened."""
    return f"no such account: {account}"


__all__ = [
    "ACCOUNTS",
    "TABLES",
    "TRANSFERS",
    "OpenRequest",
    "Outcome",
    "Receipt",
    "TransferRequest",
    "missing",
]
