"""Edges a question names (by a relation name or a property value, their labels), seen per
question term their matched labels hold, and the records that end them: the tags lookup's edge
candidates.

A term whose matched edges end at most Reader.probed_limit records is narrow: its ends are
gathered. A broad term is read through predicates, in record-id order or by a filtered scan,
and its ends are counted only up to what the totals need.

Under the seed's rule (every lane) a question's labels come from the label vocabulary and their
ends from edge_label_ends: one row per label and end, in record-id order, however many edges a
label has. Within lanes (strict isolation) an edge counts only when both its ends lie in them,
which those tables do not know: the labels are read through their lane-qualified terms and the
edges probed.
"""

from dataclasses import dataclass
from typing import Any

from emem_db import fragments
from emem_db.fragments import quoted_array
from emem_db.lists.base import Predicate, Size
from emem_db.lists.tiered import Part
from emem_db.reader import Reader

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
    the edges whose labels hold a narrow term (gathered), and the broad terms with what is known
    of the number of their edges' ends."""

    narrow_terms: list[str]
    narrow_endpoints: list[int]
    broad_terms: list[str]
    broad_sizes: list[Size]
    # Whether a label's `key:` namespace must be among the question's terms (the seed's tags
    # lookup) or not (the opt-in components): see analysis.Analyser.namespace_terms.
    namespaced: bool
    # Under the seed's rule, the matched labels holding each broad term (their ends are read from
    # edge_label_ends); None within lanes.
    broad_labels: list[list[str]] | None = None

    @property
    def found(self) -> bool:
        return bool(self.narrow_terms or self.broad_terms)

    @property
    def size(self) -> Size:
        return Size.of_union([Size.exactly(len(self.narrow_endpoints)), *self.broad_sizes])


def edge_match(reader: Reader, terms: list[str], namespaced: bool) -> EdgeMatch:
    """The matched edges per question term: by label (every lane) or by the lanes' labels."""
    if reader.request.lanes is None:
        return edge_match_by_label(reader, terms, namespaced)
    return edge_match_within_lanes(reader, terms, namespaced)


def edge_match_by_label(reader: Reader, terms: list[str], namespaced: bool) -> EdgeMatch:
    """The matched labels from the label vocabulary; each term's ends counted up to probed_limit + 1
    from edge_label_ends (a term whose labels end no record any more is not matched)."""
    rows = reader.execute(
        f"""select distinct v.label, v.label_terms from emem.edge_label_vocabulary as v
            where {fragments.labels_within("v.label_terms", "$1", "v.namespace_terms" if namespaced else None)}""",
        ["text[]"],
        [terms],
    )
    holding = {term: [row["label"] for row in rows if term in row["label_terms"]] for term in terms}
    limit = reader.probed_limit
    counted = {term: ends_up_to(reader, labels, limit + 1) for term, labels in holding.items() if labels}
    narrow = [term for term in terms if 0 < counted.get(term, 0) <= limit]
    broad = [term for term in terms if counted.get(term, 0) > limit]
    narrow_labels = sorted({label for term in narrow for label in holding[term]})
    return EdgeMatch(
        narrow,
        label_ends(reader, narrow_labels) if narrow_labels else [],
        broad,
        [Size(counted[term]) for term in broad],
        namespaced,
        [holding[term] for term in broad],
    )


def edge_match_within_lanes(reader: Reader, terms: list[str], namespaced: bool) -> EdgeMatch:
    """Each term's labels within the caller's lanes read up to probed_limit + 1: a term with more is
    broad. A term whose lane-qualified terms the labels' statistics (their most common values,
    whole) put beyond probed_limit is broad without that reading. The statistics only spare that
    reading, they decide no answer."""
    limit = reader.probed_limit
    labels = reader.rows_of("edge_labels")
    lanes = list(reader.request.lanes or ())
    common = reader.common_arrays("edge_labels", "lane_terms")
    spelled = {term: {fragments.LANE_TERM.format(lane=lane, term=term) for lane in lanes} for term in terms}
    question = set().union(*spelled.values())
    within = [(held, share) for held, share in common.items() if held <= question]
    estimated = {term: sum(share for held, share in within if held & spelled[term]) * labels for term in terms}
    to_read = [term for term in terms if estimated[term] <= limit]
    rows = reader.execute(
        f"""select t.term, pg_catalog.count(*) as labels,
                   pg_catalog.array_agg(m.from_record_id) operator(pg_catalog.||) pg_catalog.array_agg(m.to_record_id)
                       as ends
            from pg_catalog.unnest($2::text[]) as t (term)
            cross join lateral ({edges_holding(reader, "t.term", "$1", "$3", namespaced)}) as m
            group by t.term""",
        ["text[]", "text[]", "bigint"],
        [terms, to_read, limit + 1],
    )
    read = {row["term"]: (row["labels"], set(row["ends"])) for row in rows}
    narrow = [term for term in to_read if term in read and read[term][0] <= limit]
    broad = [term for term in terms if term not in to_read or (term in read and term not in narrow)]
    return EdgeMatch(
        narrow,
        sorted(set().union(*(read[term][1] for term in narrow))),
        broad,
        [Size(len(read[term][1])) if term in read else Size(0) for term in broad],
        namespaced,
    )


