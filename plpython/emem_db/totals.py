"""How many distinct records the lists of a find hold together (total_candidates): exact up to a
bound (emem.exact_totals_up_to), a lower bound beyond it, as Elasticsearch's track_total_hits.

Above the bound, the sizes already known decide without a union: a list known to hold more
records than the bound (a fetched list's length, a tag's count in the tag vocabulary, a term
counted up to a limit) makes the totals a lower bound, that list's size; so does, under the seed's
rule, a list the column statistics put at Tuning.estimated_totals_margin times the bound or more
(the totals are then the bound itself: statistics are an estimate). Otherwise each list is counted
up to the bound; only when every list holds at most the bound is their union counted, at a cost
that grows with the bound, not with the matches.

The exact union: lists fetched whole give their records; a broad match is counted in SQL, not
read. One match is counted by its size and what the other lists add to it; several by one union
of their records (a union hashes each record once, where probing one match for every record of
another costs several times more).
"""

from collections.abc import Iterable
from dataclasses import dataclass

from .lists.base import CandidateList
from .reader import Reader


@dataclass(frozen=True)
class Totals:
    """total_candidates, and whether it is exact (else a lower bound, the whole list holding more
    than the bound)."""

    candidates: int
    exact: bool


def bounded_totals(reader: Reader, lists: Iterable[CandidateList], bound: int) -> Totals:
    """The totals of a find: exact when the lists hold at most `bound` records together (or `bound`
    is 0), else a lower bound of at least `bound`."""
    lists = list(lists)
    if bound == 0:
        return Totals(total_candidates(reader, lists), True)
    sizes = [candidates.known_size() for candidates in lists]
    largest = max((size.lower for size in sizes), default=0)
    if largest > bound:
        return Totals(largest, False)
    # Estimates (the column statistics, samples of edges) span every lane: under strict isolation
    # they decide nothing.
    margin = reader.tuning.estimated_totals_margin
    if reader.request.lanes is None and any(
        (candidates.estimated_size() or 0) >= margin * bound for candidates in lists
    ):
        return Totals(bound, False)
    if any(candidates.count_up_to(bound + 1) > bound for candidates in lists):
        return Totals(bound, False)
    return Totals(total_candidates(reader, lists), True)


def bounded_size(candidates: CandidateList, bound: int) -> Totals:
    """One list's size as the totals tell it: exact up to the bound (0: always), a lower bound beyond."""
    if bound == 0:
        return Totals(candidates.size(), True)
    known = candidates.known_size()
    if known.exact is not None:
        return Totals(known.exact, True)
    if known.lower > bound:
        return Totals(known.lower, False)
    counted = candidates.count_up_to(bound + 1)
    return Totals(counted, True) if counted <= bound else Totals(bound, False)


def total_candidates(reader: Reader, lists: list[CandidateList]) -> int:
    """The exact number of distinct records the lists hold together."""
    countings = [candidates.counting() for candidates in lists]
    counted = [(candidates, c.match) for candidates, c in zip(lists, countings, strict=True) if c.match is not None]
    at_hand = {record_id for c in countings if c.match is None for record_id in c.known_ids}
    if not counted:
        return len(at_hand)
    if len(counted) == 1:
        candidates, match = counted[0]
        outside = (
            "select pg_catalog.count(*) as n from pg_catalog.unnest($1::bigint[]) as id"
            f" where not ({reader.sets.holds(match.everything, 'id')})"
        )
        outside_count: int = reader.execute(
            "totals.total_candidates",
            outside,
            ["bigint[]"],
            [list(at_hand)],
            cache=False,
        )[0]["n"]
        return candidates.size() + outside_count
    at_hand.update(record_id for _, match in counted for record_id in match.known_ids)
    union = " union ".join(f"({reader.sets.ids(match.records)})" for _, match in counted)
    total: int = reader.execute(
        "totals.total_candidates",
        f"select pg_catalog.count(*) as n from ({union} union select pg_catalog.unnest($1::bigint[])) as c",
        ["bigint[]"],
        [list(at_hand)],
        cache=False,
    )[0]["n"]
    return total
