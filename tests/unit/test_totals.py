"""Bounded totals (totals.bounded_totals) over lists that say what they know, outside the server:
which sizes decide without a count, when estimates may, and the exact union."""

from collections.abc import Iterable, Sequence
from typing import Any

from fake_plpy import FakePlpy, Rows, reader

from emem_db.lists.base import CandidateList, Counting, Match, Size
from emem_db.merge import Candidate
from emem_db.sets import Tagged
from emem_db.totals import Totals, bounded_size, bounded_totals
from emem_db.tuning import DEFAULT_TUNING

MARGIN = DEFAULT_TUNING.estimated_totals_margin


class KnownList(CandidateList):
    """A list of `ids` that knows `known` of its size without counting, and counts on request
    (recorded in `counted`); counted in SQL as `match` if given."""

    def __init__(self, ids: Iterable[int], known: Size | None = None, match: Match | None = None) -> None:
        self.ids = list(ids)
        self.known = known if known is not None else Size.exactly(len(self.ids))
        self.match = match
        self.counted: list[int | None] = []

    def __getitem__(self, index: int) -> Candidate:
        return Candidate(self.ids[index], None)

    def read(self) -> Sequence[Candidate]:
        return []

    def size(self) -> int:
        self.counted.append(None)
        return len(self.ids)

    def known_size(self) -> Size:
        return self.known

    def count_up_to(self, limit: int) -> int:
        self.counted.append(limit)
        return min(len(self.ids), limit)

    def members(self, record_ids: Iterable[int]) -> set[int]:
        return set(record_ids) & set(self.ids)

    def counting(self) -> Counting:
        return Counting([], self.match) if self.match is not None else Counting(self.ids)


def test_a_bound_of_0_counts_the_union_exactly() -> None:
    lists = [KnownList(range(0, 600)), KnownList(range(400, 1000), Size(0, None))]
    assert bounded_totals(reader(), lists, 0) == Totals(1000, True)


def test_within_the_bound_the_union_is_exact() -> None:
    lists = [KnownList(range(0, 60)), KnownList(range(30, 90), Size(10))]
    assert bounded_totals(reader(), lists, 100) == Totals(90, True)
    assert lists[1].counted == [101]  # counted up to the bound only


def test_a_list_known_to_hold_more_than_the_bound_is_the_lower_bound_without_a_count() -> None:
    lists = [KnownList(range(50)), KnownList(range(5000), Size(2_500, 6_000))]
    assert bounded_totals(reader(), lists, 1_000) == Totals(2_500, False)
    assert lists[1].counted == []


def test_a_list_counted_past_the_bound_makes_the_bound_a_lower_bound() -> None:
    lists = [KnownList(range(50)), KnownList(range(5000), Size(0))]
    assert bounded_totals(reader(), lists, 1_000) == Totals(1_000, False)
    assert lists[1].counted == [1_001]


def test_estimates_decide_under_page_filter_only() -> None:
    """Column statistics span every lane: under strict isolation they would tell of other lanes."""
    estimated = Size(0, None, estimate=MARGIN * 1_000)
    assert bounded_totals(reader(), [KnownList(range(10), estimated)], 1_000) == Totals(1_000, False)
    strict = reader(lanes=("own",))
    assert bounded_totals(strict, [KnownList(range(10), estimated)], 1_000) == Totals(10, True)
    below = Size(0, None, estimate=MARGIN * 1_000 - 1)
    assert bounded_totals(reader(), [KnownList(range(10), below)], 1_000) == Totals(10, True)


def test_one_match_counted_in_sql_adds_what_the_other_lists_hold_outside_it() -> None:
    """Its size, plus the records at hand that it does not hold (one statement)."""
    statements: list[tuple[str, Sequence[Any]]] = []

    def answer(sql: str, args: Sequence[Any]) -> Rows:
        statements.append((sql, args))
        return [{"n": 2}]

    broad = KnownList(range(100, 300), Size(0), Match(Tagged(("common",))))
    lists = [KnownList([1, 2, 150]), broad]
    assert bounded_totals(reader(FakePlpy(answer)), lists, 0) == Totals(200 + 2, True)
    [(sql, args)] = statements
    assert "where not (exists (select 1 from emem.record_tags" in sql
    assert sorted(args[0]) == [1, 2, 150]


def test_several_matches_are_counted_as_one_union() -> None:
    statements: list[str] = []

    def answer(sql: str, args: Sequence[Any]) -> Rows:
        statements.append(sql)
        return [{"n": 7}]

    lists = [
        KnownList([1], Size(0), Match(Tagged(("a",)), known_ids=(5,))),
        KnownList([2], Size(0), Match(Tagged(("b",)))),
        KnownList([3, 5]),
    ]
    assert bounded_totals(reader(FakePlpy(answer)), lists, 0) == Totals(7, True)
    [sql] = statements
    assert sql.count(" union ") == 2 and "'a'" in sql and "'b'" in sql


def test_one_lists_size_is_exact_up_to_the_bound() -> None:
    assert bounded_size(KnownList(range(10), Size(0)), 0) == Totals(10, True)
    assert bounded_size(KnownList(range(10)), 5) == Totals(10, True)  # known exactly: no bound applies
    assert bounded_size(KnownList(range(10), Size(8)), 5) == Totals(8, False)
    assert bounded_size(KnownList(range(10), Size(0)), 20) == Totals(10, True)
    assert bounded_size(KnownList(range(10), Size(0)), 9) == Totals(9, False)
