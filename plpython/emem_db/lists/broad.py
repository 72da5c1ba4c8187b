"""A broad match (a common tag or term): its candidates in the list's order, fetched as the merge
reaches them; its size is counted, not read.

With a vector, the matching records nearest the question come from an iterative HNSW scan
filtered by the match (what a page needs, not every matching row). If the scan stops short (it
ran out, or hit hnsw.max_scan_tuples), the list falls back to the exact order, which also brings
the matching records without a vector. Degraded, the match is read in record-id order
(SetSql.ids_in_order: from an index, or by walking records and probing them).

A match known to hold at most Reader.probed_limit records is read whole. Any other is read
lazily within a budget (Reader.scan_budget): an HNSW scan that passes that many vectors without
finding enough means the match is too sparse for it (a tier of exclusive terms, a lane's edges),
and it is read whole; a walk that does so hands over to the match's own plan, which sorts its
first records by id (SetSql.first_by_id).
"""

from collections.abc import Iterable, Sequence
from typing import Any

from ..lists.base import CandidateList, Counting, Match, Size
from ..merge import Candidate
from ..reader import Reader
from ..sets import describe


class BroadList(CandidateList):
    def __init__(self, reader: Reader, match: Match) -> None:
        self.reader = reader
        self.match = match
        self.loaded: list[Candidate] = []
        self.complete = False
        self._size: int | None = None
        self._broad: bool | None = None
        self.too_sparse_to_walk = False
        self.sets = reader.sets

    def __getitem__(self, index: int) -> Candidate:
        while index >= len(self.loaded) and not self.complete:
            self.fetch(max(2 * len(self.loaded), index + 1, self.reader.reach))
        return self.loaded[index]

    def read(self) -> Sequence[Candidate]:
        return self.loaded

    def size(self) -> int:
        match = self.match
        if self._size is None:
            self._size = match.size.exact
        if self._size is None:
            if match.counter is not None:
                self._size = match.counter.count()
            else:
                self._size = self.reader.execute(
                    "lists.broad.size", self.sets.count(match.everything), [], [], cache=False
                )[0]["n"]
        return self._size

    def known_size(self) -> Size:
        return self.match.size if self._size is None else Size.exactly(self._size)

    def count_up_to(self, limit: int) -> int:
        return self.counted_up_to(limit, planned_whole=False)

    def counted_up_to(self, limit: int, planned_whole: bool) -> int:
        """count_up_to; `planned_whole`: a tier's match, planned for all its rows (SetSql.count_up_to)."""
        known = self.known_size()
        if known.exact is not None or known.lower >= limit:
            return min(known.lower, limit)
        match = self.match
        if match.counter is not None:
            counted = match.counter.count_up_to(limit)
        else:
            statement = self.sets.count_up_to(match.everything, limit, planned_whole)
            counted = self.reader.execute("lists.broad.count_up_to", statement, [], [], cache=False)[0]["n"]
        if counted < limit:
            self._size = counted  # counted whole
        return counted

    def members(self, record_ids: Iterable[int]) -> set[int]:
        """Probed, not fetched."""
        held = self.sets.holds(self.match.everything, "id")
        rows = self.reader.execute(
            "lists.broad.members",
            f"select id from pg_catalog.unnest($1::bigint[]) as id where {held}",
            ["bigint[]"],
            [list(record_ids)],
            cache=False,
        )
        return {row["id"] for row in rows}

    def counting(self) -> Counting:
        return Counting(self.match.known_ids, self.match)

    def describe(self) -> dict[str, Any]:
        return {
            "list": "BroadList",
            "match": describe(self.match.everything),
            "known_size": {"lower": self.match.size.lower, "upper": self.match.size.upper},
            "read": "whole" if self._broad is False else "lazily",
            "candidates_read": len(self.loaded),
        }

    def broad(self) -> bool:
        """Whether the match is read lazily: unless it is known to hold at most probed_limit
        records (then it is read whole)."""
        if self._broad is None:
            known = self.known_size()
            self._broad = known.upper is None or known.upper > self.reader.probed_limit
        return self._broad

    def fetch(self, limit: int) -> None:
        """Read `limit` records lazily, passing at most Reader.scan_budget(limit) records: a match
        too sparse for that is read whole (degraded: its first `limit` by id)."""
        if not self.broad():
            self.loaded, self.complete = self.exact(), True
            return
        budget = self.reader.scan_budget(limit)
        rows = self.in_record_id_order(limit, budget) if self.reader.degraded else self.nearest_matching(limit, budget)
        if rows is None or (len(rows) < limit and not self.reader.degraded):
            self.loaded, self.complete = self.exact(), True
        else:
            self.loaded, self.complete = rows, len(rows) < limit

    def nearest_matching(self, limit: int, budget: int) -> list[Candidate]:
        """The `limit` matching records nearest the question, from the HNSW index, passing at
        most `budget` vectors (fewer rows: the scan ran out)."""
        reader = self.reader
        sql = f"""
            select rv.record_id, {reader.vector_distance_sql("rv.embedding")} as distance, null::bigint[] as windows
            from emem.record_vectors as rv
            where rv.space_id = {reader.space.space_id:d} and {self.sets.holds(self.match.everything, "rv.record_id")}
            order by distance limit $2"""
        scan = {
            "hnsw.iterative_scan": "strict_order",
            "hnsw.ef_search": str(reader.tuning.filtered_scan_ef_search),  # fixed: a longer fetch extends a shorter
            "hnsw.max_scan_tuples": str(budget),
        }
        return reader.scan("lists.broad.nearest_matching", sql, limit, 1, scan, cache=False)  # the text holds the match

    def exact(self) -> list[Candidate]:
        """The whole match by distance (degraded: by record id)."""
        rows = self.reader.execute(
            "lists.broad.exact",
            f"select distinct found.record_id from ({self.sets.ids(self.match.records)}) as found",
            [],
            [],
            cache=False,
        )
        return self.reader.by_distance([*(row["record_id"] for row in rows), *self.match.known_ids])

    def in_record_id_order(self, limit: int, budget: int) -> list[Candidate] | None:
        """The first `limit` records by id (fewer: the match is exhausted; None: the match has no
        such read): from an index or a part, else walking at most `budget` records in their primary
        key's order. A match too sparse for the walk (another lane's matches at the top of the ids,
        a topic only recent records hold) is read by its own plan from then on
        (SetSql.first_by_id)."""
        ordered = self.sets.ids_in_order(self.match.records)
        if ordered is None:
            return None
        ordered_sql, cheaply = ordered
        if cheaply:
            return self.first_records("lists.broad.in_record_id_order", ordered_sql, limit)
        if not self.too_sparse_to_walk:
            first = f"select r.record_id from emem.records as r order by r.record_id limit {budget:d}"
            held = self.sets.holds(self.match.records, "walked.record_id")
            walked = f"select walked.record_id from ({first}) as walked where {held} order by walked.record_id"
            rows = self.first_records("lists.broad.in_record_id_order", walked, limit)
            if len(rows) == limit:
                return rows
            self.too_sparse_to_walk = True
        # Under a LIMIT the planner bets that a sequential scan soon meets the set's records; the
        # walk just found that they lie far up the ids (another lane's 100,000 matches at the top:
        # 86 ms a find in a scan that passed 120,000 records first, 27 ms from the index).
        with self.reader.locally({"enable_seqscan": "off"}):
            return self.first_records(
                "lists.broad.first_by_id", self.sets.first_by_id(self.match.records, limit), limit
            )

    def first_records(self, name: str, ordered_sql: str, limit: int) -> list[Candidate]:
        return self.reader.candidates(
            name,
            f"select found.record_id, null::float8 as distance from ({ordered_sql}) as found limit {limit:d}",
            [],
            [],
            cache=False,
        )
