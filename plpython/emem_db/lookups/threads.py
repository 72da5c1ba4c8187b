"""The thread around exact hits (opt-in): the turns of a conversation, or the chunks of a file,
around a record that holds a rare question term (a code, a figure, a rare name).

A conversation about an invoice names its number once; the turns around it ("we agreed to split
it") say what was decided without repeating it, and no exact lookup finds them. This lookup
takes the records of a thread that hold one of the question's rare full-text terms (on at most
Tuning.anchor_frequency records) as anchors, the most telling first (summed IDF of the rare terms
they hold, at most Tuning.max_anchors), and brings the records of the same thread within
Tuning.thread_radius positions of an anchor: by the anchor's IDF, then by how far from it, then by
distance (degraded: by position, then record id). Dates stay out of the order.
"""

from typing import Any

from .. import fragments
from ..lists.base import CandidateList, planned
from ..lists.fetched import FetchedList
from ..lookups.fulltext import anchor_score, holds_a_rare_term, rare_terms
from ..merge import Candidate
from ..plans import ListPlan
from ..reader import Reader, distance_key


def thread_context(reader: Reader) -> CandidateList:
    tuning = reader.tuning
    rare = rare_terms(reader, tuning.anchor_frequency)
    if not rare.queries:
        return planned(
            FetchedList([]),
            ListPlan("empty", f"no term of the question is on at most {tuning.anchor_frequency} records"),
        )
    anchors = reader.execute(
        "threads.anchors",
        f"""select r.lane_name, r.kind::text as kind, r.thread_id, r.thread_position, {anchor_score("r")} as score
            from emem.records as r
            where {holds_a_rare_term("r")}
              and r.thread_id is not null{fragments.in_lanes("r.lane_name", reader.lanes_sql)}
            order by score desc, r.record_id
            limit {tuning.max_anchors:d}""",
        ["tsquery[]", "float8[]"],
        [rare.queries, rare.weights],
    )
    plan = ListPlan("whole", f"the threads around the records of {len(rare.queries)} rare terms")
    return planned(FetchedList(around_anchors(reader, anchors)), plan)


def around_anchors(reader: Reader, anchors: list[dict[str, Any]]) -> list[Candidate]:
    """The records of each anchor's thread within Tuning.thread_radius positions of it: by the
    anchor's score, then steps from it (a record near several: its best), then distance (degraded:
    none), then position, then record id."""
    if not anchors:
        return []
    radius, plpy = reader.tuning.thread_radius, reader.plpy
    near = " or ".join(
        f"""(n.lane_name = {plpy.quote_literal(a["lane_name"])} and n.kind = {plpy.quote_literal(a["kind"])}
             and n.thread_id = {plpy.quote_literal(a["thread_id"])}
             and n.thread_position between {a["thread_position"] - radius:d} and {a["thread_position"] + radius:d})"""
        for a in anchors
    )
    rows = reader.execute(
        "threads.around",
        f"""select n.record_id, n.lane_name, n.kind::text as kind, n.thread_id, n.thread_position
            from emem.records as n where {near}""",
        [],
        [],
        cache=False,
    )
    best: dict[int, tuple[float, int, int]] = {}  # record -> (-score, steps, position)
    for row in rows:
        for a in anchors:
            if (row["lane_name"], row["kind"], row["thread_id"]) == (a["lane_name"], a["kind"], a["thread_id"]):
                steps = abs(row["thread_position"] - a["thread_position"])
                if steps <= radius:
                    key = (-float(a["score"]), steps, row["thread_position"])
                    best[row["record_id"]] = min(best.get(row["record_id"], key), key)
    distances = reader.distances(best)
    ordered = sorted(best, key=lambda r: (best[r][0], best[r][1], *distance_key(distances[r]), best[r][2], r))
    return [Candidate(record_id, distances[record_id]) for record_id in ordered]
