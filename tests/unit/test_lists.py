"""The candidate lists outside the server (a fake plpy answers their statements): what is known of
a size, a scored list read one whole score level at a time, the tiers of broad parts and the order
a tiered list walks them in."""

from collections.abc import Sequence
from typing import Any

import pytest
from fake_plpy import FakePlpy, Rows, reader

from emem_db.lists.base import Size, distance_order, score_level, walk
from emem_db.lists.broad import BroadList
from emem_db.lists.fetched import FetchedList
from emem_db.lists.scored import ScoredList
from emem_db.lists.tiered import Part, TieredList, tier_match
from emem_db.lookups.edges import EDGE_BONUS
from emem_db.lookups.tags import Gain, tier_score
from emem_db.merge import Candidate
from emem_db.sets import Listed, Tagged, TextMatching, Tier

VECTOR = "[1,0,0,0]"

# ---- sizes ------------------------------------------------------------------------------------------


def test_a_size_is_exact_only_when_its_bounds_meet() -> None:
    assert Size.exactly(7).exact == 7
    assert Size(7, 9).exact is None
    assert Size(7).exact is None  # no upper bound known
    assert Size(0, None, estimate=5_000.0).exact is None  # an estimate is never a bound


def test_a_union_holds_its_largest_set_at_least_their_sum_at_most() -> None:
    union = Size.of_union([Size(3, 10, 4.0), Size(8, 20), Size.exactly(5)])
    assert union == Size(8, 35, 4.0)
    assert Size.of_union([Size(3, 10), Size(1)]).upper is None  # one set without a bound: none
    assert Size.of_union([]) == Size(0, 0)


def test_scores_that_differ_only_by_rounding_are_one_level() -> None:
    assert score_level(0.1 + 0.2) == score_level(0.3)
    assert score_level(None) == 0.0
    assert score_level(2.0000001) != score_level(2.0)


def test_distance_order_is_nearest_first_then_no_distance_then_record_id() -> None:
    candidates = [Candidate(5, None), Candidate(4, 0.5), Candidate(3, None), Candidate(2, 0.1), Candidate(1, 0.5)]
    assert [c.record_id for c in sorted(candidates, key=distance_order)] == [2, 1, 4, 3, 5]


def test_a_walk_reads_a_list_as_far_as_it_goes() -> None:
    listed = FetchedList([Candidate(i, float(i)) for i in (4, 2, 9)])
    assert [c.record_id for c in walk(listed)] == [4, 2, 9]
    assert [c.record_id for c in walk(FetchedList([]))] == []


def test_a_fetched_list_knows_its_size_members_and_ranks() -> None:
    listed = FetchedList([Candidate(i, float(i)) for i in (4, 2, 9)])
    assert (listed.size(), listed.known_size(), listed.count_up_to(2)) == (3, Size.exactly(3), 2)
    assert listed.members([2, 3, 9]) == {2, 9}
    assert listed.ranks([9, 4, 8]) == {4: 1, 9: 3}
    assert sorted(listed.counting().known_ids) == [2, 4, 9]


# ---- a scored list ----------------------------------------------------------------------------------


def scored(
    ids: list[int], scores: list[float], reach: int = 3, vector: str | None = None, plpy: Any = None
) -> ScoredList:
    return ScoredList(reader(plpy, vector=vector, reach=reach), ids, scores)


def test_a_scored_list_reads_whole_score_levels_and_at_least_the_reach() -> None:
    """Degraded (no distances to fetch): a level's records by record id; reading the first record
    reads the reach (3), completed to the end of the third record's level."""
    listed = scored([10, 13, 11, 12, 20, 21], [3, 2, 2, 2, 1, 1])
    assert listed[0] == Candidate(10, None, (), 3)
    assert [c.record_id for c in listed.read()] == [10, 11, 12, 13]
    assert listed[4].record_id == 20
    assert [c.record_id for c in listed.read()] == [10, 11, 12, 13, 20, 21]
    with pytest.raises(IndexError):
        listed[6]
    assert listed.size() == len(listed) == 6


def test_a_scored_list_ranks_a_record_beyond_what_was_read() -> None:
    listed = scored([1, 2, 3, 4, 5], [5, 4, 3, 2, 1], reach=1)
    listed[0]
    assert len(listed.read()) == 1
    assert listed.ranks([4, 9]) == {4: 4}
    assert listed.members([5, 9]) == {5}  # without reading


