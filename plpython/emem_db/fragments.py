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


def in_lanes(lane: str, lanes: str | None) -> str:
    """A lane column is one of these lanes (an array's SQL; None: every lane)."""
    return "" if lanes is None else f" and {lane} operator(pg_catalog.=) any ({lanes})"


# Predicates over one record are probes: `offset 0` keeps the planner from turning them into a
# join that gathers the whole match (what a walk of a few records in record-id order must avoid).
PROBE = " offset 0"


def holds_tag(record_id: str, tags: str, lanes: str | None = None) -> str:
    """The record carries one of these tags."""
    return (
        f"exists (select 1 from emem.record_tags as rt where rt.record_id = {record_id}"
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
        f"exists (select 1 from emem.records as r where r.record_id = {record_id}"
        f" and r.content_search operator(pg_catalog.@@) {tsquery}{in_lanes('r.lane_name', lanes)}{PROBE})"
    )


def text_matching(tsquery: str, lanes: str | None = None) -> str:
    """The records whose text matches a tsquery."""
    return (
        "select r.record_id from emem.records as r"
        f" where r.content_search operator(pg_catalog.@@) {tsquery}{in_lanes('r.lane_name', lanes)}"
    )


def any_of(queries: list[str]) -> str:
    """The text of the OR of tsqueries given as text."""
    return " | ".join(f"({query})" for query in queries)


def quoted_tsquery(plpy: Any, query: str) -> str:
    quoted: str = plpy.quote_literal(query)
    return quoted + "::pg_catalog.tsquery"


def quoted_array(plpy: Any, values: list[str], element_type: str) -> str:
    """An array literal of quoted values."""
    return f"array[{', '.join(plpy.quote_literal(v) for v in values)}]::{element_type}[]"
