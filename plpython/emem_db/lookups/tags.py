"""Tags and edge properties: the question's terms against tags (through the tag vocabulary),
edge relation names and property values; candidates are the tagged records and both ends of a
matched edge.

A tag's size is its count in the vocabulary. Edges are seen per question term their matched
labels hold: a term held by at most Reader.probed_limit matched labels is narrow, the ends of its
edges gathered; a broad term (more labels, or common enough in the labels' statistics) is read
through predicates, as a part of its own, and its ends are counted only up to what the totals
need."""

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
    upper = match.size.upper
    if not (match.tags or match.edges.found) or (upper is not None and upper <= reader.exact_limit):
        return exact_tags(reader, match.tags, terms, by_terms)
    whole = whole_match(reader, match, terms)
    if not (reader.degraded or by_terms) or (len(match.tags) == 1 and not match.edges.found):
        return BroadList(reader, whole)  # by distance, or one tag that every candidate matched: nothing to score
    broad = match.broad_tags(reader.exact_limit)
    parts = [
        *(tag_part(reader, tag, count) for tag, count in zip(match.tags, match.counts, strict=True) if tag in broad),
        *(
            edge_part(reader, term, terms, size)
            for term, size in zip(match.edges.broad_terms, match.edges.broad_sizes, strict=True)
        ),
    ]
    if not parts or len(parts) > reader.tuning.max_broad_parts:
        return exact_tags(reader, match.tags, terms, by_terms)
    narrow = match.narrow_tags(reader.exact_limit)
    return TieredList(
        reader,
        whole,
        scored_tags(reader, match.tags, terms, within=(narrow, match.edges)),
        parts,
        lambda held: len(frozenset().union(*(part.score_key for part in held))),
        narrow_predicate(reader, match, narrow),
    )


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
                         from matched), '{{}}') as counts
        """,
        ["text[]"],
        [terms],
    )[0]
    return TagMatch(list(row["tags"]), list(row["counts"]), edge_match(reader, terms))


def edge_match(reader: Reader, terms: list[str]) -> EdgeMatch:
    """The matched edges per question term, each term's labels read up to probed_limit + 1: a term
    with more is broad. A term whose matched labels the labels' statistics (their most common
    values, whole) put beyond probed_limit is broad without that reading. The statistics span
    every lane: they only spare that reading, they decide no answer."""
    limit = reader.probed_limit
    labels = reader.rows_of("edge_labels")
    within = [
        (held, share)
        for held, share in reader.common_arrays("edge_labels", "label_terms").items()
        if held <= set(terms)
    ]
    estimated = {term: sum(share for held, share in within if term in held) * labels for term in terms}
    to_read = [term for term in terms if estimated[term] <= limit]
    rows = reader.execute(
        f"""select t.term, pg_catalog.count(*) as labels,
                   pg_catalog.array_agg(m.from_record_id) operator(pg_catalog.||) pg_catalog.array_agg(m.to_record_id)
                       as ends
            from pg_catalog.unnest($2::text[]) as t (term)
            cross join lateral ({edges_holding(reader, "t.term", "$1", "$3")}) as m
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
    )


def estimated_ends(reader: Reader, edges: EdgeMatch, terms: list[str]) -> float | None:
    """An estimate of how many records end the broad terms' edges (the largest of the terms'):
    from a sample of Tuning.edge_sample matched labels of each."""
    estimates = []
    for term, most in zip(edges.broad_terms, edges.broad_most_ends, strict=True):
        row = reader.execute(
            f"""select pg_catalog.array_agg(m.from_record_id) operator(pg_catalog.||)
                       pg_catalog.array_agg(m.to_record_id) as ends
                from ({edges_holding(reader, "$2", "$1", "$3")}) as m""",
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


def edges_holding(reader: Reader, term: str, terms: str, limit: str) -> str:
    """The ends (from_record_id, to_record_id) of at most `limit` matched edges whose label holds
    `term` (SQL expressions each): those labels first, each edge then probed by its key."""
    return f"""select e.from_record_id, e.to_record_id
               from (select el.edge_id from emem.edge_labels as el
                     where el.label_terms operator(pg_catalog.@>) array[{term}]
                       and {fragments.labels_within("el.label_terms", terms)}) as el
               cross join lateral (select e.from_record_id, e.to_record_id from emem.edges as e
                                   where e.edge_id = el.edge_id{fragments.edge_in_lanes("e", reader.lanes_sql)}
                                   offset 0) as e
               limit {limit}"""


def exact_tags(reader: Reader, tags: list[str], terms: list[str], by_terms: bool) -> CandidateList:
    """Every tag and edge candidate in the list's order: by distance, or by matched terms first."""
    if not (by_terms or reader.degraded):
        return tags_by_distance(reader, tags, terms)
    return scored_tags(reader, tags, terms)


def scored_tags(
    reader: Reader, tags: list[str], terms: list[str], within: tuple[list[str], EdgeMatch] | None = None
) -> ScoredList:
    """Every tag and edge candidate with its matched terms, most first; `within` (narrow tags and
    the edges) keeps the records holding one of those tags or ending an edge whose label holds a
    narrow term (a tiered list's exact part), each scored by all it matches."""
    lanes = fragments.in_lanes("rt.lane_name", reader.lanes_sql)
    edge_lanes = fragments.edge_in_lanes("e", reader.lanes_sql)
    # A tag's words come from its lane's vocabulary row (one per lane and tag). Each narrow
    # record's tags and edges are probed from the record, through the indexes.
    if within is None:
        matched = f"""
            select rt.record_id, v.tag_terms
            from emem.tag_vocabulary as v join emem.record_tags as rt on rt.tag = v.tag and rt.lane_name = v.lane_name
            where v.tag operator(pg_catalog.=) any ($1){lanes}
            union all
            select ends.endpoint, ends.label_terms
            from ({fragments.matched_edge_ends("$2", reader.lanes_sql)}) as ends"""
        args: list = [tags, terms]
    else:
        matched = f"""
            with narrow (record_id) as (
                {fragments.tagged("$3", reader.lanes_sql)}
                union
                select pg_catalog.unnest($4::bigint[])
            )
            select n.record_id, v.tag_terms
            from narrow as n
            cross join lateral (select rt.tag, rt.lane_name from emem.record_tags as rt
                                where rt.record_id = n.record_id and rt.tag operator(pg_catalog.=) any ($1){lanes}
                                offset 0) as rt
            join emem.tag_vocabulary as v on v.tag = rt.tag and v.lane_name = rt.lane_name
            union all
            select n.record_id, el.label_terms
            from narrow as n
            cross join lateral (select e.edge_id from emem.edges as e
                                where e.from_record_id = n.record_id{edge_lanes}
                                union all
                                select e.edge_id from emem.edges as e
                                where e.to_record_id = n.record_id{edge_lanes}) as ends
            join emem.edge_labels as el on el.edge_id = ends.edge_id
            where {fragments.labels_within("el.label_terms", "$2")}"""
        narrow_tags, edges = within
        args = [tags, terms, narrow_tags, edges.narrow_endpoints]
    sql = f"""
        with found as (
            select m.record_id, pg_catalog.count(distinct t) as matched_terms
            from ({matched}) as m (record_id, terms) cross join lateral pg_catalog.unnest(m.terms) as t
            group by m.record_id
        )
        select {SCORED_ARRAYS.format(score="matched_terms")} from found"""
    types = ["text[]", "text[]", "text[]", "bigint[]"][: len(args)]
    return ScoredList.from_statement(reader, sql, types, args)


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
        counts = [edge_ends_up_to(reader, term, terms, limit) for term in edges.broad_terms]
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
        quoted_array(plpy, terms, "text"), reader.lanes_sql, holding=quoted_array(plpy, edges.broad_terms, "text")
    )
    return f"select ends.endpoint from ({ends}) as ends (endpoint, terms)"


