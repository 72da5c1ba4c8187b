"""The two vector lookups: the nearest record vectors and window vectors of the active space,
by HNSW; a window adds every record it was made from, at the window's distance. A window whose
vector is stale (NULL until the embedding queue fills it again) takes no part. Under strict
isolation each readable lane is scanned on its own HNSW index (emem._sync_lane_indexes gives every
lane a strict profile reads one), so that no other lane's vectors take part; without them the
space's index is filtered to the readable lanes (iterative scans). A scan that stops short (other
lanes' vectors crowd the question's neighbourhood past hnsw.max_scan_tuples) is read exactly."""

from collections.abc import Callable

from .. import fragments
from ..lists.base import CandidateList, planned
from ..lists.fetched import FetchedList
from ..merge import Candidate
from ..plans import ListPlan
from ..reader import Reader, distance_key


def record_vectors(reader: Reader) -> CandidateList:
    distance = reader.vector_distance_sql("rv.embedding")
    space = reader.space.space_id

    def scan(lanes: str) -> str:
        return f"""
            select rv.record_id, {distance} as distance, null::bigint[] as windows
            from emem.record_vectors as rv
            where rv.space_id = {space:d}{lanes}
            order by distance limit $2"""

    def sql(exact: bool) -> str:
        if exact:  # the readable lanes' records first (records_by_lane), then their vectors
            return f"""
                select rv.record_id, {distance} as distance, null::bigint[] as windows
                from emem.records as r
                join emem.record_vectors as rv
                  on rv.space_id = {space:d} and rv.record_id = r.record_id and rv.lane_name = r.lane_name
                where true{fragments.in_lanes("r.lane_name", reader.lanes_sql)}
                order by {exactly(distance)} limit $2"""
        return lane_first(reader, scan, "rv.lane_name", "distance, record_id")

    count = reader.request.candidate_counts["record_vectors"]
    found = nearest(reader, sql, count, len)
    return planned(found, ListPlan("whole", f"the nearest {count} record vectors ({index_read(reader)})"))


def window_vectors(reader: Reader) -> CandidateList:
    distance = reader.vector_distance_sql("w.embedding")
    space = reader.space.space_id

    def scan(lanes: str, readable: str = "", order: str = "distance") -> str:
        return f"""
            select w.window_id, {distance} as distance
            from emem.windows as w
            where w.space_id = {space:d} and w.embedding is not null{lanes}{readable}
            order by {order} limit $2"""

    # Read exactly, the windows of the readable lanes' records (records_by_lane, then members),
    # joined by lane as well (a Citus cluster joins rows of one lane only).
    readable = f"""
              and (w.window_id, w.lane_name) in (
                  select m.window_id, m.lane_name from emem.records as r
                  join emem.window_members as m on m.record_id = r.record_id and m.lane_name = r.lane_name
                  where true{fragments.in_lanes("r.lane_name", reader.lanes_sql)})"""

    def sql(exact: bool) -> str:
        if exact:
            windows = scan(fragments.in_lanes("w.lane_name", reader.lanes_sql), readable, exactly(distance))
        else:
            windows = lane_first(reader, scan, "w.lane_name", "distance, window_id")
        return f"""
            with nearest as ({windows})
            select m.record_id, pg_catalog.min(n.distance) as distance,
                   pg_catalog.array_agg(n.window_id order by n.distance, n.window_id) as windows
            from nearest as n join emem.window_members as m on m.window_id = n.window_id
            group by m.record_id
            order by distance, record_id"""

    count = reader.request.candidate_counts["window_vectors"]
    plan = ListPlan("whole", f"the records of the nearest {count} windows ({index_read(reader)})")
    return planned(nearest(reader, sql, count, windows_of), plan)


def lane_first(reader: Reader, scan: Callable[[str], str], lane: str, order: str) -> str:
    """The HNSW scan `scan` gives for a lane clause: under strict isolation with every readable
    lane's own index, one scan per lane (its equality with a constant selects the lane's partial
    index), merged in `order` (nearest first); otherwise one scan of the space's index."""
    if not reader.lane_vector_indexes:
        return scan(fragments.in_lanes(lane, reader.lanes_sql))
    lanes = reader.request.lanes or ()
    scans = [scan(f" and {lane} operator(pg_catalog.=) {reader.plpy.quote_literal(name)}") for name in lanes]
    if len(scans) == 1:
        return scans[0]
    each = " union all ".join(f"({one})" for one in scans)
    return f"select * from ({each}) as each_lane order by {order} limit $2"


def index_read(reader: Reader) -> str:
    return "HNSW of each readable lane" if reader.lane_vector_indexes else "HNSW"


def exactly(distance: str) -> str:
    """An order by the distance that the HNSW index cannot give: every vector read is measured."""
    return f"{distance} + 0"


def windows_of(found: list[Candidate]) -> int:
    return len({window for candidate in found for window in candidate.windows})


def nearest(
    reader: Reader, sql: Callable[[bool], str], count: int, scanned: Callable[[list[Candidate]], int]
) -> FetchedList:
    """An HNSW scan of `count` rows (`sql`: its statement, or one read exactly; `scanned`: the rows
    a result holds): ef_search must be at least that for the index to return them. A scan filtered
    to some lanes goes on until it has them (iterative scan) or passed hnsw.max_scan_tuples; short,
    it is read exactly (in an order the index cannot give: the readable lanes' vectors one by one)."""
    if reader.lanes_sql is None:
        return FetchedList(reader.scan("vectors.nearest", sql(False), count, count, {}))
    found = reader.scan("vectors.nearest", sql(False), count, count, {"hnsw.iterative_scan": "strict_order"})
    if scanned(found) < count:
        exact = reader.candidates("vectors.exact", sql(True), ["public.vector", "int"], [reader.request.vector, count])
        found = sorted(exact, key=lambda c: (*distance_key(c.distance), c.record_id))
    return FetchedList(found)
