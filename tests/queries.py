"""Reading the test database: the one row or the one value a statement selects (a statement that
selects no row is an error here, where psycopg's fetchone() would give None)."""

from typing import Any

import psycopg
from psycopg import sql
from psycopg.abc import Params

# What Connection.execute takes (psycopg's own Query also names template strings, which it takes apart).
Query = str | bytes | sql.SQL | sql.Composed


def row(conn: psycopg.Connection, query: Query, params: Params | None = None) -> tuple[Any, ...]:
    """The first row the statement selects."""
    found = conn.execute(query, params).fetchone()
    if found is None:
        raise LookupError(f"no row: {query!r}")
    return found


def scalar(conn: psycopg.Connection, query: Query, params: Params | None = None) -> Any:
    """The first column of the first row the statement selects."""
    return row(conn, query, params)[0]
