"""The protocol every candidate list implements, and what the totals count of a list."""

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..merge import Candidate
from ..plans import ListPlan
from ..sets import AnyOf, Listed, RecordSet


@dataclass(frozen=True)
class Size:
    """What is known of how many records a set holds without counting them: at least `lower`, at
    most `upper` (None: no bound known), and an estimate from the column statistics (None: none).
    An estimate is never a bound: statistics lag behind writes, samples may mislead."""

    lower: int
    upper: int | None = None
    estimate: float | None = None

    @classmethod
    def exactly(cls, count: int) -> "Size":
        return cls(count, count)

    @property
    def exact(self) -> int | None:
        """The size, when it is known exactly."""
        return self.lower if self.upper == self.lower else None

    @classmethod
    def of_union(cls, sizes: Iterable["Size"]) -> "Size":
        """A union holds at least its largest set, at most their sum, about its largest estimate."""
        sizes = list(sizes)
        uppers = [size.upper for size in sizes]
        estimates = [size.estimate for size in sizes if size.estimate is not None]
        return cls(
            max((size.lower for size in sizes), default=0),
            None if None in uppers else sum(upper for upper in uppers if upper is not None),
            max(estimates) if estimates else None,
        )


class Counter(ABC):
    """How to count a match faster than by its distinct ids (the tags lookup's whole match)."""

    @abstractmethod
    def count(self) -> int:
        """The match's size."""

    @abstractmethod
    def count_up_to(self, limit: int) -> int:
        """min(size, limit)."""


@dataclass(frozen=True)
class Match:
    """The records a list reads lazily: a set (sets.RecordSet, plain data that SetSql renders into
    every form the list needs), what is known of its size without a statement, records already at
    hand that the set's SQL leaves out (`known_ids`), and optionally a faster way to count it."""

    records: RecordSet
    size: Size = Size(0)
    known_ids: Sequence[int] = ()
    counter: Counter | None = None

    @property
    def everything(self) -> RecordSet:
        """The set with the records at hand."""
        return AnyOf((self.records, Listed(tuple(self.known_ids)))) if self.known_ids else self.records


@dataclass(frozen=True)
class Counting:
    """What the totals count of a list: records at hand, and a match counted in SQL (or none)."""

    known_ids: Iterable[int]
    match: Match | None = None


class CandidateList(ABC):
    """One lookup's candidates, in the list's order. `plan`: what the lookup decided to read, as
    explain shows it (plans.ListPlan; None for a list that is part of another)."""

    plan: ListPlan | None = None

    @abstractmethod
    def __getitem__(self, index: int) -> Candidate:
        """The candidate at this position (from 0), read as far as needed; IndexError past the end."""

    @abstractmethod
    def read(self) -> Sequence[Candidate]:
        """The candidates read so far, in order."""

    @abstractmethod
    def size(self) -> int:
        """How many candidates the whole list holds (counted when not known)."""

    @abstractmethod
    def known_size(self) -> Size:
        """What is known of the list's size without counting it."""

    @abstractmethod
    def count_up_to(self, limit: int) -> int:
        """min(size, limit), at a cost that grows with the limit rather than with the list."""

    def estimated_size(self) -> float | None:
        """An estimate of the size (column statistics, a sample), never a bound; None: none."""
        return self.known_size().estimate

    @abstractmethod
    def members(self, record_ids: Iterable[int]) -> set[int]:
        """Which of these records the list holds (found_by), without reading the list."""

    @abstractmethod
    def counting(self) -> Counting:
        """What the totals count of this list."""

    def head_size(self, limit: int) -> int:
        """How many leading candidates share the list's top score, counted up to limit + 1 (0: a
        list not ordered by a score, or an empty one): the same however the list reads its match.
        The merge may place a head of at most `limit` first (registry.Lookup.exact_head)."""
        return 0

    def describe(self) -> dict[str, Any]:
        """What the list reads, as explain shows it: its kind and, for a lazy list, its sets."""
        return {"list": type(self).__name__, "read": len(self.read())}

    def ranks(self, wanted: Iterable[int]) -> dict[int, int]:
        """Each wanted record's rank (from 1) in the list, as far as it was read (explain)."""
        wanted = set(wanted)
        return {c.record_id: rank for rank, c in enumerate(self.read(), start=1) if c.record_id in wanted}


class WholeList(CandidateList):
    """A list whose records are all at hand: its size is known."""

    def known_size(self) -> Size:
        return Size.exactly(self.size())

    def count_up_to(self, limit: int) -> int:
        return min(self.size(), limit)


def planned(candidates: CandidateList, plan: ListPlan) -> CandidateList:
    """The list with the plan it was built from."""
    candidates.plan = plan
    return candidates


def walk(candidates: CandidateList) -> Iterator[Candidate]:
    """A list's candidates in order, read as far as they are asked for."""
    for index in itertools.count():
        try:
            yield candidates[index]
        except IndexError:
            return


def distance_order(candidate: Candidate) -> tuple[bool, float, int]:
    """Nearest first, records without a distance last, ties by record id."""
    return (candidate.distance is None, candidate.distance or 0.0, candidate.record_id)


def score_level(score: float | None) -> float:
    """Scores that differ only by rounding (sums in another order) are one level."""
    return round(float(score or 0.0), 9)
