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

# What a matched edge adds to the score of the records it ends at: less than one term, so that
# more terms matched still come first, but a record an edge's relation or property names ranks
# above every record that matches the same number of terms through tags only. A matched edge also
# gives each end the terms the question matches in the other end's tags: "the release captain of
# project Kestrel" is the record at the other end of a `release captain` edge from the record
# tagged `project kestrel`.
EDGE_BONUS = 0.5
# Degraded, records that match as many terms (and edges) are ranked by the rarest tag they matched
# (BM25's rarity for labels, in place of record id): RARITY_SHARE / (1 + that tag's records), a
# fraction that stays below EDGE_BONUS. Every record of a broad tier matched the same tags, so the
# tiers keep their order.
RARITY_SHARE = 0.4


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
    """Seed order: by distance (degraded: by matched terms, edges, then the rarest tag matched)."""
    return tag_candidates(reader, by_terms=False)


def tags_by_terms(reader: Reader) -> CandidateList:
    """Opt-in: by the number of distinct question terms matched (edges above tags), then by
    distance (degraded: by the rarest tag matched)."""
    return tag_candidates(reader, by_terms=True)


def tag_candidates(reader: Reader, by_terms: bool) -> CandidateList:
    terms = list(reader.request.analysis.terms_for_labels)
    if not terms:
        return FetchedList([])
    match = tag_match(reader, terms)
    if not match.tags or match.estimated_size <= reader.exact_limit:
        return exact_tags(reader, match, terms, by_terms)
    whole = whole_match(reader, match, terms)
    if not (reader.degraded or by_terms) or (len(match.tags) == 1 and not match.edge_endpoints):
        return BroadList(reader, whole)  # by distance, or one tag that every candidate matched: nothing to score
    broad = match.broad_tags(reader.exact_limit)
    if not broad or len(broad) > reader.tuning.max_broad_parts:
        return exact_tags(reader, match, terms, by_terms)
    narrow = match.narrow_tags(reader.exact_limit)
    scored = scored_tags(reader, match, terms, within=narrow)
    parts = [tag_part(reader, tag, count) for tag, count in zip(match.tags, match.counts, strict=True) if tag in broad]
    return TieredList(
        reader,
        whole,
        scored,
        parts,
        tier_score,
        narrow_predicate(reader, match, terms, narrow),
    )


def tier_score(held: tuple[Part, ...]) -> float:
    """What a record holding these broad tags (and nothing narrow, no edge) scores, as
    scored_tags counts it: the distinct terms of the tags, and the rarest tag's share."""
    terms: frozenset[str] = frozenset().union(*(part.score_key[0] for part in held))
    return len(terms) + max(part.score_key[1] for part in held)


def tag_match(reader: Reader, terms: list[str]) -> TagMatch:
    row = reader.execute(
        f"""
        with matched as (
            select v.tag, pg_catalog.sum(v.record_count)::bigint as record_count from emem.tag_vocabulary as v
            where {fragments.labels_within("v.tag_terms", "$1")}{fragments.in_lanes("v.lane_name", reader.lanes_sql)}
            group by v.tag having pg_catalog.sum(v.record_count) > 0
        )
        select coalesce((select pg_catalog.array_agg(tag order by record_count desc, tag) from matched),
                        '{{}}') as tags,
               coalesce((select pg_catalog.array_agg(record_count order by record_count desc, tag)
                         from matched), '{{}}') as counts,
               array(select distinct ends.endpoint
                     from ({fragments.matched_edge_ends("$1", reader.lanes_sql)}) as ends (endpoint, terms))
                   as edge_endpoints
        """,
        ["text[]"],
        [terms],
    )[0]
    return TagMatch(list(row["tags"]), list(row["counts"]), list(row["edge_endpoints"]))


def exact_tags(reader: Reader, match: TagMatch, terms: list[str], by_terms: bool) -> CandidateList:
    """Every tag and edge candidate in the list's order: by distance, or by matched terms first."""
    if not (by_terms or reader.degraded):
        return tags_by_distance(reader, match.tags, terms)
    return scored_tags(reader, match, terms)


