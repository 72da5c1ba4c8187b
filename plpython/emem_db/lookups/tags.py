"""Tags and edge properties: the question's terms against tags (through the tag vocabulary),
edge relation names and property values; candidates are the tagged records and both ends of a
matched edge.

A tag's size is its count in the vocabulary. Edges are seen per question term their matched
labels hold: a term held by at most Reader.probed_limit matched labels is narrow, the ends of its
edges gathered; a broad term (more labels, or common enough in the labels' statistics) is read
through predicates, and its ends are counted only up to what the totals need. A list ordered by
its matched terms reads broad tags and broad edge terms in tiers when they meet no one else: what
an edge gives its ends depends on the tags at its other end, so a broad edge term is a tier only
when no matched tag is broad (the few ends whose far end holds a narrow tag are scored whole), and
with a broad tag the list is read whole."""

import math
from dataclasses import dataclass

from emem_db import fragments
from emem_db.fragments import SCORED_ARRAYS, quoted_array
from emem_db.lists.base import CandidateList, Match, Predicate, Size
from emem_db.lists.broad import BroadList
from emem_db.lists.fetched import FetchedList
from emem_db.lists.scored import ScoredList
from emem_db.lists.tiered import Narrow, Part, TieredList
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
class EdgeMatch:
    """The edges whose labels the question's terms match, per term those labels hold: the ends of
    the edges whose labels hold a narrow term (gathered), and the broad terms with what is known
    of the number of their edges' ends (an estimate is sampled only when the totals ask)."""

    narrow_terms: list[str]
    narrow_endpoints: list[int]
    broad_terms: list[str]
    broad_sizes: list[Size]  # the distinct ends seen (0 when the term's labels were not read)
    broad_most_ends: list[float]  # at most so many ends (math.inf: no bound known)
    # Whether a label's `key:` namespace must be among the question's terms (the seed's tags
    # lookup) or not (the opt-in components): see analysis.Analyser.namespace_terms.
    namespaced: bool

    @property
    def found(self) -> bool:
        return bool(self.narrow_terms or self.broad_terms)

    @property
    def size(self) -> Size:
        return Size.of_union([Size.exactly(len(self.narrow_endpoints)), *self.broad_sizes])


@dataclass(frozen=True)
class TagMatch:
    """What the question's terms match: tags (largest first, with their counts) and edges."""

    tags: list[str]
    counts: list[int]
    edges: EdgeMatch

    @property
    def size(self) -> Size:
        return Size.of_union([*(Size.exactly(count) for count in self.counts), self.edges.size])

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
    match = tag_match(reader, terms, namespaced=not by_terms)
    upper = match.size.upper
    if not (match.tags or match.edges.found) or (upper is not None and upper <= reader.exact_limit):
        return exact_tags(reader, match, terms, by_terms)
    whole = whole_match(reader, match, terms)
    if not (reader.degraded or by_terms) or (len(match.tags) == 1 and not match.edges.found):
        return BroadList(reader, whole)  # by distance, or one tag that every candidate matched: nothing to score
    broad = match.broad_tags(reader.exact_limit)
    edges = match.edges
    if broad and edges.broad_terms:
        return exact_tags(reader, match, terms, by_terms)  # a broad edge's far end may hold a broad tag
    parts = [tag_part(reader, tag, count) for tag, count in zip(match.tags, match.counts, strict=True) if tag in broad]
    parts += [
        edge_part(reader, edges, terms, term, size)
        for term, size in zip(edges.broad_terms, edges.broad_sizes, strict=True)
    ]
    if not parts or len(parts) > reader.tuning.max_broad_parts:
        return exact_tags(reader, match, terms, by_terms)
    narrow = match.narrow_tags(reader.exact_limit)
    # Records that end a broad edge whose far end holds a narrow tag also score that tag's terms.
    linked = linked_ends(reader, narrow, terms, edges.namespaced) if edges.broad_terms and narrow else []
    endpoints = sorted(set(edges.narrow_endpoints).union(linked))
    return TieredList(
        reader,
        whole,
        scored_tags(reader, match, terms, within=(narrow, endpoints)),
        parts,
        tier_score,
        narrow_predicate(reader, narrow, endpoints),
    )


def tier_score(held: tuple[Part, ...]) -> float:
    """What a record holding these broad tags or broad edge terms (and nothing narrow) scores, as
    scored_tags counts it: the distinct terms, and the rarest tag's share (edges: EDGE_BONUS; a
    tier never holds both)."""
    terms: frozenset[str] = frozenset().union(*(part.score_key[0] for part in held))
    return len(terms) + max(part.score_key[1] for part in held)


