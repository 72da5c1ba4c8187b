"""The records linked to exact hits (opt-in): the far ends of the edges at a record that holds a
rare question term (a code, a figure, a rare name).

What a key means often lives elsewhere than the record holding it: the invoice holds the figure,
the order it `settles` says what was bought; the employee's record holds the full name, the
project they `lead` says what they work on. Neither far end repeats the key, and most lie in
another thread than the key's record (or in none), where thread_context cannot reach. This lookup
takes the records holding one of the question's rare full-text terms (on at most
Tuning.link_anchor_frequency records) that end an edge as anchors, the most telling first (summed IDF
of the rare terms they hold, at most Tuning.max_anchors), and brings the records at the other end
of their edges, either direction: by the best anchor's IDF, then distance (degraded: record id),
at most Tuning.max_linked of them, from at most Tuning.max_anchor_links links of each anchor.

An edge counts only when both its ends lie in the lanes read (an edge carries the secrecy of both
its ends): within lanes (strict isolation) the statement keeps to them; under the page filter
visible_members says which records a caller's lanes reach.
"""

from .. import fragments
from ..fragments import quoted_array
from ..lists.base import CandidateList, planned
from ..lists.fetched import FetchedList
from ..lookups.fulltext import RareTerms, anchor_score, holds_a_rare_term, rare_terms
from ..plans import ListPlan
from ..reader import Reader
from ..sets import SetSql


def linked_records(reader: Reader) -> CandidateList:
    rare = rare_terms(reader, reader.tuning.link_anchor_frequency)
    if not rare.queries:
        return planned(
            FetchedList([]),
            ListPlan("empty", f"no term of the question is on at most {reader.tuning.link_anchor_frequency} records"),
        )
    candidates = reader.candidates(
        "links.linked_records",
        linked_sql(reader),
        ["tsquery[]", "float8[]"] + ([] if reader.degraded else ["public.vector"]),
        [rare.queries, rare.weights] + ([] if reader.degraded else [reader.request.vector]),
    )
    plan = ListPlan("whole", f"the records linked to the records of {len(rare.queries)} rare terms")
    return planned(FetchedList(candidates), plan)


def anchors_sql(reader: Reader, lanes: str | None) -> str:
    """The anchors (record_id, lane_name, score): the records of the rare terms ($1, their IDFs $2)
    that end an edge whose ends both lie in `lanes`, the most telling first. A record holding a rare
    term but no edge is no anchor, so that it leaves its place to one that has links."""
    within = SetSql(reader.plpy, lanes).ends_within()
    edge = f"""exists (select 1 from emem.edge_labels as el
                       where el.record_id = r.record_id and el.lane_name = r.lane_name{within})"""
    return f"""select r.record_id, r.lane_name, {anchor_score("r")} as score
               from emem.records as r
               where {holds_a_rare_term("r")}{fragments.in_lanes("r.lane_name", lanes)} and {edge}
               order by score desc, r.record_id
               limit {reader.tuning.max_anchors:d}"""


def linked_sql(reader: Reader) -> str:
    """The far ends of the anchors' edges, each with its best anchor's score and its distance to
    the question vector ($3; degraded: none), in the list's order. A label row per end and label
    of an edge: the far ends are grouped."""
    space = "" if reader.degraded else f"{reader.space.space_id:d}"
    distance = (
        "null::float8"
        if reader.degraded
        else f"""(select rv.embedding operator(public.<=>) $3::public.vector from emem.record_vectors as rv
                  where rv.space_id = {space} and rv.record_id = l.record_id)"""
    )
    return f"""
        with anchor as ({anchors_sql(reader, reader.lanes_sql)}
        ), anchor_links as (
            select el.far_record_id, a.score,
                   pg_catalog.row_number() over (partition by a.record_id order by el.far_record_id) as n
            from anchor as a
            join emem.edge_labels as el on el.record_id = a.record_id and el.lane_name = a.lane_name
            where true{reader.sets.ends_within()}
        ), linked as (
            -- a hub's first max_anchor_links links by record id: their distances are the cost
            select l.far_record_id as record_id, pg_catalog.max(l.score) as score
            from anchor_links as l where l.n <= {reader.tuning.max_anchor_links:d}
            group by l.far_record_id
        ), measured as (
            select l.record_id, l.score, {distance} as distance from linked as l
        )
        select m.record_id, m.distance, m.score::float8 as score from measured as m
        order by m.score desc, m.distance nulls last, m.record_id
        limit {reader.tuning.max_linked:d}"""


def visible_members(reader: Reader, record_ids: list[int], lanes: list[str]) -> set[int]:
    """Which of these records the list holds for a caller reading only `lanes` (the page filter):
    those linked, by an edge both of whose ends lie in those lanes, to one of the list's anchors
    (chosen over every lane, as the list was) that lies in them."""
    rare: RareTerms = rare_terms(reader, reader.tuning.link_anchor_frequency)
    if not rare.queries or not record_ids:
        return set()
    readable = quoted_array(reader.plpy, lanes, "text") if lanes else "array[]::text[]"
    rows = reader.execute(
        "links.visible_members",
        f"""with anchor as ({anchors_sql(reader, None)})
            select distinct el.far_record_id as id
            from anchor as a
            join emem.edge_labels as el on el.record_id = a.record_id and el.lane_name = a.lane_name
            where el.far_record_id operator(pg_catalog.=) any ($3){SetSql(reader.plpy, readable).ends_within()}""",
        ["tsquery[]", "float8[]", "bigint[]"],
        [rare.queries, rare.weights, record_ids],
        cache=False,
    )
    return {row["id"] for row in rows}
