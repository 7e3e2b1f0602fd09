"""The PostgreSQL store's page of run records, newest first, from the partial index on ``started``
(set on run records only, so the index holds nothing else): a page is a seek and ``limit`` steps.

The same keyset as SQLite's (:mod:`idemflow.stores._sqlite_runs`): ``(started, rk, part)``
descending, resumed strictly below the last row of the previous page; the filters on the record's
JSON (status, tags) are applied by the server on the rows the index gives, and checked again by
the caller.
"""

from __future__ import annotations

import json
from typing import Any

from idemflow.keys import RUN
from idemflow.records import OPEN_STATUSES
from idemflow.serialization import decode
from idemflow.stores._postgres_sql import escaped, quoted, unescaped
from idemflow.stores._runs_order import Place
from idemflow.stores.base import Row, RunQuery, RunRow


def page_query(schema: str, query: RunQuery) -> tuple[str, list[Any]]:
    """The SQL and parameters of one page (``part, rk, v, ver, started`` per row)."""
    where: list[str] = ["started IS NOT NULL"]
    params: list[Any] = []
    if query.after is not None:
        below = Place.parse(query.after)
        where.append("(started, rk, part) < (%s, %s, %s)")
        params += [below.started, escaped(below.key), escaped(below.partition)]
    if query.started_by is not None:
        where.append("started <= %s")
        params.append(query.started_by)
    if query.workflow is not None:
        where.append("rk = %s")
        params.append(escaped(RUN + query.workflow))
    if query.status is not None:
        where.append("v::jsonb ->> 'status' = %s")
        params.append(query.status)
    elif query.open_only:
        where.append("v::jsonb ->> 'status' = ANY(%s)")
        params.append(list(OPEN_STATUSES))
    if query.tags:
        where.append("v::jsonb -> 'tg' @> %s::jsonb")
        params.append(json.dumps(dict(query.tags)))
    sql = (
        f"SELECT part, rk, v, ver, started FROM {quoted(schema)}.idemflow_rows "
        f"WHERE {' AND '.join(where)} ORDER BY started DESC, rk DESC, part DESC LIMIT %s"
    )
    return sql, [*params, query.limit]


def page_rows(found: list[tuple[Any, ...]]) -> list[RunRow]:
    """The rows of a page as :class:`RunRow` (with the position to resume after each)."""
    return [
        RunRow(Place(float(at), key, part).position(), part, key, Row(decode(text), version))
        for part, key, text, version, at in ((unescaped(p), unescaped(k), t, v, a) for p, k, t, v, a in found)
    ]


__all__ = ["page_query", "page_rows"]