def tag_match(reader: Reader, terms: list[str], namespaced: bool) -> TagMatch:
    row = reader.execute(
        f"""
        with matched as (
            select v.tag, pg_catalog.sum(v.record_count)::bigint as record_count from emem.tag_vocabulary as v
            where {fragments.labels_within("v.tag_terms", "$1", "v.namespace_terms" if namespaced else None)}
                  {fragments.in_lanes("v.lane_name", reader.lanes_sql)}
            group by v.tag having pg_catalog.sum(v.record_count) > 0
        )
        select coalesce((select pg_catalog.array_agg(tag order by record_count desc, tag) from matched),
                        '{{}}') as tags,
               coalesce((select pg_catalog.array_agg(record_count order by record_count desc, tag)
                         from matched), '{{}}') as counts
        """,
        ["text[]"],
        [terms],
    )[0]
    return TagMatch(list(row["tags"]), list(row["counts"]), edge_match(reader, terms, namespaced))


def edge_match(reader: Reader, terms: list[str], namespaced: bool) -> EdgeMatch:
    """The matched edges per question term, each term's labels read up to probed_limit + 1: a term
    with more is broad. A term whose matched labels the labels' statistics (their most common
    values, whole; within the caller's lanes, those of the lane-qualified terms) put beyond
    probed_limit is broad without that reading. The statistics only spare that reading, they
    decide no answer."""
    limit = reader.probed_limit
    labels = reader.rows_of("edge_labels")
    lanes = reader.request.lanes
    if lanes is None:
        common, spelled = reader.common_arrays("edge_labels", "label_terms"), {term: {term} for term in terms}
    else:  # the labels of these lanes' edges: another lane's common labels spare no reading here
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
        # An edge has at most two ends: a term whose labels the statistics count has at most twice as many.
        [2 * estimated[term] if term not in to_read else math.inf for term in broad],
        namespaced,
    )


def estimated_ends(reader: Reader, edges: EdgeMatch, terms: list[str]) -> float | None:
    """An estimate of how many records end the broad terms' edges (the largest of the terms'):
    from a sample of Tuning.edge_sample matched labels of each."""
    estimates = []
    for term, most in zip(edges.broad_terms, edges.broad_most_ends, strict=True):
        row = reader.execute(
            f"""select pg_catalog.array_agg(m.from_record_id) operator(pg_catalog.||)
                       pg_catalog.array_agg(m.to_record_id) as ends
                from ({edges_holding(reader, "$2", "$1", "$3", edges.namespaced)}) as m""",
            ["text[]", "text", "bigint"],
            [terms, term, reader.tuning.edge_sample],
        )[0]
        sample = list(row["ends"] or ())
        complete = len(sample) < 2 * reader.tuning.edge_sample  # every matched label was read
        estimates.append(float(len(set(sample))) if complete else ends_estimate(sample, most))
    return max(estimates, default=None)


def ends_estimate(sample: list[int], most: float) -> float:
    """How many records a broad term's edges end at, from the ends drawn in a sample of them: on
    the low side of what the repeats in the sample suggest (as if there were two standard
    deviations more of them, repeats counting about as a Poisson variable), at most `most`."""
    repeats = len(sample) - len(set(sample))
    likely_distinct = len(sample) - (repeats + 2 * math.sqrt(repeats) + 1)
    return min(most, distinct_estimate(len(sample), max(likely_distinct, 0.0)))


def distinct_estimate(drawn: int, distinct: float) -> float:
    """How many distinct values a set likely holds when `drawn` values drawn from it show `distinct`
    different ones: the N for which drawing that many gives that many on average,
    N * (1 - exp(-drawn / N)) = distinct (unbounded when none repeats)."""
    if drawn == 0:
        return 0.0
    if distinct >= drawn:
        return math.inf
    low, high = float(distinct), float(distinct) * drawn + 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if middle * (1 - math.exp(-drawn / middle)) < distinct:
            low = middle
        else:
            high = middle
    return high


def edges_holding(reader: Reader, term: str, terms: str, limit: str, namespaced: bool) -> str:
    """The ends (from_record_id, to_record_id) of at most `limit` matched edges whose label holds
    `term` (SQL expressions each): those labels first, each edge then probed by its key."""
    lanes = reader.lanes_sql
    holding = (
        f"el.label_terms operator(pg_catalog.@>) array[{term}]"
        if lanes is None
        else f"el.lane_terms operator(pg_catalog.&&) emem._lane_qualified({lanes}, array[{term}])"
    )
    return f"""select e.from_record_id, e.to_record_id
               from (select el.edge_id from emem.edge_labels as el
                     where {holding} and {fragments.edge_labels_within(terms, namespaced, lanes)}) as el
               cross join lateral (select e.from_record_id, e.to_record_id from emem.edges as e
                                   where e.edge_id = el.edge_id offset 0) as e
               limit {limit}"""


