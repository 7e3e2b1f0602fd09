"""The bank transfer of the paper: workflows, a multi-process crash demo and its checker.

See ``README.md`` beside this file; ``python -m samples.transfer.demo`` runs the demo.
"""

from samples.transfer.workflows import (
    ACCOUNTS,
    CHECKS,
    TRANSFERS,
    OpenRequest,
    Outcome,
    Receipt,
    TransferRequest,
    Verdict,
    balances,
    check,
    missing,
    open_account,
    refunds,
    total_money,
    transfer,
)

__all__ = [
    "ACCOUNTS",
    "CHECKS",
    "TRANSFERS",
    "OpenRequest",
    "Outcome",
    "Receipt",
    "TransferRequest",
    "Verdict",
    "balances",
    "check",
    "missing",
    "open_account",
    "refunds",
    "total_money",
    "transfer",
]
