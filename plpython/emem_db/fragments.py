"""Named SQL fragments that several lookups, lists and the totals share, each written once.

They return SQL text. Values are quoted into the text only where several matches must combine
in one statement (a union, a predicate); everything else travels as parameters.
"""

from typing import Any

# What a statement of a scored list selects from `found`: its records and scores, best first.
SCORED_ARRAYS = (
    "pg_catalog.array_agg(record_id order by {score} desc, record_id) as record_ids,"
    " pg_catalog.array_agg({score}::float8 order by {score} desc, record_id) as scores"
)


def labels_within(label_terms: str, terms: str, namespace_terms: str | None = None, overlap: str | None = None) -> str:
    """A label matches a question when its terms overlap the question's and all are in it (and,
    where `namespace_terms` names its namespace's terms, those too). Only the overlap (`overlap`:
    another indexed form of it) is left to a GIN index: "contained in" would make it read the
    entries of every question term (and every empty array) for each lookup; rows are checked for
    it instead."""
    namespaced = "" if namespace_terms is None else f" and {namespace_terms} operator(pg_catalog.<@) {terms}"
    overlap = overlap or f"{label_terms} operator(pg_catalog.&&) {terms}"
    return f"{overlap} and coalesce({label_terms} operator(pg_catalog.<@) {terms}, false){namespaced}"


# A label term within a lane, as emem._lane_qualified spells it (a lane name holds no '/').
LANE_TERM = "{lane}/{term}"


def edge_labels_within(terms: str, namespaced: bool, lanes: str | None = None) -> str:
    """An edge label (el) matches the question's terms, its namespace's too when `namespaced`;
    within `lanes` (None: every lane) both the edge's ends lie in them (an edge carries the
    secrecy of both its ends), and the index of its lane-qualified terms finds it: other lanes'
    matching labels are never read."""
    namespace = "el.namespace_terms" if namespaced else None
    if lanes is None:
        return labels_within("el.label_terms", terms, namespace)
    overlap = f"el.lane_terms operator(pg_catalog.&&) emem._lane_qualified({lanes}, {terms})"
    return (
        labels_within("el.label_terms", terms, namespace, overlap)
        + in_lanes("el.from_lane_name", lanes)
        + in_lanes("el.to_lane_name", lanes)
    )


def in_lanes(lane: str, lanes: str | None) -> str:
    """A lane column is one of these lanes (an array's SQL; None: every lane)."""
    return "" if lanes is None else f" and {lane} operator(pg_catalog.=) any ({lanes})"


def label_holds(label_terms: str, holding: str | None) -> str:
    """The label holds one of these terms (an array's SQL; None: any)."""
    return "" if holding is None else f" and {label_terms} operator(pg_catalog.&&) {holding}"


def matched_edge_ends(
    terms: str, lanes: str | None = None, holding: str | None = None, namespaced: bool = False
) -> str:
    """Both ends of every edge whose relation name or a property value the question names (and
    whose label holds one of `holding`), with that label's terms and the edge's other end: rows
    (endpoint, terms, far_end)."""
    return f"""select ends.endpoint, el.label_terms, ends.far_end
               from emem.edge_labels as el
               cross join lateral (values (el.from_record_id, el.to_record_id), (el.to_record_id, el.from_record_id))
                   as ends (endpoint, far_end)
               where {edge_labels_within(terms, namespaced, lanes)}{label_holds("el.label_terms", holding)}"""


def edges_at(record_id: str) -> str:
    """Every edge at this record, with its other end: rows (edge_id, far_end), each side probed
    through its index on the edges (a lateral subquery)."""
    return f"""(select e.edge_id, e.to_record_id as far_end from emem.edges as e
                where e.from_record_id = {record_id}
                union all
                select e.edge_id, e.from_record_id from emem.edges as e
                where e.to_record_id = {record_id})"""


def ends_matched_edge(
    record_id: str, terms: str, lanes: str | None = None, holding: str | None = None, namespaced: bool = False
) -> str:
    """A matched edge (whose label holds one of `holding`) ends at this record, probed through
    the edges' indexes (for a few records at a time, where gathering every matched edge would
    cost more)."""
    return f"""exists (select from emem.edges as e join emem.edge_labels as el on el.edge_id = e.edge_id
                       where (e.from_record_id = {record_id} or e.to_record_id = {record_id})
                         and {edge_labels_within(terms, namespaced, lanes)}{label_holds("el.label_terms", holding)}
                             {PROBE})"""


def ends_edge_to_tag(record_id: str, terms: str, tags: str, lanes: str | None = None, namespaced: bool = False) -> str:
    """A matched edge ends at this record and its other end carries one of these tags, probed
    through the edges' and the tags' indexes."""
    return f"""exists (select from {edges_at(record_id)} as e join emem.edge_labels as el on el.edge_id = e.edge_id
                       where {edge_labels_within(terms, namespaced, lanes)} and {holds_tag("e.far_end", tags, lanes)}
                             {PROBE})"""


# Predicates over one record are probes: `offset 0` keeps the planner from turning them into a
# join that gathers the whole match (what a walk of a few records in record-id order must avoid).
PROBE = " offset 0"


def holds_tag(record_id: str, tags: str, lanes: str | None = None) -> str:
    """The record carries one of these tags."""
    return (
        f"exists (select from emem.record_tags as rt where rt.record_id = {record_id}"
        f" and rt.tag operator(pg_catalog.=) any ({tags}){in_lanes('rt.lane_name', lanes)}{PROBE})"
    )


def tagged_with(tag: str, lanes: str | None = None) -> str:
    """The records carrying this tag (its SQL), in record-id order from the tag's index when asked."""
    return (
        "select rt.record_id from emem.record_tags as rt"
        f" where rt.tag operator(pg_catalog.=) {tag}{in_lanes('rt.lane_name', lanes)}"
    )


def tagged(tags: str, lanes: str | None = None) -> str:
    """The records carrying one of these tags (a record with several appears once per tag)."""
    return (
        "select rt.record_id from emem.record_tags as rt"
        f" where rt.tag operator(pg_catalog.=) any ({tags}){in_lanes('rt.lane_name', lanes)}"
    )


def text_matches(record_id: str, tsquery: str, lanes: str | None = None) -> str:
    """The record's text matches a tsquery."""
    return (
        f"exists (select from emem.records as r where r.record_id = {record_id}"
        f" and r.content_search operator(pg_catalog.@@) {tsquery}{in_lanes('r.lane_name', lanes)}{PROBE})"
    )


def text_matching(tsquery: str, lanes: str | None = None) -> str:
    """The records whose text matches a tsquery."""
    return (
        "select r.record_id from emem.records as r"
        f" where r.content_search operator(pg_catalog.@@) {tsquery}{in_lanes('r.lane_name', lanes)}"
    )


def record_in_lanes(record_id: str, lanes: str | None) -> str:
    """The record lies in these lanes (None: always)."""
    if lanes is None:
        return ""
    in_them = in_lanes("lr.lane_name", lanes)
    return f" and exists (select from emem.records as lr where lr.record_id = {record_id}{in_them})"


def any_of(queries: list[str]) -> str:
    """The text of the OR of tsqueries given as text."""
    return " | ".join(f"({query})" for query in queries)


def quoted_tsquery(plpy: Any, query: str) -> str:
    return plpy.quote_literal(query) + "::pg_catalog.tsquery"


def quoted_array(plpy: Any, values: list[str], element_type: str) -> str:
    """An array literal of quoted values."""
    return f"array[{', '.join(plpy.quote_literal(v) for v in values)}]::{element_type}[]"