def exact_tags(reader: Reader, match: TagMatch, terms: list[str], by_terms: bool) -> CandidateList:
    """Every tag and edge candidate in the list's order: by distance, or by matched terms first."""
    if not (by_terms or reader.degraded):
        return tags_by_distance(reader, match.tags, terms, match.edges.namespaced)
    return scored_tags(reader, match, terms)


def rarity(reader: Reader, count: int) -> float:
    """What matching a tag of `count` records adds to a record's score (degraded only)."""
    return RARITY_SHARE / (1 + count) if reader.degraded else 0.0


def scored_tags(
    reader: Reader, match: TagMatch, terms: list[str], within: tuple[list[str], list[int]] | None = None
) -> ScoredList:
    """Every tag and edge candidate by its matched terms (an edge end's include those of the
    edge's label and of its other end's matched tags), most first, a record reached through a
    matched edge above those matching as many terms through tags only (EDGE_BONUS), degraded then
    by the rarest tag matched (RARITY_SHARE). `within` (narrow tags and records) keeps the records
    holding one of those tags or given (a tiered list's exact part), each scored by all it
    matches, probed from the record through the indexes."""
    lanes = fragments.in_lanes("rt.lane_name", reader.lanes_sql)
    # A tag's words come from its lane's vocabulary row (one per lane and tag).
    if within is None:
        records = f"""
            edge_ends (record_id, terms, far_end) as (
                {fragments.matched_edge_ends("$2", reader.lanes_sql, namespaced=match.edges.namespaced)}
            ), tagged (record_id, terms, rarity) as (
                select rt.record_id, v.tag_terms, tc.rarity
                from tag_rarity as tc
                join emem.tag_vocabulary as v on v.tag operator(pg_catalog.=) tc.tag
                join emem.record_tags as rt on rt.tag = v.tag and rt.lane_name = v.lane_name
                where true{lanes}
            )"""
        narrow_endpoints: list[int] = []
        narrow_tags: list[str] = []
    else:
        records = f"""
            narrow (record_id) as (
                {fragments.tagged("$3", reader.lanes_sql)}
                union
                select pg_catalog.unnest($5::bigint[])
            ), edge_ends (record_id, terms, far_end) as (
                select n.record_id, el.label_terms, e.far_end
                from narrow as n
                cross join lateral {fragments.edges_at("n.record_id")} as e
                join emem.edge_labels as el on el.edge_id = e.edge_id
                where {fragments.edge_labels_within("$2", match.edges.namespaced, reader.lanes_sql)}
            ), tagged (record_id, terms, rarity) as (
                select n.record_id, v.tag_terms, tc.rarity
                from narrow as n
                cross join lateral (select rt.tag, rt.lane_name from emem.record_tags as rt
                                    where rt.record_id = n.record_id and rt.tag operator(pg_catalog.=) any ($1){lanes}
                                    offset 0) as rt
                join emem.tag_vocabulary as v on v.tag = rt.tag and v.lane_name = rt.lane_name
                join tag_rarity as tc on tc.tag operator(pg_catalog.=) v.tag
            )"""
        narrow_tags, narrow_endpoints = within
    sql = f"""
        with tag_rarity (tag, rarity) as (
            select * from rows from (pg_catalog.unnest($1::text[]), pg_catalog.unnest($4::float8[]))
        ), {records.strip()}, far_ends (record_id, terms) as (
            select n.record_id, v.tag_terms
            from edge_ends as n
            join emem.record_tags as rt on rt.record_id = n.far_end
            join emem.tag_vocabulary as v on v.tag = rt.tag and v.lane_name = rt.lane_name
            where v.tag operator(pg_catalog.=) any ($1){lanes}
        ), matched (record_id, terms, through_edge, rarity) as (
            select record_id, terms, false, rarity from tagged
            union all
            select record_id, terms, true, 0 from edge_ends
            union all
            select record_id, terms, true, 0 from far_ends
        ), found as (
            select m.record_id,
                   pg_catalog.count(distinct t)
                   + case when pg_catalog.bool_or(m.through_edge) then {EDGE_BONUS} else 0 end
                   + pg_catalog.max(m.rarity) as score
            from matched as m cross join lateral pg_catalog.unnest(m.terms) as t
            group by m.record_id
        )
        select {SCORED_ARRAYS.format(score="score")} from found"""
    return ScoredList.from_statement(
        reader,
        sql,
        ["text[]", "text[]", "text[]", "float8[]", "bigint[]"],
        [match.tags, terms, narrow_tags, [rarity(reader, count) for count in match.counts], narrow_endpoints],
    )