def test_a_scored_list_fetches_the_distances_of_one_level_at_a_time() -> None:
    """With a vector each read asks for the distances of whole levels only, and orders each level's
    records by distance."""
    distances = {1: 0.9, 2: 0.4, 3: 0.1, 4: 0.2}

    def answer(sql: str, args: Sequence[Any]) -> Rows:
        ids, _vector = args
        return [{"record_id": i, "distance": distances[i]} for i in reversed(ids)]  # in no particular order

    plpy = FakePlpy(answer)
    listed = scored([1, 2, 3, 4], [2, 1, 1, 1], reach=1, vector=VECTOR, plpy=plpy)
    assert listed[0] == Candidate(1, 0.9, (), 2)
    assert [args[0] for _, args in plpy.ran] == [[1]]
    assert [c.record_id for c in walk(listed)] == [1, 3, 4, 2]
    assert [args[0] for _, args in plpy.ran] == [[1], [2, 3, 4]]


def test_where_a_score_level_ends() -> None:
    listed = scored([1, 2, 3, 4, 5], [3, 3, 2, 1, 1])
    assert [listed.level_end(n) for n in range(5)] == [2, 2, 3, 5, 5]


# ---- tiers of broad parts ---------------------------------------------------------------------------


def part(records: Any, upper: int | None, estimate: float | None = None, gain: Any = None) -> Part:
    return Part(records, Size(0, upper, estimate), gain)


def test_a_tier_of_text_parts_is_one_text_search_query() -> None:
    """The index intersects the terms: holding these, none of the other broad ones nor the narrow."""
    q3, kowalski, invoice = (
        part(TextMatching("'q3'"), 900),
        part(TextMatching("'kowalski'"), 50),
        part(TextMatching("'invoice'"), 700),
    )
    match = tier_match((q3, invoice), [q3, kowalski, invoice], TextMatching("'inv-7'"))
    assert match.records == TextMatching("('q3') & ('invoice') & !('kowalski') & !('inv-7')")
    assert match.size == Size(0, 700)  # at most its smallest part


def test_a_tier_of_other_parts_is_walked_from_its_smallest_part() -> None:
    common, rare, unknown = part(Tagged(("common",)), 5_000), part(Tagged(("rare",)), 40), part(Tagged(("far",)), None)
    match = tier_match((common, unknown, rare), [common, rare, unknown], Listed((1, 2)))
    assert match.records == Tier(
        (Tagged(("common",)), Tagged(("far",)), Tagged(("rare",))), (Listed((1, 2)),), walk_from=2
    )
    assert match.size == Size(0, 40)
    assert unknown.walk_cost == float("inf")
    assert part(Tagged(("x",)), None, estimate=12.0).walk_cost == 12.0


def test_a_tier_scores_its_distinct_terms_the_edge_bonus_and_its_rarest_tag() -> None:
    project = part(Tagged(("project",)), 9, gain=Gain(frozenset({"project"}), rarity=0.01))
    apollo = part(Tagged(("project apollo",)), 9, gain=Gain(frozenset({"project", "apollo"}), rarity=0.2))
    edge = part(Tagged(("e",)), 9, gain=Gain(frozenset({"paid"}), through_edge=True))
    far = part(Tagged(("f",)), 9, gain=Gain(frozenset({"ledger"}), far_tag=True))
    assert tier_score((project, apollo)) == pytest.approx(2 + 0.2)
    assert tier_score((project, edge)) == pytest.approx(2 + EDGE_BONUS + 0.01)
    assert tier_score((far, edge)) == pytest.approx(2 + EDGE_BONUS)
    assert tier_score((far, project)) is None  # a far end's tag counts only through its edge


def read_whole(candidates: list[Candidate]) -> BroadList:
    """A tier whose records were read already (no statement runs)."""
    tier = BroadList(reader(vector=VECTOR), tier_match((part(Tagged(("t",)), 10),), [], None))
    tier.loaded, tier.complete = candidates, True
    return tier


def test_a_tiered_list_walks_the_scores_down_merging_each_levels_records_by_distance() -> None:
    """Level 2: the fetched record 1 and tier A's; level 1.5: tier B alone; level 1: record 2 with
    tier C's; each level's records nearest first."""

    def answer(sql: str, args: Sequence[Any]) -> Rows:
        ids, _vector = args
        return [{"record_id": i, "distance": {1: 0.5, 2: 0.3}[i]} for i in ids]

    fetched = scored([1, 2], [2, 1], reach=10, vector=VECTOR, plpy=FakePlpy(answer))
    tiers = [
        (2.0, read_whole([Candidate(11, 0.2), Candidate(12, 0.7)])),
        (1.5, read_whole([Candidate(21, 0.9)])),
        (1.0, read_whole([Candidate(31, 0.1), Candidate(32, None)])),
    ]
    order = [c.record_id for c in TieredList.in_order(fetched, tiers)]
    assert order == [11, 1, 12, 21, 31, 2, 32]
