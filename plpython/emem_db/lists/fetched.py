"""A list fetched whole by one statement."""

from collections.abc import Iterable, Sequence

from ..lists.base import Counting, WholeList
from ..merge import Candidate


class FetchedList(WholeList):
    def __init__(self, candidates: list[Candidate]) -> None:
        self.candidates = candidates

    def __getitem__(self, index: int) -> Candidate:
        return self.candidates[index]

    def read(self) -> Sequence[Candidate]:
        return self.candidates

    def size(self) -> int:
        return len(self.candidates)

    def members(self, record_ids: Iterable[int]) -> set[int]:
        return set(record_ids).intersection(c.record_id for c in self.candidates)

    def counting(self) -> Counting:
        return Counting(c.record_id for c in self.candidates)
