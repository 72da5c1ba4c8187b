"""Asking emem in the tests: a find's envelope and explain, as the SQL API gives them."""

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from queries import scalar

# A question vector as pgvector's text or as its numbers.
Vector = str | Sequence[float] | None


def vector_text(vector: Vector) -> str | None:
    return vector if vector is None or isinstance(vector, str) else str(list(vector))


def envelope(
    conn: psycopg.Connection,
    question: str,
    vector: Vector = None,
    page: int = 1,
    page_size: int = 30,
    model: str | None = None,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """emem.e_gather_find_envelope: one page of a find, with its totals and how it was found."""
    found: dict[str, Any] = scalar(
        conn,
        "select emem.e_gather_find_envelope(%s, %s::vector, %s, %s, %s, %s)",
        (question, vector_text(vector), page, page_size, model, fingerprint),
    )
    return found


def explain(
    conn: psycopg.Connection, question: str, vector: Vector = None, page: int = 1, page_size: int = 30
) -> dict[str, Any]:
    """emem.e_gather_explain: how a find placed the records of a page."""
    explained: dict[str, Any] = scalar(
        conn, "select emem.e_gather_explain(%s, %s::vector, %s, %s)", (question, vector_text(vector), page, page_size)
    )
    return explained


def record_ids(found: dict[str, Any]) -> list[int]:
    """The records of a page, in their order."""
    return [row["record_id"] for row in found["rows"]]


def with_tuning(conn: psycopg.Connection, **changes: int) -> None:
    """This backend's lookups run with these Tuning fields changed (emem_db.tuning.Tuning)."""
    conn.execute("select emem.analyse_question('x')")  # the backend's state exists from here on
    conn.execute(
        "do $$ import dataclasses, json; state = GD['emem_db'];"
        f" state.tuning = dataclasses.replace(state.tuning, **json.loads({json.dumps(changes)!r})) $$"
        " language plpython3u"
    )
