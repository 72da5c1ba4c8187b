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

from .. import fragments
from ..lists.base import CandidateList, planned
from ..lists.fetched import FetchedList
from ..lookups.fulltext import document_frequencies, inverse_document_frequency, term_queries
from ..plans import ListPlan
from ..reader import Reader


def thread_context(reader: Reader) -> CandidateList:
    terms = term_queries(reader, [[term] for term in reader.request.analysis.unknown_terms])
    found = document_frequencies(reader, terms.queries)
    records, frequencies = found.records, found.frequencies
    tuning = reader.tuning
    rare = [n for n, df in enumerate(frequencies) if df <= tuning.anchor_frequency]
    if not rare:
        return planned(
            FetchedList([]),
            ListPlan("empty", f"no term of the question is on at most {tuning.anchor_frequency} records"),
        )
    lanes = reader.lanes_sql
    sql = f"""
        with term (q, idf) as (
            select * from rows from (pg_catalog.unnest($1::tsquery[]), pg_catalog.unnest($2::float8[]))
        ), anchor as (
            select r.lane_name, r.kind, r.thread_id, r.thread_position,
                   (select pg_catalog.sum(t.idf) from term as t
                    where r.content_search operator(pg_catalog.@@) t.q) as score
            from emem.records as r
            where r.content_search operator(pg_catalog.@@) (select emem._tsquery_any(t.q) from term as t)
              and r.thread_id is not null{fragments.in_lanes("r.lane_name", lanes)}
            order by score desc, r.record_id
            limit {tuning.max_anchors:d}
        ), around as (
            select n.record_id, n.thread_position, a.score,
                   pg_catalog.abs(n.thread_position - a.thread_position) as steps
            from anchor as a
            join emem.records as n
              on n.lane_name = a.lane_name and n.kind = a.kind and n.thread_id = a.thread_id
             and n.thread_position between a.thread_position - {tuning.thread_radius:d}
                                       and a.thread_position + {tuning.thread_radius:d}
        ), found as (
            select distinct on (record_id) record_id, thread_position, score, steps from around
            order by record_id, score desc, steps
        )
        select found.record_id, {reader.distance_sql("$3")} as distance from found
        order by found.score desc, found.steps, distance nulls last, found.thread_position, found.record_id"""
    plan = ListPlan("whole", f"the threads around the records of {len(rare)} rare terms")
    return planned(
        FetchedList(
            reader.candidates(
                "threads.thread_context",
                sql,
                ["tsquery[]", "float8[]", "public.vector"],
                [
                    [terms.queries[n] for n in rare],
                    [inverse_document_frequency(records, frequencies[n]) for n in rare],
                    reader.request.vector,
                ],
            )
        ),
        plan,
    )