def tags_by_distance(reader: Reader, tags: list[str], terms: list[str], namespaced: bool) -> FetchedList:
    """The seed's order with a vector needs no matched terms: one join, one sort."""
    edge_ends = fragments.matched_edge_ends("$3", reader.lanes_sql, namespaced=namespaced)
    sql = f"""
        with found (record_id) as (
            {fragments.tagged("$1", reader.lanes_sql)}
            union
            select ends.endpoint from ({edge_ends}) as ends (endpoint, terms)
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
    """Every record a broad tag match reaches: the tagged records and the ends of matched edges
    (those of narrow terms at hand, those of broad terms in SQL)."""
    plpy, lanes = reader.plpy, reader.lanes_sql
    tags_sql = quoted_array(plpy, match.tags, "text")
    edges = match.edges
    broad_ends = broad_edge_ends(reader, edges, terms)
    ids_sql = fragments.tagged(tags_sql, lanes) + (f" union all {broad_ends}" if broad_ends else "")
    # The largest tag's count, plus what the other tags and the edges add.
    largest, *others = match.tags or [""]
    count_sql = f"""
        select {(match.counts or [0])[0]:d} + pg_catalog.count(distinct o.record_id) as n
        from ({fragments.tagged("$2", lanes)} union all select pg_catalog.unnest($3::bigint[])
              {f"union all {broad_ends}" if broad_ends else ""}) as o (record_id)
        where not exists (select from emem.record_tags as l
                          where l.record_id = o.record_id and l.tag operator(pg_catalog.=) $1)"""
    size = match.size
    count_args = (largest, others, edges.narrow_endpoints)

    def count_up_to(limit: int) -> int:
        """Each broad term's ends counted up to the limit; the whole counted once every part is below it."""
        if size.lower >= limit:
            return limit
        counts = [edge_ends_up_to(reader, term, terms, limit, edges.namespaced) for term in edges.broad_terms]
        if max(counts, default=0) >= limit:
            return limit
        if len(counts) == 1 and not (match.tags or edges.narrow_terms):
            return counts[0]  # the one broad term's ends are the whole match
        count = reader.execute(count_sql, ["text", "text[]", "bigint[]"], list(count_args), cache=False)[0]["n"]
        return min(count, limit)

    return Match(
        holds=lambda record_id: (
            f"({fragments.holds_tag(record_id, tags_sql, lanes)} or {ends_edge(reader, match, terms)(record_id)})"
        ),
        ids_sql=ids_sql,
        count_sql=count_sql,
        count_up_to=count_up_to,
        size=size,
        estimate=(lambda: estimated_ends(reader, edges, terms)) if edges.broad_terms else None,
        count_types=("text", "text[]", "bigint[]"),
        count_args=count_args,
        known_ids=edges.narrow_endpoints,
        ids_in_order_sql=(
            f"{fragments.tagged_with(plpy.quote_literal(match.tags[0]), lanes)} order by rt.record_id"
            if len(match.tags) == 1 and not edges.found
            else None
        ),
        in_order_cheaply=len(match.tags) == 1 and not edges.found,
    )


def broad_edge_ends(reader: Reader, edges: EdgeMatch, terms: list[str]) -> str | None:
    """A query of the ends of the edges whose labels hold a broad term (None: no broad term)."""
    if not edges.broad_terms:
        return None
    plpy = reader.plpy
    ends = fragments.matched_edge_ends(
        quoted_array(plpy, terms, "text"),
        reader.lanes_sql,
        holding=quoted_array(plpy, edges.broad_terms, "text"),
        namespaced=edges.namespaced,
    )
    return f"select ends.endpoint from ({ends}) as ends (endpoint, terms)"


def edge_ends_up_to(reader: Reader, term: str, terms: list[str], limit: int, namespaced: bool) -> int:
    """How many distinct records end a matched edge whose label holds `term`, counted up to a
    limit: labels are read in growing batches until their ends reach it or run out."""
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