def rarity(reader: Reader, count: int) -> float:
    """What matching a tag of `count` records adds to a record's score (degraded only)."""
    return RARITY_SHARE / (1 + count) if reader.degraded else 0.0


def scored_tags(reader: Reader, match: TagMatch, terms: list[str], within: list[str] | None = None) -> ScoredList:
    """Every tag and edge candidate by its matched terms (an edge end's include those of the
    edge's label and of its other end's matched tags), most first, a record reached through a
    matched edge above those matching as many terms through tags only (EDGE_BONUS), degraded then
    by the rarest tag matched (RARITY_SHARE); `within` keeps the records holding one of these tags
    or an edge (a tiered list's exact part)."""
    lanes = fragments.in_lanes("rt.lane_name", reader.lanes_sql)
    # A tag's words come from its lane's vocabulary row (one per lane and tag).
    held = (
        "matched"
        if within is None
        else f"""(
            select rt.record_id, v.tag_terms, false, tc.rarity
            from edge_ends as n
            join emem.record_tags as rt on rt.record_id = n.record_id
            join emem.tag_vocabulary as v on v.tag = rt.tag and v.lane_name = rt.lane_name
            join tag_rarity as tc on tc.tag operator(pg_catalog.=) v.tag
            union all
            select n.record_id, v.tag_terms, false, tc.rarity
            from emem.record_tags as n
            join emem.record_tags as rt on rt.record_id = n.record_id
            join emem.tag_vocabulary as v on v.tag = rt.tag and v.lane_name = rt.lane_name
            join tag_rarity as tc on tc.tag operator(pg_catalog.=) v.tag
            where n.tag operator(pg_catalog.=) any ($3){lanes}
            union all
            select record_id, terms, true, 0 from edge_ends
            union all
            select record_id, terms, true, 0 from far_ends)"""
    )
    sql = f"""
        with tag_rarity (tag, rarity) as (
            select * from rows from (pg_catalog.unnest($1::text[]), pg_catalog.unnest($4::float8[]))
        ), edge_ends (record_id, terms, far_end) as (
            {fragments.matched_edge_ends("$2", reader.lanes_sql)}
        ), far_ends (record_id, terms) as (
            select n.record_id, v.tag_terms
            from edge_ends as n
            join emem.record_tags as rt on rt.record_id = n.far_end
            join emem.tag_vocabulary as v on v.tag = rt.tag and v.lane_name = rt.lane_name
            where v.tag operator(pg_catalog.=) any ($1){lanes}
        ), matched (record_id, terms, through_edge, rarity) as (
            select rt.record_id, v.tag_terms, false, tc.rarity
            from tag_rarity as tc
            join emem.tag_vocabulary as v on v.tag operator(pg_catalog.=) tc.tag
            join emem.record_tags as rt on rt.tag = v.tag and rt.lane_name = v.lane_name
            where true{lanes}
            union all
            select record_id, terms, true, 0 from edge_ends
            union all
            select record_id, terms, true, 0 from far_ends
        ), found as (
            select m.record_id,
                   pg_catalog.count(distinct t)
                   + case when pg_catalog.bool_or(m.through_edge) then {EDGE_BONUS} else 0 end
                   + pg_catalog.max(m.rarity) as score
            from {held} as m (record_id, terms, through_edge, rarity)
            cross join lateral pg_catalog.unnest(m.terms) as t
            group by m.record_id
        )
        select {SCORED_ARRAYS.format(score="score")} from found"""
    return ScoredList.from_statement(
        reader,
        sql,
        ["text[]", "text[]", "text[]", "float8[]"],
        [match.tags, terms, within or [], [rarity(reader, count) for count in match.counts]],
    )


