"""The PostgreSQL store's schema and statements, as text: no driver here, so both stores (blocking
and asyncio) and the tests share them, and reading them needs no psycopg.

All logical tables live in one physical table ``idemflow_rows`` keyed by ``(tbl, part, rk)``, in a
schema of the store's choosing (``public`` by default). The key columns are ``COLLATE "C"``: byte
order, which for UTF-8 is the code-point order Python sorts ``str`` by, so a scan comes back in the
order the store protocol promises, and comparisons skip the locale's rules.

Versions come from one sequence, ``idemflow_versions``: every write takes ``nextval``, so no two
writes of the store ever leave the same version, whatever rows they touch, and a row deleted and
created again can never meet a version it had (``docs/decisions.md``). Nothing is read first and
no floor row is shared by every commit (SQLite's floor would serialise writers here).

A condition that fails raises an error from the statement itself (:data:`REFUSED`, SQLSTATE
``IF001``, the operation's index in ``DETAIL``) through the function ``idemflow_refuse``; the
function ``idemflow_commit`` runs a commit's statements (one per operation) and catches it, so a
refusal rolls them all back and comes back as a row (:func:`commit_ddl`), in the one round trip
of the commit. An integer increment that is no small integer raises :data:`GENERAL` instead:
the commit is redone with that row locked and summed in Python
(:mod:`idemflow.stores._postgres_commit`).

Two partial indexes: run records by start time (``started``, set only on run records), for
``runs list``, and rows that expire (``expires``), for the sweeps: PostgreSQL has no TTL, and an
index in expiry order lets a sweep read only rows that are due.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from idemflow.core.row import RowRef

REFUSED = "IF001"
"""SQLSTATE of a failed condition (``DETAIL``: the index of the operation)."""
GENERAL = "IF002"
"""SQLSTATE of an increment the SQL fast path cannot add (not a small integer)."""
RACED = "IF003"
"""SQLSTATE of a row created by another commit between this commit's read and its write."""
PLACEHOLDER = 0
"""The version of a row a ``Check(ABSENT)`` inserts and deletes in its own transaction (the
sequence starts at 1, so no row ever has it)."""


_ESCAPED = re.compile("\x01(.)", re.DOTALL)


def escaped(name: str) -> str:
    """``name`` as a key column holds it: PostgreSQL's text has no NUL, so NUL is written
    ``\\x01\\x01`` and ``\\x01`` itself ``\\x01\\x02``, a code that keeps every name apart and
    keeps their order (scans and keyset pages sort as the names do).

    >>> escaped("a\\x00b"), unescaped(escaped("a\\x00b\\x01")) == "a\\x00b\\x01"
    ('a\\x01\\x01b', True)
    """
    if "\x00" not in name and "\x01" not in name:
        return name
    return name.replace("\x01", "\x01\x02").replace("\x00", "\x01\x01")


def unescaped(held: str) -> str:
    """The name a key column's ``held`` text stands for (:func:`escaped` undone)."""
    if "\x01" not in held:
        return held
    return _ESCAPED.sub(lambda found: "\x00" if found[1] == "\x01" else "\x01", held)


def key_of(ref: RowRef) -> tuple[str, str, str]:
    """A row's key columns (``tbl, part, rk``) as the table holds them."""
    return (escaped(ref.table), escaped(ref.partition), escaped(ref.key))


def ref_of(tbl: str, part: str, rk: str) -> RowRef:
    """The row a table's key columns name."""
    return RowRef(unescaped(tbl), unescaped(part), unescaped(rk))


def quoted(name: str) -> str:
    """``name`` as a PostgreSQL identifier (any text: the quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


def schema_ddl(schema: str) -> list[str]:
    """The statements making the store's objects in ``schema`` (each a no-op when done)."""
    s = quoted(schema)
    return [
        f"CREATE SCHEMA IF NOT EXISTS {s}",
        f"""CREATE TABLE IF NOT EXISTS {s}.idemflow_rows (
            tbl text COLLATE "C" NOT NULL,
            part text COLLATE "C" NOT NULL,
            rk text COLLATE "C" NOT NULL,
            v text NOT NULL,
            ver bigint NOT NULL,
            expires double precision,
            started double precision,
            PRIMARY KEY (tbl, part, rk)
        )""",
        f"CREATE SEQUENCE IF NOT EXISTS {s}.idemflow_versions AS bigint",
        f"CREATE INDEX IF NOT EXISTS idemflow_runs_by_start ON {s}.idemflow_rows (started, rk, part) "
        "WHERE started IS NOT NULL",
        f"CREATE INDEX IF NOT EXISTS idemflow_by_expiry ON {s}.idemflow_rows (expires, tbl, part, rk) "
        "WHERE expires IS NOT NULL",
        f"""CREATE OR REPLACE FUNCTION {s}.idemflow_refuse(op integer, state text) RETURNS integer
            LANGUAGE plpgsql VOLATILE AS $$
            BEGIN
                RAISE EXCEPTION 'idemflow: condition of operation % not met', op
                    USING ERRCODE = state, DETAIL = op::text;
            END $$""",
        commit_ddl(schema),
    ]


