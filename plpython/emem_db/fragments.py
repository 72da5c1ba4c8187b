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


def labels_within(label_terms: str, terms: str) -> str:
    """A label matches a question when its terms overlap the question's and all are in it."""
    return f"{label_terms} operator(pg_catalog.&&) {terms} and {label_terms} operator(pg_catalog.<@) {terms}"


def matched_edge_ends(terms: str) -> str:
    """Both ends of every edge whose relation name or a property value the question names, with
    that label's terms: rows (endpoint, terms)."""
    return f"""select ends.endpoint, el.label_terms
               from emem.edge_labels as el
               join emem.edges as e on e.edge_id = el.edge_id
               cross join lateral (values (e.from_record_id), (e.to_record_id)) as ends (endpoint)
               where {labels_within("el.label_terms", terms)}"""


def ends_matched_edge(record_id: str, terms: str) -> str:
    """A matched edge ends at this record, probed through the edges' indexes (for a few records
    at a time, where gathering every matched edge would cost more)."""
    return f"""exists (select from emem.edges as e join emem.edge_labels as el on el.edge_id = e.edge_id
                       where (e.from_record_id = {record_id} or e.to_record_id = {record_id})
                         and {labels_within("el.label_terms", terms)})"""


def holds_tag(record_id: str, tags: str) -> str:
    """The record carries one of these tags."""
    return (
        f"exists (select from emem.record_tags as rt where rt.record_id = {record_id}"
        f" and rt.tag operator(pg_catalog.=) any ({tags}))"
    )


def tagged(tags: str) -> str:
    """The records carrying one of these tags (a record with several appears once per tag)."""
    return f"select rt.record_id from emem.record_tags as rt where rt.tag operator(pg_catalog.=) any ({tags})"


def text_matches(record_id: str, tsquery: str) -> str:
    """The record's text matches a tsquery."""
    return (
        f"exists (select from emem.records as r where r.record_id = {record_id}"
        f" and r.content_search operator(pg_catalog.@@) {tsquery})"
    )


def text_matching(tsquery: str) -> str:
    """The records whose text matches a tsquery."""
    return f"select r.record_id from emem.records as r where r.content_search operator(pg_catalog.@@) {tsquery}"


def any_of(queries: list[str]) -> str:
    """The text of the OR of tsqueries given as text."""
    return " | ".join(f"({query})" for query in queries)


def quoted_tsquery(plpy: Any, query: str) -> str:
    return plpy.quote_literal(query) + "::pg_catalog.tsquery"


def quoted_array(plpy: Any, values: list[str], element_type: str) -> str:
    """An array literal of quoted values."""
    return f"array[{', '.join(plpy.quote_literal(v) for v in values)}]::{element_type}[]"
