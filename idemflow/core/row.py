"""What a row is, below every layer that reads or writes one: its address and its value as read.

Why a module of its own: the row format (:mod:`idemflow.records`) names rows, and the stores
(:mod:`idemflow.stores.base`) read and write them; both import these two classes from here, so
the row format never imports the store layer above it.
"""

from __future__ import annotations

from dataclasses import dataclass

from idemflow.serialization import JSON

Version = int | str
"""An opaque row version: a counter (SQLite, memory, DynamoDB) or an ETag (Azure)."""


@dataclass(frozen=True, slots=True)
class RowRef:
    """Where a row lives: logical table name, partition and encoded row key.

    The store maps the logical table to its backend table (adding its prefix).
    """

    table: str
    partition: str
    key: str


@dataclass(frozen=True, slots=True)
class Row:
    """A row as read: its decoded JSON value and the version to condition on."""

    value: JSON
    version: Version


__all__ = ["Row", "RowRef", "Version"]
