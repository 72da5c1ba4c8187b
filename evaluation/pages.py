"""What a run of the evaluation keeps of a corpus and of its questions' pages (run.py, misses.py)."""

from dataclasses import dataclass
from typing import Any, cast

import psycopg
from corpus import Question

PAGE_SIZE = 30


@dataclass(frozen=True)
class Loaded:
    """A corpus in its database: each record key's id, and each record's vector (by key)."""

    ids: dict[str, int]
    vectors: dict[str, list[float]]


def recall(found: list[int], gold: set[int], k: int) -> float:
    return len(set(found[:k]) & gold) / len(gold)


@dataclass(frozen=True)
class Answer:
    """One question's page 1 under one configuration, with e_gather_explain's answer when asked for."""

    question: Question
    evidence: frozenset[int]
    page: list[int]
    vector: list[float] | None
    explained: dict[str, Any] | None = None


def explain(
    conn: psycopg.Connection, question: str, vector: list[float] | None, page: int = 1, page_size: int = PAGE_SIZE
) -> dict[str, Any]:
    """e_gather_explain for the owner: per row its placed_by, found_by and rank in every list."""
    row = cast(  # the statement returns one row: psycopg types fetchone() as maybe None
        tuple[Any, ...],
        conn.execute(
            "select emem.e_gather_explain(%s, %s::vector, %s, %s)",
            (question, None if vector is None else str(vector), page, page_size),
        ).fetchone(),
    )
    explained: dict[str, Any] = row[0]
    return explained
