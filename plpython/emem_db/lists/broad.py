"""A broad match (a common tag or term): its candidates in the list's order, fetched as the merge
reaches them; its size is counted, not read.

With a vector, the matching records nearest the question come from an iterative HNSW scan
filtered by the match (what a page needs, not every matching row). If the scan stops short (it
ran out, or hit hnsw.max_scan_tuples), the list falls back to the exact order, which also brings
the matching records without a vector. Degraded, the match is read in record-id order from an
index where it has one (Match.ids_in_order_sql), else in the exact order.
"""

from collections.abc import Iterable, Sequence

from emem_db.lists.base import CandidateList, Counting, Match, Size
from emem_db.merge import Candidate
from emem_db.reader import Reader


class BroadList(CandidateList):
    def __init__(self, reader: Reader, match: Match) -> None:
        self.reader = reader
        self.match = match
        self.loaded: list[Candidate] = []
        self.complete = False
        self._size: int | None = None

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
            self._size = self.reader.execute(
                match.count_sql, list(match.count_types), list(match.count_args), cache=False
            )[0]["n"]
        return self._size

    def known_size(self) -> Size:
        return self.match.size if self._size is None else Size.exactly(self._size)

    def count_up_to(self, limit: int) -> int:
        known = self.known_size()
        if known.exact is not None or known.lower >= limit:
            return min(known.lower, limit)
        counted = self.match.count_up_to(limit)
        if counted < limit:
            self._size = counted  # counted whole
        return counted

    def members(self, record_ids: Iterable[int]) -> set[int]:
        """Probed, not fetched."""
        rows = self.reader.execute(
            f"select id from pg_catalog.unnest($1::bigint[]) as id where {self.match.holds('id')}",
            ["bigint[]"],
            [list(record_ids)],
            cache=False,
        )
        return {row["id"] for row in rows}

    def counting(self) -> Counting:
        return Counting(self.match.known_ids, self.match)

    def fetch(self, limit: int) -> None:
        if self.reader.degraded:
            rows = self.in_record_id_order(limit)
            if rows is None:
                self.loaded, self.complete = self.exact(), True
            else:
                self.loaded, self.complete = rows, len(rows) < limit
            return
        rows = self.nearest_matching(limit)
        if len(rows) < limit:
            self.loaded, self.complete = self.exact(), True
        else:
            self.loaded = rows

    def nearest_matching(self, limit: int) -> list[Candidate]:
        reader = self.reader
        sql = f"""
            select rv.record_id, {reader.vector_distance_sql("rv.embedding")} as distance
            from emem.record_vectors as rv
            where rv.space_id = {reader.space.space_id:d} and {self.match.holds("rv.record_id")}
            order by distance limit $2"""
        scan = {"hnsw.iterative_scan": "strict_order", "hnsw.ef_search": str(reader.tuning.filtered_scan_ef_search)}
        with reader.settings(scan):
            return reader.candidates(sql, ["public.vector", "int"], [reader.request.vector, limit], cache=False)

    def exact(self) -> list[Candidate]:
        """The whole match by distance (degraded: by record id)."""
        return self.reader.candidates(
            f"""select found.record_id, {self.reader.distance_sql("$1")} as distance
                from ({self.match.ids_sql} union select pg_catalog.unnest($2::bigint[])) as found (record_id)
                order by distance nulls last, found.record_id""",
            ["public.vector", "bigint[]"],
            [self.reader.request.vector, list(self.match.known_ids)],
            cache=False,
        )

    def in_record_id_order(self, limit: int) -> list[Candidate] | None:
        """The first `limit` records by id, read from an index, or None when the match has no such read."""
        if self.match.ids_in_order_sql is None:
            return None
        return self.reader.candidates(
            f"select found.record_id, null::float8 as distance from ({self.match.ids_in_order_sql}) as found"
            f" limit {limit:d}",
            [],
            [],
            cache=False,
        )
