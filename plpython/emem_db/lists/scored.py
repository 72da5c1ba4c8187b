"""A list ordered by a score first (matched terms, summed weights), then by distance (degraded:
by record id), whose records and scores come whole but whose distances are fetched one score
level at a time, as the merge reaches them. Scoring a broad match is one aggregate; a distance
is an index probe per record, and most of a broad match sits in low levels no page reaches."""

import bisect
import operator
from collections.abc import Iterable, Sequence
from typing import Any

from ..lists.base import Counting, WholeList
from ..merge import Candidate
from ..reader import Reader


class ScoredList(WholeList):
    """`record_ids` and `scores` are sorted by score, highest first."""

    def __init__(self, reader: Reader, record_ids: list[int], scores: list[float]) -> None:
        self.reader = reader
        self.record_ids = record_ids
        self.levels = [round(score, 9) for score in scores]  # score_level, inlined: lists run long
        self.loaded: list[Candidate] = []

    @classmethod
    def from_statement(cls, reader: Reader, name: str, sql: str, types: list[str], args: list[Any]) -> "ScoredList":
        """The list a statement gives that selects fragments.SCORED_ARRAYS from its `found`."""
        row = reader.execute(name, sql, types, args)[0]
        return cls(reader, list(row["record_ids"] or ()), [float(s) for s in row["scores"] or ()])

    def __len__(self) -> int:
        return len(self.record_ids)

    def __getitem__(self, index: int) -> Candidate:
        if not 0 <= index < len(self.record_ids):
            raise IndexError(index)
        if index >= len(self.loaded):
            self.load(max(index + 1, self.reader.reach))
        return self.loaded[index]

    def read(self) -> Sequence[Candidate]:
        return self.loaded

    def size(self) -> int:
        return len(self.record_ids)

    def members(self, record_ids: Iterable[int]) -> set[int]:
        return set(record_ids).intersection(self.record_ids)  # a page's few ids against a long list

    def counting(self) -> Counting:
        return Counting(self.record_ids)

    def ranks(self, wanted: Iterable[int]) -> dict[int, int]:
        """Reads the score levels of the wanted records first: their distances decide their ranks."""
        wanted = set(wanted)
        last = max((n for n, record_id in enumerate(self.record_ids) if record_id in wanted), default=-1)
        if last >= len(self.loaded):
            self.load(last + 1)
        return super().ranks(wanted)

    def load(self, count: int) -> None:
        """Extend what is loaded by whole score levels to at least `count` records."""
        start, end = len(self.loaded), self.level_end(min(count, len(self.record_ids)) - 1)
        self.loaded += self.reader.with_distances(self.record_ids[start:end], self.levels[start:end])

    def head_size(self, limit: int) -> int:
        return min(self.level_end(0), limit + 1) if self.record_ids else 0

    def level_end(self, start: int) -> int:
        """Where the score level of the record at `start` ends."""
        return bisect.bisect_right(self.levels, -self.levels[start], lo=start, key=operator.neg)