def edges_holding(reader: Reader, term: str, terms: str, limit: str, namespaced: bool) -> str:
    """The ends (from_record_id, to_record_id) of at most `limit` matched edges within the caller's
    lanes whose label holds `term` (SQL expressions each)."""
    lanes = reader.lanes_sql
    return f"""select el.from_record_id, el.to_record_id from emem.edge_labels as el
               where el.lane_terms operator(pg_catalog.&&) emem._lane_qualified({lanes}, array[{term}])
                 and {fragments.edge_labels_within(terms, namespaced, lanes)}
               limit {limit}"""


# ---- the ends of labels (every lane) ------------------------------------------------------------------

# A broad term held by more labels than this has its ends read unordered (a union per label
# gives them in record-id order, one index range each).
MAX_ORDERED_LABELS = 20


def ends_up_to(reader: Reader, labels: list[str], limit: int) -> int:
    """How many records end an edge with one of these labels, counted up to a limit: each label's
    up to the limit from its index range; their union only when each holds fewer."""
    row = reader.execute(
        """select pg_catalog.max(c.n) as most from pg_catalog.unnest($1::text[]) as l (label)
           cross join lateral (select pg_catalog.count(*) as n from (select from emem.edge_label_ends as x
                                                                     where x.label = l.label limit $2) as r) as c""",
        ["text[]", "bigint"],
        [labels, limit],
    )[0]
    most = row["most"] or 0
    if most >= limit or len(labels) == 1:
        return min(most, limit)
    # Each label holds fewer than the limit: their union is counted whole, in SQL.
    union = reader.execute(
        """select pg_catalog.count(distinct x.record_id) as n from emem.edge_label_ends as x
           where x.label operator(pg_catalog.=) any ($1)""",
        ["text[]"],
        [labels],
    )[0]["n"]
    return min(union, limit)


def label_ends(reader: Reader, labels: list[str]) -> list[int]:
    """Every record that ends an edge with one of these labels."""
    rows = reader.execute(
        "select distinct x.record_id from emem.edge_label_ends as x where x.label operator(pg_catalog.=) any ($1)",
        ["text[]"],
        [labels],
    )
    return [row["record_id"] for row in rows]


def label_ends_sql(reader: Reader, labels: list[str]) -> str:
    """A query of the records that end an edge with one of these labels, without duplicates, in
    record-id order (a merge of the labels' index ranges) unless they are many."""
    plpy = reader.plpy
    if len(labels) > MAX_ORDERED_LABELS:
        quoted = quoted_array(plpy, labels, "text")
        return (
            "select distinct x.record_id from emem.edge_label_ends as x"
            f" where x.label operator(pg_catalog.=) any ({quoted})"
        )
    ranges = " union all ".join(
        f"(select x.record_id from emem.edge_label_ends as x where x.label = {plpy.quote_literal(label)}"
        " order by x.record_id)"
        for label in labels
    )
    return f"select distinct u.record_id from ({ranges}) as u order by u.record_id"


def ends_label(reader: Reader, labels: list[str]) -> Predicate:
    """A record ends an edge with one of these labels: one probe of edge_label_ends per label."""
    quoted = quoted_array(reader.plpy, labels, "text")
    return lambda record_id: (
        f"exists (select from emem.edge_label_ends as x where x.label operator(pg_catalog.=) any ({quoted})"
        f" and x.record_id = {record_id}{fragments.PROBE})"
    )


# ---- what the tags lookup asks of a match ------------------------------------------------------------


def broad_ends_sql(reader: Reader, edges: EdgeMatch, terms: list[str]) -> str | None:
    """A query of the ends of the edges whose labels hold a broad term (None: no broad term)."""
    if not edges.broad_terms:
        return None
    if edges.broad_labels is not None:
        return label_ends_sql(reader, sorted({label for labels in edges.broad_labels for label in labels}))
    plpy = reader.plpy
    ends = fragments.matched_edge_ends(
        quoted_array(plpy, terms, "text"),
        reader.lanes_sql,
        holding=quoted_array(plpy, edges.broad_terms, "text"),
        namespaced=edges.namespaced,
    )
    return f"select ends.endpoint from ({ends}) as ends (endpoint, terms)"


def broad_ends_up_to(reader: Reader, edges: EdgeMatch, terms: list[str], limit: int) -> list[int]:
    """Each broad term's ends, counted up to a limit."""
    if edges.broad_labels is not None:
        return [ends_up_to(reader, labels, limit) for labels in edges.broad_labels]
    return [edge_ends_up_to(reader, term, terms, limit, edges.namespaced) for term in edges.broad_terms]


