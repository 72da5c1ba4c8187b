"""Edges a question names (by a relation name or a property value, their labels), seen per
question term their matched labels hold, and the records that end them: the tags lookup's edge
candidates.

The labels a question matches come from the label vocabulary; their ends from emem.edge_labels,
which holds a row per end of an edge and label, with the far end and both lanes. So a label's
distinct ends come in record-id order from one index range, however many edges share it. Within
lanes (strict isolation) an edge counts only when both its ends lie in them (an edge carries the
secrecy of both its ends): the same rows, read lane first.

A term whose matched labels end at most Reader.probed_limit records is narrow: its ends are
gathered. A broad term is read through predicates, in record-id order or by a filtered scan, and
its ends are counted only up to what the totals need.
"""

from dataclasses import dataclass, field
from typing import Any

from .. import fragments
from ..lists.base import Size
from ..lists.tiered import Part
from ..reader import Reader
from ..sets import AnyOf, FarTagged, LabelEnds, Listed, RecordSet

# What a matched edge adds to the score of the records it ends at: less than one term, so that
# more terms matched still come first, but a record an edge's relation or property names ranks
# above every record that matches the same number of terms through tags only. A matched edge also
# gives each end the terms the question matches in the other end's tags: "the release captain of
# project Kestrel" is the record at the other end of a `release captain` edge from the record
# tagged `project kestrel`.
EDGE_BONUS = 0.5


@dataclass(frozen=True)
class EdgeMatch:
    """The edges whose labels the question's terms match, per term those labels hold: the ends of
    the edges whose labels hold a narrow term (gathered), and the broad terms with their labels and
    what is known of the number of their ends."""

    narrow_terms: list[str]
    narrow_endpoints: list[int]
    broad_terms: list[str]
    broad_sizes: list[Size]
    # Whether a label's `key:` namespace must be among the question's terms (the seed's tags
    # lookup) or not (the opt-in components): see analysis.Analyser.namespace_terms.
    namespaced: bool
    # The matched labels holding each broad term.
    broad_labels: list[list[str]] = field(default_factory=list)
    # Every matched label (of any term) but those of stop words only: their edges count only at
    # `grammar_records`, records holding a matched tag (see grammar).
    labels: list[str] = field(default_factory=list)
    grammar_labels: list[str] = field(default_factory=list)
    grammar_records: list[int] = field(default_factory=list)
    # Both ends of those edges.
    grammar_ends: list[int] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.narrow_terms or self.broad_terms)

    @property
    def size(self) -> Size:
        return Size.of_union([Size.exactly(len(self.narrow_endpoints)), *self.broad_sizes])


def matched_labels(reader: Reader, terms: list[str], namespaced: bool) -> dict[str, frozenset[str]]:
    """The labels of the vocabulary the question's terms match, with their terms (within lanes:
    the labels of those lanes' edges), those made of stop words only among them (see grammar)."""
    rows = reader.execute(
        "edges.matched_labels",
        f"""select distinct v.label, v.label_terms from emem.edge_label_vocabulary as v
            where {fragments.labels_within("v.label_terms", "$1", "v.namespace_terms" if namespaced else None)}
                  {fragments.in_lanes("v.lane_name", reader.lanes_sql)}""",
        ["text[]"],
        [terms],
    )
    return {row["label"]: frozenset(row["label_terms"]) for row in rows}


def grammar(reader: Reader, labels: dict[str, frozenset[str]]) -> list[str]:
    """The matched labels made of the question's stop words only. A question's "about" or "with"
    is grammar unless it relates what the question names ("What do we know about Kestrel?": the
    edges `about` the record tagged `kestrel`): such a label counts only for its edges at a record
    holding a tag the question matches (grammar_edges), never for every edge of that name."""
    stop_words = frozenset(reader.request.analysis.stop_words)
    return sorted(label for label, held in labels.items() if held <= stop_words)


