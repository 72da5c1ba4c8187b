"""Tags and edge properties: the question's terms against tags (through the tag vocabulary),
edge relation names and property values; candidates are the tagged records and both ends of a
matched edge."""

from dataclasses import dataclass

from emem_db import fragments
from emem_db.fragments import SCORED_ARRAYS, quoted_array
from emem_db.lists.base import CandidateList, Match, Predicate
from emem_db.lists.broad import BroadList
from emem_db.lists.fetched import FetchedList
from emem_db.lists.scored import ScoredList
from emem_db.lists.tiered import Part, TieredList
from emem_db.reader import Reader


@dataclass(frozen=True)
class TagMatch:
    """What the question's terms match: tags (largest first, with counts) and edge endpoints."""

    tags: list[str]
    counts: list[int]
    edge_endpoints: list[int]

    @property
    def estimated_size(self) -> int:
        return sum(self.counts) + len(self.edge_endpoints)

    def broad_tags(self, exact_limit: int) -> list[str]:
        return [tag for tag, count in zip(self.tags, self.counts, strict=True) if count > exact_limit]

    def narrow_tags(self, exact_limit: int) -> list[str]:
        return [tag for tag, count in zip(self.tags, self.counts, strict=True) if count <= exact_limit]


def tags(reader: Reader) -> CandidateList:
    """Seed order: by distance (degraded: by matched terms)."""
    return tag_candidates(reader, by_terms=False)


def tags_by_terms(reader: Reader) -> CandidateList:
    """Opt-in: by the number of distinct question terms matched, then by distance."""
    return tag_candidates(reader, by_terms=True)


def tag_candidates(reader: Reader, by_terms: bool) -> CandidateList:
    terms = list(reader.request.analysis.terms)
    if not terms:
        return FetchedList([])
    match = tag_match(reader, terms)
    if not match.tags or match.estimated_size <= reader.exact_limit:
        return exact_tags(reader, match.tags, terms, by_terms)
    whole = whole_match(reader, match, terms)
    if not (reader.degraded or by_terms) or (len(match.tags) == 1 and not match.edge_endpoints):
        return BroadList(reader, whole)  # by distance, or one tag that every candidate matched: nothing to score
    broad = match.broad_tags(reader.exact_limit)
    if not broad or len(broad) > reader.tuning.max_broad_parts:
        return exact_tags(reader, match.tags, terms, by_terms)
    narrow = match.narrow_tags(reader.exact_limit)
    scored = scored_tags(reader, match.tags, terms, within=narrow)
    parts = [tag_part(reader, tag, count) for tag, count in zip(match.tags, match.counts, strict=True) if tag in broad]
    return TieredList(
        reader,
        whole,
        scored,
        parts,
        lambda held: len(frozenset().union(*(part.score_key for part in held))),
        narrow_predicate(reader, match, terms, narrow),
    )


def tag_match(reader: Reader, terms: list[str]) -> TagMatch:
    row = reader.execute(
        f"""
        with matched as (
            select v.tag, v.record_count from emem.tag_vocabulary as v
            where {fragments.labels_within("v.tag_terms", "$1")} and v.record_count > 0
        )
        select coalesce((select pg_catalog.array_agg(tag order by record_count desc, tag) from matched),
                        '{{}}') as tags,
               coalesce((select pg_catalog.array_agg(record_count order by record_count desc, tag)
                         from matched), '{{}}') as counts,
               array(select distinct ends.endpoint
                     from ({fragments.matched_edge_ends("$1")}) as ends (endpoint, terms)) as edge_endpoints
        """,
        ["text[]"],
        [terms],
    )[0]
    return TagMatch(list(row["tags"]), list(row["counts"]), list(row["edge_endpoints"]))


def exact_tags(reader: Reader, tags: list[str], terms: list[str], by_terms: bool) -> CandidateList:
    """Every tag and edge candidate in the list's order: by distance, or by matched terms first."""
    if not (by_terms or reader.degraded):
        return tags_by_distance(reader, tags, terms)
    return scored_tags(reader, tags, terms)