COMMIT_SIGNATURE = "idemflow_commit(text[], text[], text[], text[])"
"""The commit function's name and argument types (``to_regprocedure`` finds it by them)."""


@functools.lru_cache(maxsize=256)
def commit_call(prefix: str, statements: int, keys: int) -> str:
    """The call of the commit function (``prefix``: :attr:`Sql.commit`) with ``statements``
    statements and ``keys`` insert keys as parameters: each a text literal of its own in an
    ``ARRAY[...]``, so a statement's text is quoted once, with no array-literal escaping."""

    def array(n: int) -> str:
        return "ARRAY[" + ", ".join(["%s"] * n) + "]::text[]"

    return f"{prefix}{array(statements)}, {array(keys)}, {array(keys)}, {array(keys)})"


def commit_ddl(schema: str) -> str:
    """The function a commit's statements run in: each statement (bound already) in turn, in one
    subtransaction. A refusal of the store's own (:data:`REFUSED`, :data:`GENERAL`,
    :data:`RACED`) is caught, which rolls the statements back, and returned as a row with the
    operation's index, with the rows found then at the keys given (a commit's inserts: what a
    duplicate or a lost answer meets). So a condition not met is an answer, not an error: the
    server logs nothing (an error would log its statement, values and all), and the commit and
    the read of what it met are one round trip. No row: every statement ran."""
    s = quoted(schema)
    return f"""CREATE OR REPLACE FUNCTION {s}.idemflow_commit(
            statements text[], tbls text[], parts text[], rks text[])
        RETURNS TABLE(refused integer, state text, at bigint, v text, ver bigint)
        LANGUAGE plpgsql VOLATILE AS $$
        #variable_conflict use_column
        DECLARE
            statement text;
            failed text;
            detail text;
        BEGIN
            BEGIN
                FOREACH statement IN ARRAY statements LOOP
                    EXECUTE statement;
                END LOOP;
                RETURN;
            EXCEPTION WHEN SQLSTATE '{REFUSED}' OR SQLSTATE '{GENERAL}' OR SQLSTATE '{RACED}' THEN
                GET STACKED DIAGNOSTICS failed = RETURNED_SQLSTATE, detail = PG_EXCEPTION_DETAIL;
            END;
            IF failed = '{REFUSED}' AND cardinality(tbls) > 0 THEN
                RETURN QUERY SELECT detail::integer, failed, r.i, t.v, t.ver
                    FROM unnest(tbls, parts, rks) WITH ORDINALITY AS r(tbl, part, rk, i)
                    JOIN {s}.idemflow_rows t ON t.tbl = r.tbl AND t.part = r.part AND t.rk = r.rk;
                IF FOUND THEN
                    RETURN;
                END IF;
            END IF;
            RETURN QUERY SELECT detail::integer, failed, NULL::bigint, NULL::text, NULL::bigint;
        END $$"""