def grammar_edges(reader: Reader, labels: list[str], tags: list[str], counts: list[int]) -> list[tuple[int, int]]:
    """The edges (record, far record) with one of these labels at a record holding one of these
    tags (`counts`: their records), probed from those records. None when the tags hold more than
    Tuning.grammar_tag_records records or the edges are more than that: a stop word then names
    nothing precise enough to follow (the same however far a page reaches)."""
    limit = reader.tuning.grammar_tag_records
    if not (labels and tags) or sum(counts) > limit:
        return []
    lanes = fragments.in_lanes("rt.lane_name", reader.lanes_sql)
    rows = reader.execute(
        "edges.grammar_edges",
        f"""select el.record_id, el.far_record_id
            from emem.record_tags as rt
            join emem.edge_labels as el on el.record_id = rt.record_id and el.lane_name = rt.lane_name
            where rt.tag operator(pg_catalog.=) any ($2) and el.label operator(pg_catalog.=) any ($1)
                  {lanes}{reader.sets.ends_within()}
            group by el.record_id, el.far_record_id
            order by el.record_id, el.far_record_id limit $3""",
        ["text[]", "text[]", "bigint"],
        [labels, tags, limit + 1],
    )
    return [(row["record_id"], row["far_record_id"]) for row in rows] if len(rows) <= limit else []


def edge_match(reader: Reader, terms: list[str], namespaced: bool, tags: list[str], counts: list[int]) -> EdgeMatch:
    """The matched labels (`tags`: the tags the terms match, `counts` their records), and each
    term's ends counted up to probed_limit + 1 (a term whose labels end no record any more is not
    matched). A label of stop words only brings the ends of its edges at the matched tags' records
    (grammar), as a narrow term."""
    found = matched_labels(reader, terms, namespaced)
    stop_labels = grammar(reader, found)
    labels = {label: held for label, held in found.items() if label not in stop_labels}
    at_tags = grammar_edges(reader, stop_labels, tags, counts)
    holding = {term: sorted(label for label, held in labels.items() if term in held) for term in terms}
    limit = reader.probed_limit
    counted = {term: ends_up_to(reader, held, limit + 1) for term, held in holding.items() if held}
    narrow = [term for term in terms if 0 < counted.get(term, 0) <= limit]
    broad = [term for term in terms if counted.get(term, 0) > limit]
    if at_tags:
        stop_terms = frozenset().union(*(found[label] for label in stop_labels))
        narrow += [term for term in terms if term in stop_terms and term not in narrow + broad]
    narrow_labels = sorted({label for term in narrow for label in holding.get(term, [])})
    endpoints = set(label_ends(reader, narrow_labels)) if narrow_labels else set()
    endpoints.update(record for edge in at_tags for record in edge)
    return EdgeMatch(
        narrow,
        sorted(endpoints),
        broad,
        [Size(counted[term]) for term in broad],
        namespaced,
        [holding[term] for term in broad],
        sorted(label for label in labels if any(label in holding[term] for term in narrow + broad)),
        stop_labels if at_tags else [],
        sorted({record for record, _ in at_tags}),
        sorted({record for edge in at_tags for record in edge}),
    )


# ---- the ends of labels ----------------------------------------------------------------------------------


def ends_up_to(reader: Reader, labels: list[str], limit: int) -> int:
    """How many records end an edge with one of these labels, counted up to a limit: each label's
    up to the limit from its index range; their union only when each holds fewer."""
    most = 0
    for label in labels:
        most = max(most, label_ends_up_to(reader, label, limit))
        if most >= limit:
            break
    if most >= limit or len(labels) == 1:
        return min(most, limit)
    # Each label holds fewer than the limit: their union is counted whole, in SQL.
    union: int = reader.execute(
        "edges.ends_up_to",
        f"""select pg_catalog.count(distinct el.record_id) as n from emem.edge_labels as el
            where el.label operator(pg_catalog.=) any ($1){reader.sets.ends_within()}""",
        ["text[]"],
        [labels],
    )[0]["n"]
    return min(union, limit)


def label_ends_up_to(reader: Reader, label: str, limit: int) -> int:
    """How many records end an edge with this label, up to a limit; counted once per request as
    far as it was asked for (a count below its limit is exact; one that reached it holds for any
    limit up to that one)."""
    known = reader.counted_ends.get(label)
    if known is not None and (known[0] < known[1] or limit <= known[1]):
        return min(known[0], limit)
    # The totals count the same ends up to their bound: a limit within half of it counts that
    # far at once (with a vector the plan's 8,125 and the totals' 10,001 were two index reads).
    bound = reader.request.totals_bound + 1
    counting_to = bound if limit < bound <= 2 * limit else limit
    counted: int = reader.execute(
        "edges.label_ends_up_to",
        f"""select pg_catalog.count(*) as n from (
                select distinct el.record_id from emem.edge_labels as el
                where el.label = $1{reader.sets.ends_within()} limit $2) as r""",
        ["text", "bigint"],
        [label, counting_to],
    )[0]["n"]
    reader.counted_ends[label] = (counted, counting_to)
    return min(counted, limit)