def edge_ends_up_to(reader: Reader, term: str, terms: list[str], limit: int) -> int:
    """How many distinct records end a matched edge whose label holds `term`, counted up to a
    limit: labels are read in growing batches until their ends reach it or run out."""
    batch = limit  # enough in one reading unless the edges share their ends
    while True:
        row = reader.execute(
            f"""select pg_catalog.count(*) as labels, pg_catalog.count(distinct ends.endpoint) as ends
                from ({edges_holding(reader, "$1", "$2", "$3")}) as m
                cross join lateral (values (m.from_record_id), (m.to_record_id)) as ends (endpoint)""",
            ["text", "text[]", "bigint"],
            [term, terms, batch],
        )[0]
        if row["ends"] >= limit or row["labels"] < 2 * batch:
            return min(row["ends"], limit)
        batch *= 2


def narrow_predicate(reader: Reader, match: TagMatch, narrow: list[str]) -> Narrow:
    """Holds a tag that is not broad, or ends an edge whose label holds a narrow term: what a
    tiered list reads whole."""
    plpy, lanes = reader.plpy, reader.lanes_sql
    # The narrow terms' ends are at hand: a constant array, hashed once per statement.
    endpoints = match.edges.narrow_endpoints
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
        ends = fragments.matched_edge_ends(terms_sql, lanes)
        endpoints = f"select ends.endpoint from ({ends}) as ends (endpoint, terms)"
        return lambda record_id: f"{record_id} in ({endpoints})"
    return lambda record_id: fragments.ends_matched_edge(record_id, terms_sql, lanes)


def tag_part(reader: Reader, tag: str, count: int) -> Part:
    quoted, lanes = quoted_array(reader.plpy, [tag], "text"), reader.lanes_sql
    return Part(
        lambda record_id: fragments.holds_tag(record_id, quoted, lanes),
        fragments.tagged_with(reader.plpy.quote_literal(tag), lanes),
        Size.exactly(count),
        frozenset(reader.state.analyser.label_terms(tag)),
    )


def edge_part(reader: Reader, term: str, terms: list[str], size: Size) -> Part:
    """The records ending a matched edge whose label holds a broad term: probed one by one, walked
    in record-id order from the records' primary key."""
    plpy, lanes = reader.plpy, reader.lanes_sql
    terms_sql, holding = quoted_array(plpy, terms, "text"), quoted_array(plpy, [term], "text")

    def holds(record_id: str) -> str:
        return fragments.ends_matched_edge(record_id, terms_sql, lanes, holding=holding)

    ends = fragments.matched_edge_ends(terms_sql, lanes, holding=holding)
    return Part(
        holds,
        f"select distinct ends.endpoint from ({ends}) as ends (endpoint, terms)",
        size,
        frozenset([term]),
        f"select r.record_id from emem.records as r where {holds('r.record_id')}",
    )


def visible_members(reader: Reader, record_ids: list[int], lanes: list[str]) -> set[int]:
    """Which of these records a tag lookup holds for a caller reading only `lanes`: through a
    matched tag, or a matched edge both of whose ends lie in those lanes."""
    terms = list(reader.request.analysis.terms)
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
