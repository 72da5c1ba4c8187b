"""The two vector lookups: the nearest record vectors and window vectors of the active space,
by HNSW; a window adds every record it was made from, at the window's distance."""

from emem_db.lists.fetched import FetchedList
from emem_db.reader import Reader


def record_vectors(reader: Reader) -> FetchedList:
    sql = f"""
        select record_id, {reader.vector_distance_sql("embedding")} as distance
        from emem.record_vectors where space_id = {reader.space.space_id:d}
        order by distance limit $2"""
    return nearest(reader, sql, reader.request.candidate_counts["record_vectors"])


def window_vectors(reader: Reader) -> FetchedList:
    sql = f"""
        with nearest as (
            select window_id, {reader.vector_distance_sql("embedding")} as distance
            from emem.windows where space_id = {reader.space.space_id:d}
            order by distance limit $2
        )
        select m.record_id, pg_catalog.min(n.distance) as distance,
               pg_catalog.array_agg(n.window_id order by n.distance, n.window_id) as windows
        from nearest as n join emem.window_members as m on m.window_id = n.window_id
        group by m.record_id
        order by distance, record_id"""
    return nearest(reader, sql, reader.request.candidate_counts["window_vectors"])


def nearest(reader: Reader, sql: str, count: int) -> FetchedList:
    """An HNSW scan of `count` rows: ef_search must be at least that for the index to return them."""
    current = int(reader.execute("select pg_catalog.current_setting('hnsw.ef_search') as value", [], [])[0]["value"])
    with reader.settings({"hnsw.ef_search": str(max(count, current))}):
        return FetchedList(reader.candidates(sql, ["public.vector", "int"], [reader.request.vector, count]))
