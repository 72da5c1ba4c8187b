"""The two vector lookups: the nearest record vectors and window vectors of the active space,
by HNSW; a window adds every record it was made from, at the window's distance. A window whose
vector is stale (NULL until the embedding queue fills it again) takes no part. Under strict
isolation the scans are filtered to the readable lanes (iterative HNSW scans), so that no other
lane's volume can push readable records out of the nearest."""

from .. import fragments
from ..lists.base import CandidateList, planned
from ..lists.fetched import FetchedList
from ..plans import ListPlan
from ..reader import Reader


def record_vectors(reader: Reader) -> CandidateList:
    sql = f"""
        select rv.record_id, {reader.vector_distance_sql("rv.embedding")} as distance, null::bigint[] as windows
        from emem.record_vectors as rv
        where rv.space_id = {reader.space.space_id:d}{fragments.in_lanes("rv.lane_name", reader.lanes_sql)}
        order by distance limit $2"""
    count = reader.request.candidate_counts["record_vectors"]
    return planned(nearest(reader, sql, count), ListPlan("whole", f"the nearest {count} record vectors (HNSW)"))


def window_vectors(reader: Reader) -> CandidateList:
    lanes = fragments.in_lanes("w.lane_name", reader.lanes_sql)
    sql = f"""
        with nearest as (
            select w.window_id, {reader.vector_distance_sql("w.embedding")} as distance
            from emem.windows as w
            where w.space_id = {reader.space.space_id:d} and w.embedding is not null{lanes}
            order by distance limit $2
        )
        select m.record_id, pg_catalog.min(n.distance) as distance,
               pg_catalog.array_agg(n.window_id order by n.distance, n.window_id) as windows
        from nearest as n join emem.window_members as m on m.window_id = n.window_id
        group by m.record_id
        order by distance, record_id"""
    count = reader.request.candidate_counts["window_vectors"]
    plan = ListPlan("whole", f"the records of the nearest {count} windows (HNSW)")
    return planned(nearest(reader, sql, count), plan)


def nearest(reader: Reader, sql: str, count: int) -> FetchedList:
    """An HNSW scan of `count` rows: ef_search must be at least that for the index to return them;
    a scan filtered to some lanes goes on until it has them (iterative scan)."""
    scan = {"hnsw.iterative_scan": "strict_order"} if reader.lanes_sql is not None else {}
    return FetchedList(reader.scan("vectors.nearest", sql, count, count, scan))
