"""What every write must leave true: the derived rows as the base rows imply them
(emem.check_derived(), shared by the tests of writes, the soak and the update)."""

from typing import Any

import psycopg


def derived_mismatch(conn: psycopg.Connection) -> list[tuple[Any, ...]]:
    """Each derived row that differs from what the base rows imply: (table, problem, detail)."""
    return conn.execute("select derived, problem, detail from emem.check_derived() order by 1, 2, 3").fetchall()