def edge_ends_up_to(reader: Reader, term: str, terms: list[str], limit: int, namespaced: bool) -> int:
    """Within lanes: how many distinct records end a matched edge whose label holds `term`, counted
    up to a limit: labels are read in growing batches until their ends reach it or run out."""
    batch = limit  # enough in one reading unless the edges share their ends
    while True:
        row = reader.execute(
            f"""select pg_catalog.count(*) as labels, pg_catalog.count(distinct ends.endpoint) as ends
                from ({edges_holding(reader, "$1", "$2", "$3", namespaced)}) as m
                cross join lateral (values (m.from_record_id), (m.to_record_id)) as ends (endpoint)""",
            ["text", "text[]", "bigint"],
            [term, terms, batch],
        )[0]
        if row["ends"] >= limit or row["labels"] < 2 * batch:
            return min(row["ends"], limit)
        batch *= 2


def ends_matched_edge(reader: Reader, edges: EdgeMatch, terms: list[str]) -> Predicate:
    """A predicate: an edge the question's terms name ends at the record. Predicates test a few
    records (a page, what a filtered scan visits): the narrow terms' ends are at hand, the broad
    ones' probed."""
    if not edges.found:
        return lambda record_id: "false"
    narrow = f"'{{{','.join(str(int(end)) for end in edges.narrow_endpoints)}}}'::bigint[]"

    def at_hand(record_id: str) -> str:
        return f"{record_id} operator(pg_catalog.=) any ({narrow})"

    by_label = edges.broad_labels is not None
    if not edges.broad_terms and (by_label or len(edges.narrow_endpoints) <= reader.tuning.exact_candidates):
        return at_hand
    if edges.broad_labels is not None:
        broad = ends_label(reader, sorted({label for labels in edges.broad_labels for label in labels}))
        return lambda record_id: f"({at_hand(record_id)} or {broad(record_id)})"
    terms_sql, lanes = quoted_array(reader.plpy, terms, "text"), reader.lanes_sql
    return lambda record_id: fragments.ends_matched_edge(record_id, terms_sql, lanes, namespaced=edges.namespaced)


def linked_ends(reader: Reader, tags: list[str], terms: list[str], namespaced: bool) -> list[int]:
    """The far ends of the matched edges at the records holding one of these (narrow) tags, probed
    from those records through the edges' indexes."""
    lanes = reader.lanes_sql
    rows = reader.execute(
        f"""select distinct e.far_end
            from ({fragments.tagged("$1", lanes)}) as n
            cross join lateral {fragments.edges_at("n.record_id")} as e
            join emem.edge_labels as el on el.edge_id = e.edge_id
            where {fragments.edge_labels_within("$2", namespaced, lanes)}""",
        ["text[]", "text[]"],
        [tags, terms],
    )
    return [row["far_end"] for row in rows]


def edge_part(reader: Reader, edges: EdgeMatch, terms: list[str], index: int, score_key: Any) -> Part:
    """The broad edge term `edges.broad_terms[index]`: the ends of the matched edges whose label
    holds it. Every matched label of such an end is made of broad terms (a narrow one's ends are
    read whole), so the parts it holds give its label terms. Every lane: from edge_label_ends, in
    record-id order; within lanes: probed through the edges' indexes, a walk in record-id order
    walking the records."""
    term, size = edges.broad_terms[index], Size(edges.broad_sizes[index].lower)
    if edges.broad_labels is not None:
        labels = edges.broad_labels[index]
        return Part(ends_label(reader, labels), label_ends_sql(reader, labels), size, score_key)
    terms_sql, holding = quoted_array(reader.plpy, terms, "text"), quoted_array(reader.plpy, [term], "text")
    lanes = reader.lanes_sql

    def holds(record_id: str) -> str:
        return fragments.ends_matched_edge(record_id, terms_sql, lanes, holding=holding, namespaced=edges.namespaced)

    ends = fragments.matched_edge_ends(terms_sql, lanes, holding=holding, namespaced=edges.namespaced)
    return Part(
        holds,
        f"select distinct ends.endpoint from ({ends}) as ends (endpoint, terms, far_end)",
        size,
        score_key,
        ids_in_order_sql=f"select r.record_id from emem.records as r where {holds('r.record_id')}",
    )


def far_tag_part(reader: Reader, edges: EdgeMatch, terms: list[str], tag: str, score_key: Any) -> Part:
    """The ends of matched edges whose other end carries a broad tag: such an end scores the tag's
    terms through the edge. Each of them also ends a broad edge term's edge (a narrow term's ends,
    and the far ends of a narrowly tagged record, are read whole), so the part is only probed: its
    size is unknown, and a tier walks one of its edge parts instead."""
    plpy, lanes = reader.plpy, reader.lanes_sql
    terms_sql, tag_sql = quoted_array(plpy, terms, "text"), quoted_array(plpy, [tag], "text")
    ends = fragments.matched_edge_ends(terms_sql, lanes, namespaced=edges.namespaced)
    return Part(
        lambda record_id: fragments.ends_edge_to_tag(record_id, terms_sql, tag_sql, lanes, edges.namespaced),
        f"""select distinct ends.endpoint from ({ends}) as ends (endpoint, terms, far_end)
            where {fragments.holds_tag("ends.far_end", tag_sql, lanes)}""",
        Size(0),
        score_key,
    )