def narrow_predicate(reader: Reader, narrow: list[str], endpoints: list[int]) -> Narrow:
    """Holds a tag that is not broad, or is one of these records (the ends of the narrow terms'
    edges, and those linked to a narrowly tagged record): what a tiered list reads whole."""
    plpy, lanes = reader.plpy, reader.lanes_sql
    # The records are at hand: a constant array, hashed once per statement.
    narrow_ends = f"'{{{','.join(str(int(end)) for end in endpoints)}}}'::bigint[]" if endpoints else None
    narrow_sql = quoted_array(plpy, narrow, "text") if narrow else None

    def holds(record_id: str) -> str:
        held = [
            *([fragments.holds_tag(record_id, narrow_sql, lanes)] if narrow_sql else []),
            *([f"{record_id} operator(pg_catalog.=) any ({narrow_ends})"] if narrow_ends else []),
        ]
        return f"({' or '.join(held)})" if held else "false"

    return Narrow(holds)


def ends_edge(reader: Reader, match: TagMatch, terms: list[str]) -> Predicate:
    """A predicate: an edge the question's terms name ends at the record. Predicates test a few
    records (a page, what a filtered scan visits): many matched edges are probed through the
    edges' indexes rather than gathered whole for each statement."""
    edges = match.edges
    if not edges.found:
        return lambda record_id: "false"
    terms_sql, lanes = quoted_array(reader.plpy, terms, "text"), reader.lanes_sql
    if not edges.broad_terms and len(edges.narrow_endpoints) <= reader.tuning.exact_candidates:
        ends = fragments.matched_edge_ends(terms_sql, lanes, namespaced=edges.namespaced)
        endpoints = f"select ends.endpoint from ({ends}) as ends (endpoint, terms)"
        return lambda record_id: f"{record_id} in ({endpoints})"
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


def edge_part(reader: Reader, edges: EdgeMatch, terms: list[str], term: str, size: Size) -> Part:
    """A broad edge term: the ends of the matched edges whose label holds it, probed through the
    edges' indexes; a walk in record-id order walks the records. Its score key is (the term,
    EDGE_BONUS): every matched label of such an end is made of broad terms (a narrow one's ends
    are read whole), so the parts it holds give its label terms."""
    terms_sql, holding = quoted_array(reader.plpy, terms, "text"), quoted_array(reader.plpy, [term], "text")
    lanes = reader.lanes_sql

    def holds(record_id: str) -> str:
        return fragments.ends_matched_edge(record_id, terms_sql, lanes, holding=holding, namespaced=edges.namespaced)

    ends = fragments.matched_edge_ends(terms_sql, lanes, holding=holding, namespaced=edges.namespaced)
    return Part(
        holds,
        f"select distinct ends.endpoint from ({ends}) as ends (endpoint, terms, far_end)",
        Size(size.lower),
        (frozenset([term]), EDGE_BONUS),
        ids_in_order_sql=f"select r.record_id from emem.records as r where {holds('r.record_id')}",
    )


def tag_part(reader: Reader, tag: str, count: int) -> Part:
    """A broad tag: its score key is (its terms, its rarity)."""
    quoted, lanes = quoted_array(reader.plpy, [tag], "text"), reader.lanes_sql
    return Part(
        lambda record_id: fragments.holds_tag(record_id, quoted, lanes),
        fragments.tagged_with(reader.plpy.quote_literal(tag), lanes),
        Size.exactly(count),
        (frozenset(reader.state.analyser.label_terms(tag)), rarity(reader, count)),
    )


def visible_members(reader: Reader, record_ids: list[int], lanes: list[str], namespaced: bool) -> set[int]:
    """Which of these records a tag lookup holds for a caller reading only `lanes`: through a
    matched tag, or a matched edge both of whose ends lie in those lanes."""
    terms = list(reader.request.analysis.terms_for_labels)
    lanes_sql = quoted_array(reader.plpy, lanes, "text") if lanes else "array[]::text[]"
    tag_within = fragments.labels_within("v.tag_terms", "$2", "v.namespace_terms" if namespaced else None)
    rows = reader.execute(
        f"""select id from pg_catalog.unnest($1::bigint[]) as id
            where exists (select from emem.record_tags as rt
                          join emem.tag_vocabulary as v on v.tag = rt.tag and v.lane_name = rt.lane_name
                          where rt.record_id = id and {tag_within})
               or {fragments.ends_matched_edge("id", "$2", lanes_sql, namespaced=namespaced)}""",
        ["bigint[]", "text[]"],
        [record_ids, terms],
        cache=False,
    )
    return {row["id"] for row in rows}
