"""A list ordered by a score first (matched terms, summed IDF), then by distance (degraded: by
record id), whose broad tags or terms are not read whole.

The records holding a narrow tag or term (or an edge) come fetched with their scores (a
ScoredList). A record holding only broad ones scores what its combination of them gives, so each
combination is a tier (unless no record can hold it: its score is None), read like a broad list as
far as the merge reaches. The list walks the scores from the highest, merging the fetched records
and the tiers of each score by distance. Its size, members and totals are those of the whole match.
"""

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..lists.base import CandidateList, Counting, Match, Size, distance_order, score_level, walk
from ..lists.broad import BroadList
from ..lists.scored import ScoredList
from ..merge import Candidate
from ..reader import Reader
from ..sets import RecordSet, TextMatching, Tier, describe


@dataclass(frozen=True)
class Part:
    """A broad tag or term: which records hold it (a set), what is known of how many, and what it
    adds to a record's score."""

    records: RecordSet
    size: Size
    score_key: Any

    @property
    def walk_cost(self) -> float:
        """How many ids a walk of the part may read (the smallest part is walked)."""
        known = self.size.upper if self.size.upper is not None else self.size.estimate
        return float("inf") if known is None else float(known)


def tier_match(parts: tuple[Part, ...], broad: list[Part], narrow: RecordSet | None) -> Match:
    """The records holding these broad parts, none of the other broad ones and nothing narrow:
    when every part is full text, the records matching one text-search query (the index
    intersects the terms); else walked from the smallest of the parts, probing the others."""
    others = [part for part in broad if part not in parts]
    uppers = [part.size.upper for part in parts if part.size.upper is not None]
    size = Size(0, min(uppers) if uppers else None)  # a tier holds at most its smallest part
    excluded = [part.records for part in others] + ([narrow] if narrow is not None else [])
    if all(isinstance(member, TextMatching) for member in [*(part.records for part in parts), *excluded]):
        held = " & ".join(f"({part.records.tsquery})" for part in parts if isinstance(part.records, TextMatching))
        query = held + "".join(f" & !({member.tsquery})" for member in excluded if isinstance(member, TextMatching))
        return Match(TextMatching(query), size)
    source = min(range(len(parts)), key=lambda n: parts[n].walk_cost)
    return Match(Tier(tuple(part.records for part in parts), tuple(excluded), source), size)


class TieredList(CandidateList):
    def __init__(
        self,
        reader: Reader,
        whole: Match,
        scored: ScoredList,
        broad: list[Part],
        score: Callable[[tuple[Part, ...]], float | None],
        narrow: RecordSet | None,
    ) -> None:
        self.whole = BroadList(reader, whole)
        self.scored = scored
        self.parts = broad
        held = [parts for count in range(1, len(broad) + 1) for parts in itertools.combinations(broad, count)]
        self.tiers = tiers = [
            (score_level(scored), BroadList(reader, tier_match(parts, broad, narrow)))
            for parts, scored in zip(held, map(score, held), strict=True)
            if scored is not None
        ]
        self.stream = self.in_order(scored, tiers)
        self.loaded: list[Candidate] = []
        self.complete = False

    @staticmethod
    def in_order(scored: ScoredList, tiers: list[tuple[float, BroadList]]) -> Iterator[Candidate]:
        position = 0
        for level in sorted(set(scored.levels) | {level for level, _ in tiers}, reverse=True):
            at_level = position < len(scored) and scored.levels[position] == level
            end = scored.level_end(position) if at_level else position
            yield from heapq.merge(
                (scored[n] for n in range(position, end)),
                *(walk(tier) for tier_level, tier in tiers if tier_level == level),
                key=distance_order,
            )
            position = end

    def __getitem__(self, index: int) -> Candidate:
        while index >= len(self.loaded) and not self.complete:
            candidate = next(self.stream, None)
            if candidate is None:
                self.complete = True
            else:
                self.loaded.append(candidate)
        return self.loaded[index]

    def read(self) -> Sequence[Candidate]:
        return self.loaded

    def size(self) -> int:
        return self.whole.size()

    def known_size(self) -> Size:
        return self.whole.known_size()

    def count_up_to(self, limit: int) -> int:
        return self.whole.count_up_to(limit)

    def estimated_size(self) -> float | None:
        return self.whole.estimated_size()

    def members(self, record_ids: Iterable[int]) -> set[int]:
        return self.whole.members(record_ids)

    def counting(self) -> Counting:
        return self.whole.counting()

    def head_size(self, limit: int) -> int:
        """The records at the highest score some record holds (a combination of broad parts may
        hold none): the scored records and the tiers of that level, each tier counted up to what
        is left of limit + 1."""
        scored_top = self.scored.levels[:1]
        for level in sorted({level for level, _ in self.tiers}.union(scored_top), reverse=True):
            held = self.scored.head_size(limit) if [level] == scored_top else 0
            for tier_level, tier in self.tiers:
                if tier_level == level and held <= limit:
                    held += tier.counted_up_to(limit + 1 - held, planned_whole=True)
            if held:
                return min(held, limit + 1)
        return 0

    def describe(self) -> dict[str, Any]:
        return {
            "list": "TieredList",
            "match": describe(self.whole.match.everything),
            "parts": [describe(part.records) for part in self.parts],
            "tiers": len(self.tiers),
            "candidates_read": len(self.loaded),
        }