def scored_tags(reader: Reader, tags: list[str], terms: list[str], within: list[str] | None = None) -> ScoredList:
    """Every tag and edge candidate with its matched terms, most first; `within` keeps the records
    holding one of these tags or an edge (a tiered list's exact part)."""
    held = (
        "matched"
        if within is None
        else """(
            select rt.record_id, v.tag_terms
            from edge_ends as n
            join emem.record_tags as rt on rt.record_id = n.record_id
            join emem.tag_vocabulary as v on v.tag = rt.tag
            where v.tag operator(pg_catalog.=) any ($1)
            union all
            select n.record_id, v.tag_terms
            from emem.record_tags as n
            join emem.record_tags as rt on rt.record_id = n.record_id
            join emem.tag_vocabulary as v on v.tag = rt.tag
            where n.tag operator(pg_catalog.=) any ($3) and v.tag operator(pg_catalog.=) any ($1)
            union all
            select record_id, terms from edge_ends)"""
    )
    sql = f"""
        with edge_ends (record_id, terms) as (
            {fragments.matched_edge_ends("$2")}
        ), matched (record_id, terms) as (
            select rt.record_id, v.tag_terms
            from emem.tag_vocabulary as v join emem.record_tags as rt on rt.tag = v.tag
            where v.tag operator(pg_catalog.=) any ($1)
            union all
            select record_id, terms from edge_ends
        ), found as (
            select m.record_id, pg_catalog.count(distinct t) as matched_terms
            from {held} as m (record_id, terms) cross join lateral pg_catalog.unnest(m.terms) as t
            group by m.record_id
        )
        select {SCORED_ARRAYS.format(score="matched_terms")} from found"""
    return ScoredList.from_statement(reader, sql, ["text[]", "text[]", "text[]"], [tags, terms, within or []])


def tags_by_distance(reader: Reader, tags: list[str], terms: list[str]) -> FetchedList:
    """The seed's order with a vector needs no matched terms: one join, one sort."""
    sql = f"""
        with found (record_id) as (
            {fragments.tagged("$1")}
            union
            select ends.endpoint from ({fragments.matched_edge_ends("$3")}) as ends (endpoint, terms)
        )
        select found.record_id, rv.embedding operator(public.<=>) $2::public.vector as distance
        from found
        left join emem.record_vectors as rv
               on rv.space_id = {reader.space.space_id:d} and rv.record_id = found.record_id
        order by distance nulls last, found.record_id"""
    return FetchedList(
        reader.candidates(sql, ["text[]", "public.vector", "text[]"], [tags, reader.request.vector, terms])
    )


def whole_match(reader: Reader, match: TagMatch, terms: list[str]) -> Match:
    """Every record a broad tag match reaches: the tagged records and the ends of matched edges."""
    plpy = reader.plpy
    tags_sql = quoted_array(plpy, match.tags, "text")
    edges = ends_edge(reader, match, terms)
    largest, *others = match.tags
    # The largest tag's count, plus what the other tags and the edges add.
    count_sql = f"""
        select {match.counts[0]:d} + pg_catalog.count(distinct o.record_id) as n
        from ({fragments.tagged("$2")} union all select pg_catalog.unnest($3::bigint[])) as o
        where not exists (select from emem.record_tags as l
                          where l.record_id = o.record_id and l.tag operator(pg_catalog.=) $1)"""
    return Match(
        holds=lambda record_id: f"({fragments.holds_tag(record_id, tags_sql)} or {edges(record_id)})",
        ids_sql=fragments.tagged(tags_sql),
        count_sql=count_sql,
        count_types=("text", "text[]", "bigint[]"),
        count_args=(largest, others, match.edge_endpoints),
        known_ids=match.edge_endpoints,
        ids_in_order_sql=(
            f"{fragments.tagged(tags_sql)} order by rt.record_id"
            if len(match.tags) == 1 and not match.edge_endpoints
            else None
        ),
    )


def narrow_predicate(reader: Reader, match: TagMatch, terms: list[str], narrow: list[str]) -> Predicate:
    """Holds a tag that is not broad, or ends an edge: what a tiered list reads whole."""
    edges = ends_edge(reader, match, terms)
    if not narrow:
        return edges
    narrow_sql = quoted_array(reader.plpy, narrow, "text")
    return lambda record_id: f"({fragments.holds_tag(record_id, narrow_sql)} or {edges(record_id)})"


def ends_edge(reader: Reader, match: TagMatch, terms: list[str]) -> Predicate:
    """A predicate: an edge the question's terms name ends at the record. Predicates test a few
    records (a page, what a filtered scan visits): many matched edges are probed through the
    edges' indexes rather than gathered whole for each statement."""
    if not match.edge_endpoints:
        return lambda record_id: "false"
    terms_sql = quoted_array(reader.plpy, terms, "text")
    if len(match.edge_endpoints) <= reader.tuning.exact_candidates:
        endpoints = f"select ends.endpoint from ({fragments.matched_edge_ends(terms_sql)}) as ends (endpoint, terms)"
        return lambda record_id: f"{record_id} in ({endpoints})"
    return lambda record_id: fragments.ends_matched_edge(record_id, terms_sql)


def tag_part(reader: Reader, tag: str, count: int) -> Part:
    quoted = quoted_array(reader.plpy, [tag], "text")
    return Part(
        lambda record_id: fragments.holds_tag(record_id, quoted),
        fragments.tagged(quoted),
        count,
        frozenset(reader.state.analyser.label_terms(tag)),
    )
