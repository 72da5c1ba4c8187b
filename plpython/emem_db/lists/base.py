"""The protocol every candidate list implements, and what the totals count of a list."""

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from emem_db.merge import Candidate

# SQL text that holds for a record, given the SQL of the record's id.
Predicate = Callable[[str], str]


@dataclass(frozen=True)
class Match:
    """A set of records given as SQL, so that several combine in one statement: a predicate over a
    record-id expression, a query of their ids (less `known_ids`, already at hand), a statement
    that counts them (its one column `n`), and optionally a query of their ids in record-id order
    that an index answers (for the degraded order)."""

    holds: Predicate
    ids_sql: str
    count_sql: str
    count_types: tuple[str, ...] = ()
    count_args: tuple = ()
    known_ids: Sequence[int] = ()
    ids_in_order_sql: str | None = None


@dataclass(frozen=True)
class Counting:
    """What the totals count of a list: records at hand, and a match counted in SQL (or none)."""

    known_ids: Iterable[int]
    match: Match | None = None


class CandidateList(ABC):
    """One lookup's candidates, in the list's order."""

    @abstractmethod
    def __getitem__(self, index: int) -> Candidate:
        """The candidate at this position (from 0), read as far as needed; IndexError past the end."""

    @abstractmethod
    def read(self) -> Sequence[Candidate]:
        """The candidates read so far, in order."""

    @abstractmethod
    def size(self) -> int:
        """How many candidates the whole list holds."""

    @abstractmethod
    def members(self, record_ids: Iterable[int]) -> set[int]:
        """Which of these records the list holds (found_by), without reading the list."""

    @abstractmethod
    def counting(self) -> Counting:
        """What the totals count of this list."""

    def ranks(self, wanted: Iterable[int]) -> dict[int, int]:
        """Each wanted record's rank (from 1) in the list, as far as it was read (explain)."""
        wanted = set(wanted)
        return {c.record_id: rank for rank, c in enumerate(self.read(), start=1) if c.record_id in wanted}


def walk(candidates: CandidateList) -> Iterator[Candidate]:
    """A list's candidates in order, read as far as they are asked for."""
    for index in itertools.count():
        try:
            yield candidates[index]
        except IndexError:
            return


def distance_order(candidate: Candidate) -> tuple:
    """Nearest first, records without a distance last, ties by record id."""
    return (candidate.distance is None, candidate.distance or 0.0, candidate.record_id)


def score_level(score: float | None) -> float:
    """Scores that differ only by rounding (sums in another order) are one level."""
    return round(float(score or 0.0), 9)
