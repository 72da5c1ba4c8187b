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

from .. import fragments
from ..lists.base import (
    CandidateList,
    Counting,
    Match,
    Predicate,
    Size,
    capped_count,
    distance_order,
    score_level,
    walk,
)
from ..lists.broad import BroadList
from ..lists.scored import ScoredList
from ..merge import Candidate
from ..reader import Reader


@dataclass(frozen=True)
class Part:
    """A broad tag or term: which records hold it (a predicate over a record id, and a query of
    their ids without duplicates), what is known of how many, and what it adds to a record's
    score."""

    holds: Predicate
    ids_sql: str
    size: Size
    score_key: Any
    # The same ids in a form a walk in record-id order streams (None: ids_sql serves).
    ids_in_order_sql: str | None = None
    # A full-text part's tsquery (its text): tiers of such parts are one tsquery each.
    tsquery: str | None = None

    @property
    def walk_cost(self) -> float:
        """How many ids a walk of the part may read (the smallest part is walked)."""
        known = self.size.upper if self.size.upper is not None else self.size.estimate
        return float("inf") if known is None else float(known)

    @property
    def ordered_walk_cost(self) -> float:
        """The same for a walk in record-id order: a part walked that way through the records
        themselves (ids_in_order_sql) passes every record, so it is walked last."""
        return float("inf") if self.ids_in_order_sql is not None else self.walk_cost


@dataclass(frozen=True)
class Narrow:
    """What a tiered list reads whole (its scored part): records a predicate holds for, given
    also as a tsquery's text when it is the records matching one (full text)."""

    holds: Predicate
    tsquery: str | None = None


def tier_match(reader: Reader, parts: tuple[Part, ...], broad: list[Part], narrow: Narrow | None) -> Match:
    """The records holding these broad parts, none of the other broad ones and nothing narrow:
    when every part is full text, the records matching one tsquery (the index intersects the
    terms); else walked from the smallest of the parts, probing the others."""
    others = [part for part in broad if part not in parts]
    if all(part.tsquery for part in broad) and (narrow is None or narrow.tsquery):
        excluded = [part.tsquery or "" for part in others] + ([narrow.tsquery or ""] if narrow else [])
        return text_tier(reader, " & ".join(f"({part.tsquery})" for part in parts), excluded, parts)

    def holds_also(record_id: str, held: Iterable[Part]) -> str:
        held_sql = "".join(f"({part.holds(record_id)}) and " for part in held)
        not_held = "".join(f"not ({part.holds(record_id)}) and " for part in others)
        return f"({held_sql}{not_held}not ({narrow.holds(record_id) if narrow else 'false'}))"

    def walking(source: Part, ids: str) -> str:
        # A record of the source part holds the source: only the rest is checked.
        rest = holds_also("found.record_id", [part for part in parts if part is not source])
        return f"select found.record_id from ({ids}) as found (record_id) where {rest}"

    uppers = [part.size.upper for part in parts if part.size.upper is not None]
    source = min(parts, key=lambda part: part.walk_cost)
    ids_sql = walking(source, source.ids_sql)
    in_order = min(parts, key=lambda part: part.ordered_walk_cost)
    return Match(
        holds=lambda record_id: holds_also(record_id, parts),
        ids_sql=ids_sql,
        count_sql=f"select pg_catalog.count(*) as n from ({ids_sql}) as tier",
        count_up_to=capped_count(reader, ids_sql),
        size=Size(0, min(uppers) if uppers else None),  # a tier holds at most its smallest part
        ids_in_order_sql=f"{walking(in_order, in_order.ids_in_order_sql or in_order.ids_sql)} order by found.record_id",
        in_order_cheaply=in_order.ids_in_order_sql is None,  # walked from a tag's index, not every record
    )


def text_tier(reader: Reader, held: str, excluded: list[str], parts: tuple[Part, ...]) -> Match:
    """A tier of full-text parts: the records matching `held` and none of `excluded` (tsqueries'
    text), as one tsquery."""
    query = held + "".join(f" & !({other})" for other in excluded)
    quoted, lanes = fragments.quoted_tsquery(reader.plpy, query), reader.lanes_sql
    ids_sql = fragments.text_matching(quoted, lanes)
    uppers = [part.size.upper for part in parts if part.size.upper is not None]
    return Match(
        holds=lambda record_id: fragments.text_matches(record_id, quoted, lanes),
        ids_sql=ids_sql,
        count_sql=f"select pg_catalog.count(*) as n from ({ids_sql}) as tier",
        count_up_to=capped_count(reader, ids_sql),
        size=Size(0, min(uppers) if uppers else None),
        ids_in_order_sql=f"{ids_sql} order by r.record_id",
    )


class TieredList(CandidateList):
    def __init__(
        self,
        reader: Reader,
        whole: Match,
        scored: ScoredList,
        broad: list[Part],
        score: Callable[[tuple[Part, ...]], float | None],
        narrow: Narrow | None,
    ) -> None:
        self.whole = BroadList(reader, whole)
        held = [parts for count in range(1, len(broad) + 1) for parts in itertools.combinations(broad, count)]
        tiers = [
            (score_level(scored), BroadList(reader, tier_match(reader, parts, broad, narrow)))
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