def tags_by_distance(reader: Reader, tags: list[str], terms: list[str]) -> FetchedList:
    """The seed's order with a vector needs no matched terms: one join, one sort."""
    sql = f"""
        with found (record_id) as (
            {fragments.tagged("$1", reader.lanes_sql)}
            union
            select ends.endpoint from ({fragments.matched_edge_ends("$3", reader.lanes_sql)}) as ends (endpoint, terms)
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
    plpy, lanes = reader.plpy, reader.lanes_sql
    tags_sql = quoted_array(plpy, match.tags, "text")
    edges = ends_edge(reader, match, terms)
    largest, *others = match.tags
    # The largest tag's count, plus what the other tags and the edges add.
    count_sql = f"""
        select {match.counts[0]:d} + pg_catalog.count(distinct o.record_id) as n
        from ({fragments.tagged("$2", lanes)} union all select pg_catalog.unnest($3::bigint[])) as o
        where not exists (select from emem.record_tags as l
                          where l.record_id = o.record_id and l.tag operator(pg_catalog.=) $1)"""
    return Match(
        holds=lambda record_id: f"({fragments.holds_tag(record_id, tags_sql, lanes)} or {edges(record_id)})",
        ids_sql=fragments.tagged(tags_sql, lanes),
        count_sql=count_sql,
        count_types=("text", "text[]", "bigint[]"),
        count_args=(largest, others, match.edge_endpoints),
        known_ids=match.edge_endpoints,
        ids_in_order_sql=(
            f"{fragments.tagged(tags_sql, lanes)} order by rt.record_id"
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
    return lambda record_id: f"({fragments.holds_tag(record_id, narrow_sql, reader.lanes_sql)} or {edges(record_id)})"


def ends_edge(reader: Reader, match: TagMatch, terms: list[str]) -> Predicate:
    """A predicate: an edge the question's terms name ends at the record. Predicates test a few
    records (a page, what a filtered scan visits): many matched edges are probed through the
    edges' indexes rather than gathered whole for each statement."""
    if not match.edge_endpoints:
        return lambda record_id: "false"
    terms_sql, lanes = quoted_array(reader.plpy, terms, "text"), reader.lanes_sql
    if len(match.edge_endpoints) <= reader.tuning.exact_candidates:
        ends = fragments.matched_edge_ends(terms_sql, lanes)
        endpoints = f"select ends.endpoint from ({ends}) as ends (endpoint, terms)"
        return lambda record_id: f"{record_id} in ({endpoints})"
    return lambda record_id: fragments.ends_matched_edge(record_id, terms_sql, lanes)


def tag_part(reader: Reader, tag: str, count: int) -> Part:
    """A broad tag: its score key is (its terms, its rarity)."""
    quoted, lanes = quoted_array(reader.plpy, [tag], "text"), reader.lanes_sql
    return Part(
        lambda record_id: fragments.holds_tag(record_id, quoted, lanes),
        fragments.tagged(quoted, lanes),
        count,
        (frozenset(reader.state.analyser.label_terms(tag)), rarity(reader, count)),
    )


def visible_members(reader: Reader, record_ids: list[int], lanes: list[str]) -> set[int]:
    """Which of these records a tag lookup holds for a caller reading only `lanes`: through a
    matched tag, or a matched edge both of whose ends lie in those lanes."""
    terms = list(reader.request.analysis.terms_for_labels)
    lanes_sql = quoted_array(reader.plpy, lanes, "text") if lanes else "array[]::text[]"
    rows = reader.execute(
        f"""select id from pg_catalog.unnest($1::bigint[]) as id
            where exists (select from emem.record_tags as rt
                          join emem.tag_vocabulary as v on v.tag = rt.tag and v.lane_name = rt.lane_name
                          where rt.record_id = id and {fragments.labels_within("v.tag_terms", "$2")})
               or {fragments.ends_matched_edge("id", "$2", lanes_sql)}""",
        ["bigint[]", "text[]"],
        [record_ids, terms],
        cache=False,
    )
    return {row["id"] for row in rows}
