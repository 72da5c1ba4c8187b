"""A small fake of PL/Python's `plpy` and a Reader over it, for the in-database modules outside
the server: the modules take plpy as an argument, so a unit test can give them this one and see
every statement they would run. A statement's rows come from the test's `answer` (none by default)."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from emem_db.analysis import QuestionAnalysis
from emem_db.entry import Backend
from emem_db.reader import Reader, Request, Space

Rows = list[dict[str, Any]]


class FakePlpyError(Exception):
    """What plpy.error raises here: the message and the fields (sqlstate, hint)."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.fields = fields


@dataclass(frozen=True)
class FakePlan:
    sql: str
    types: tuple[str, ...]


@dataclass
class FakePlpy:
    """Quotes as PostgreSQL does, records each statement it is asked to run, answers with `answer`."""

    answer: Callable[[str, Sequence[Any]], Rows] = lambda sql, args: []
    ran: list[tuple[str, Sequence[Any]]] = field(default_factory=list)

    def error(self, message: str, **fields: Any) -> None:
        raise FakePlpyError(message, **fields)

    @staticmethod
    def quote_literal(value: str) -> str:
        return "'" + value.replace("'", "''") + "'"

    def prepare(self, sql: str, types: Sequence[str]) -> FakePlan:
        return FakePlan(sql, tuple(types))

    def execute(self, plan: FakePlan, args: Sequence[Any] = ()) -> Rows:
        self.ran.append((plan.sql, args))
        return self.answer(plan.sql, args)


NO_QUESTION = QuestionAnalysis(terms=(), known_words=(), unknown_terms=())


def reader(
    plpy: FakePlpy | None = None,
    vector: str | None = None,
    reach: int = 30,
    lanes: tuple[str, ...] | None = None,
) -> Reader:
    """A Reader of one request over the fake: degraded unless there is a vector (then a space of 4
    dimensions), every lane unless `lanes` (strict isolation)."""
    request = Request(
        question="q",
        vector=vector,
        analysis=NO_QUESTION,
        weights={},
        space=Space(1, 4, "m") if vector is not None else None,
        candidate_counts={},
        lanes=lanes,
    )
    return Reader(Backend(plpy or FakePlpy()), request, reach)