@dataclass(frozen=True, slots=True)
class Sql:
    """Every statement of a store on ``schema``, formatted once (psycopg prepares each text it
    sees often, so a store's statements stay the same strings)."""

    schema: str
    schema_table: str
    read: str
    read_many: str
    insert: str
    upsert: str
    update: str
    update_blind: str
    delete: str
    delete_at: str
    check_at: str
    hold_absent: str
    release_absent: str
    increment_small: str
    lock_row: str
    commit: str
    insert_new: str
    expired_after: str
    expired_all: str
    scan_table: str
    scan_partition: str
    tables: str

    @classmethod
    def on(cls, schema: str) -> Sql:
        t = f"{quoted(schema)}.idemflow_rows"
        ver = f"nextval('{quoted(schema)}.idemflow_versions')"
        refuse = f"{quoted(schema)}.idemflow_refuse"
        key = "tbl = %s AND part = %s AND rk = %s"
        columns = f"{t} (tbl, part, rk, v, ver, expires, started)"

        def unless(cte: str, state: str = REFUSED) -> str:
            refused = f"SELECT {refuse}(%s, '{state}') WHERE NOT EXISTS (SELECT FROM w)"
            return f"WITH w AS ({cte} RETURNING 1) {refused}"

        return cls(
            schema=schema,
            schema_table=t,
            read=f"SELECT v, ver FROM {t} WHERE {key}",
            read_many=(
                f"SELECT r.i, t.v, t.ver FROM unnest(%s::text[], %s::text[], %s::text[]) "
                f"WITH ORDINALITY AS r(tbl, part, rk, i) JOIN {t} t "
                "ON t.tbl = r.tbl AND t.part = r.part AND t.rk = r.rk"
            ),
            insert=unless(
                f"INSERT INTO {columns} VALUES (%s, %s, %s, %s, {ver}, %s, %s) ON CONFLICT DO NOTHING"
            ),
            # A blind write leaves ``started`` as the claim wrote it (a completion record).
            upsert=(
                f"INSERT INTO {columns} VALUES (%s, %s, %s, %s, {ver}, %s, %s) ON CONFLICT (tbl, part, rk) "
                "DO UPDATE SET v = EXCLUDED.v, ver = EXCLUDED.ver, expires = EXCLUDED.expires"
            ),
            update=unless(
                f"UPDATE {t} SET v = %s, ver = {ver}, expires = %s, started = %s WHERE {key} AND ver = %s"
            ),
            update_blind=f"UPDATE {t} SET v = %s, ver = {ver}, expires = NULL WHERE {key}",
            delete=f"DELETE FROM {t} WHERE {key}",
            delete_at=unless(f"DELETE FROM {t} WHERE {key} AND ver = %s"),
            check_at=(
                f"WITH w AS (SELECT 1 FROM {t} WHERE {key} AND ver = %s FOR SHARE) "
                f"SELECT {refuse}(%s, '{REFUSED}') WHERE NOT EXISTS (SELECT FROM w)"
            ),
            # Check(ABSENT): a row of our own holds the key (a concurrent insert waits on it until
            # this commit ends), deleted at once, so nobody ever reads it.
            hold_absent=unless(
                f"INSERT INTO {columns} VALUES (%s, %s, %s, 'null', {PLACEHOLDER}, NULL, NULL) "
                "ON CONFLICT DO NOTHING"
            ),
            release_absent=f"DELETE FROM {t} WHERE {key} AND ver = {PLACEHOLDER}",
            # At most 15 digits (and the delta below 2**53): the sum cannot overflow a bigint.
            increment_small=unless(
                f"INSERT INTO {columns} VALUES (%s, %s, %s, %s, {ver}, NULL, NULL) "
                "ON CONFLICT (tbl, part, rk) DO UPDATE SET v = (idemflow_rows.v::bigint + %s::bigint)::text, "
                "ver = EXCLUDED.ver, expires = NULL WHERE idemflow_rows.v ~ '^-?[0-9]{1,15}$'",
                GENERAL,
            ),
            lock_row=f"SELECT v FROM {t} WHERE {key} FOR UPDATE",
            commit=f"SELECT refused, state, at, v, ver FROM {quoted(schema)}.idemflow_commit(",
            insert_new=unless(
                f"INSERT INTO {columns} VALUES (%s, %s, %s, %s, {ver}, NULL, NULL) ON CONFLICT DO NOTHING",
                RACED,
            ),
            expired_after=(
                f"SELECT tbl, part, rk, ver, expires, v FROM {t} WHERE expires IS NOT NULL AND expires < %s "
                "AND (expires, tbl, part, rk) > (%s, %s, %s, %s) ORDER BY expires, tbl, part, rk LIMIT %s"
            ),
            expired_all=(
                f"SELECT tbl, part, rk, expires FROM {t} WHERE expires IS NOT NULL AND expires < %s "
                "ORDER BY tbl, part, rk"
            ),
            scan_table=f"SELECT part, rk, v, ver FROM {t} WHERE tbl = %s ORDER BY part, rk",
            scan_partition=f"SELECT part, rk, v, ver FROM {t} WHERE tbl = %s AND part = %s ORDER BY rk",
            tables=f"SELECT DISTINCT tbl FROM {t} ORDER BY tbl",
        )


__all__ = [
    "COMMIT_SIGNATURE",
    "GENERAL",
    "PLACEHOLDER",
    "RACED",
    "REFUSED",
    "Sql",
    "commit_call",
    "commit_ddl",
    "escaped",
    "key_of",
    "quoted",
    "ref_of",
    "schema_ddl",
    "unescaped",
]
