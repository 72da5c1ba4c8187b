"""The neighbours by meaning of exact hits (opt-in): the conversation turns and file chunks whose
vectors are nearest the vector of a record, in no thread, that holds a rare question term (a code,
a figure, a rare name).

"What went wrong with PO-4471?" is far by meaning from the turn that tells it (it names the vendor
and the goods, never the code), but the order holding the code is near that turn. This lookup
takes the records in no thread holding one of the question's rare full-text terms (on at most
Tuning.link_anchor_frequency records) with a vector in the active space as anchors, the most
telling first (summed IDF, at most Tuning.neighbour_anchors), and brings each anchor's
Tuning.neighbours_per_anchor nearest records in a thread among its Tuning.neighbour_scan nearest
records: by the anchor's IDF, then nearness to the anchor, then distance to the question. A record
in a thread has thread_context for its context; a note's nearest notes are its near-duplicates,
which the exact lookups rank already. It needs no question vector: the anchors' stored vectors
are the query, so it runs degraded too.

Within lanes (strict isolation) the anchors and the scans keep to them (an iterative HNSW scan).
Under the page filter a neighbour is held for a caller only through an anchor it reads
(visible_members): a record of another lane tells nothing through its vector.
"""

from typing import Any

from .. import fragments
from ..fragments import quoted_array
from ..lists.base import CandidateList, planned
from ..lists.fetched import FetchedList
from ..lookups.fulltext import anchor_score, holds_a_rare_term, rare_terms
from ..merge import Candidate
from ..plans import ListPlan
from ..reader import Reader, Space, distance_key


def neighbours_of_hits(reader: Reader) -> CandidateList:
    space = reader.request.space
    rare = rare_terms(reader, reader.tuning.link_anchor_frequency)
    if space is None or not rare.queries:
        reason = "no active space" if space is None else "no term of the question is rare enough"
        return planned(FetchedList([]), ListPlan("empty", reason))
    rows = neighbour_rows(reader, space, [rare.queries, rare.weights], None)
    plan = ListPlan("whole", f"the nearest records of the records of {len(rare.queries)} rare terms (HNSW)")
    return planned(FetchedList(ordered(reader, rows)), plan)


def neighbour_rows(reader: Reader, space: Space, args: list[Any], readable: str | None) -> list[dict[str, Any]]:
    """Each neighbour with its best anchor's score and its distance to that anchor (of anchors that
    score alike, the nearest). Each anchor's
    Tuning.neighbour_scan nearest records come from the space's HNSW index (filtered to the lanes
    read: an iterative scan), of which the nearest neighbours_per_anchor in a thread are kept.
    `readable`: only the anchors and neighbours in these lanes (an array's SQL), of the same scans."""
    tuning, lanes = reader.tuning, reader.lanes_sql
    vector = f"public.vector({space.dimension:d})"
    kept = "" if readable is None else f" where true{fragments.in_lanes('a.lane_name', readable)}"
    sql = f"""
        with anchor as (
            select r.record_id, r.lane_name, rv.embedding, {anchor_score("r")} as score
            from emem.records as r
            join emem.record_vectors as rv on rv.space_id = {space.space_id:d} and rv.record_id = r.record_id
            where {holds_a_rare_term("r")} and r.thread_id is null{fragments.in_lanes("r.lane_name", lanes)}
            order by score desc, r.record_id
            limit {tuning.neighbour_anchors:d}
        ), kept as (select * from anchor as a{kept})
        select distinct on (n.record_id) n.record_id, a.score, n.distance
        from kept as a
        cross join lateral (
            select s.record_id, s.distance
            from (select v.record_id, v.lane_name,
                         (v.embedding::{vector} operator(public.<=>) a.embedding::{vector}) as distance
                  from emem.record_vectors as v
                  where v.space_id = {space.space_id:d}{fragments.in_lanes("v.lane_name", lanes)}
                  order by distance
                  limit {tuning.neighbour_scan:d}) as s
            join emem.records as o on o.record_id = s.record_id and o.lane_name = s.lane_name
            where o.thread_id is not null{fragments.in_lanes("o.lane_name", readable)}
            order by s.distance, s.record_id
            limit {tuning.neighbours_per_anchor:d}
        ) as n
        order by n.record_id, a.score desc, n.distance"""
    # relaxed: the scan goes on past records of other lanes; the rows are ordered again above
    with reader.locally({"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": f"{tuning.neighbour_scan:d}"}):
        return reader.execute("neighbours.of_hits", sql, ["tsquery[]", "float8[]"], args)


def ordered(reader: Reader, rows: list[dict[str, Any]]) -> list[Candidate]:
    """By the best anchor's score, then nearness to it, then distance to the question (degraded:
    none), then record id."""
    distances = reader.distances(row["record_id"] for row in rows)
    rows = sorted(
        rows,
        key=lambda row: (
            -float(row["score"]),
            float(row["distance"]),
            *distance_key(distances[row["record_id"]]),
            row["record_id"],
        ),
    )
    return [Candidate(row["record_id"], distances[row["record_id"]]) for row in rows]


def visible_members(reader: Reader, record_ids: list[int], lanes: list[str]) -> set[int]:
    """Which of these records the list holds for a caller reading only `lanes` (the page filter):
    the neighbours, in those lanes, of the list's anchors (chosen over every lane) that lie in them."""
    space = reader.request.space
    rare = rare_terms(reader, reader.tuning.link_anchor_frequency)
    if space is None or not rare.queries or not lanes:
        return set()
    readable = quoted_array(reader.plpy, lanes, "text")
    rows = neighbour_rows(reader, space, [rare.queries, rare.weights], readable)
    return {row["record_id"] for row in rows}.intersection(record_ids)