def label_ends(reader: Reader, labels: list[str]) -> list[int]:
    """Every record that ends an edge with one of these labels."""
    rows = reader.execute(
        "edges.label_ends",
        f"""select distinct el.record_id from emem.edge_labels as el
            where el.label operator(pg_catalog.=) any ($1){reader.sets.ends_within()}""",
        ["text[]"],
        [labels],
    )
    return [row["record_id"] for row in rows]


# ---- what the tags lookup asks of a match ------------------------------------------------------------


def broad_labels_of(edges: EdgeMatch) -> tuple[str, ...]:
    return tuple(sorted({label for labels in edges.broad_labels for label in labels}))


def broad_ends_up_to(reader: Reader, edges: EdgeMatch, limit: int) -> list[int]:
    """Each broad term's ends, counted up to a limit."""
    return [ends_up_to(reader, labels, limit) for labels in edges.broad_labels]


def matched_edge_ends(edges: EdgeMatch) -> RecordSet:
    """The records an edge the question's terms name ends at: the narrow terms' ends are at hand,
    the broad ones' probed."""
    if not edges.broad_terms:
        return Listed(tuple(edges.narrow_endpoints))
    return AnyOf((Listed(tuple(edges.narrow_endpoints)), LabelEnds(broad_labels_of(edges))))


def linked_ends(reader: Reader, tags: list[str], edges: EdgeMatch) -> list[int]:
    """The far ends of the matched edges at the records holding one of these (narrow) tags, probed
    from those records through the label rows' index."""
    rows = reader.execute(
        "edges.linked_ends",
        f"""select distinct e.far_record_id
            from ({fragments.tagged("$1", reader.lanes_sql)}) as n
            cross join lateral {reader.sets.edges_at("n.record_id", "$2")} as e""",
        ["text[]", "text[]"],
        [tags, edges.labels],
    )
    return [row["far_record_id"] for row in rows]


def edge_part(edges: EdgeMatch, index: int, score_key: Any) -> Part:
    """The broad edge term `edges.broad_terms[index]`: the ends of the matched edges whose label
    holds it, in record-id order. Every matched label of such an end is made of broad terms (a
    narrow one's ends are read whole), so the parts it holds give its label terms."""
    return Part(LabelEnds(tuple(edges.broad_labels[index])), Size(edges.broad_sizes[index].lower), score_key)


def far_tag_part(edges: EdgeMatch, tag: str, score_key: Any) -> Part:
    """The ends of matched edges whose other end carries a broad tag: such an end scores the tag's
    terms through the edge. Each of them also ends a broad edge term's edge (a narrow term's ends,
    and the far ends of a narrowly tagged record, are read whole), so the part is only probed: its
    size is unknown, and a tier walks one of its edge parts instead."""
    return Part(FarTagged(tuple(edges.labels), (tag,)), Size(0), score_key)


def grammar_edge_rows(reader: Reader, labels: str, records: str, ends: str) -> str:
    """The rows (record_id, label_terms, far_record_id) of both ends of each edge with one of the
    stop-word labels at one of the records holding a matched tag (EdgeMatch.grammar_*, as arrays'
    SQL), probed by their ends (a label's rows could be many)."""
    return f"""select el.record_id, el.label_terms, el.far_record_id from emem.edge_labels as el
               where el.record_id operator(pg_catalog.=) any ({ends})
                 and el.label operator(pg_catalog.=) any ({labels})
                 and (el.record_id operator(pg_catalog.=) any ({records})
                      or el.far_record_id operator(pg_catalog.=) any ({records})){reader.sets.ends_within()}"""


def visible_ends(reader: Reader, record_id: str, labels: str, lanes: str, lane: str) -> str:
    """A matched edge (its label one of `labels`) both of whose ends lie in `lanes` ends at the record
    (its id and its lane, SQL expressions)."""
    within = fragments.in_lanes("el.far_lane_name", lanes)
    return f"""exists (select 1 from emem.edge_labels as el
                       where el.lane_name = {lane} and el.record_id = {record_id}
                         and el.label operator(pg_catalog.=) any ({labels}){within}{fragments.PROBE})"""
