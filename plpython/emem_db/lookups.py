"""The four lookups as set-based SQL over the extension's indexes.

Orders (ties are always broken by record id, ascending):
- with a question vector, every list by distance; a record without a vector in the active
  space counts as the worst distance, 2 (a placeholder);
- degraded (no vector): tags and edges by the number of distinct question terms matched,
  most first; full text by the number of terms matched, most first;
- the opt-in components: tags_by_terms by matched terms, then distance; fulltext_by_rarity and
  fulltext_words by the summed IDF of the terms matched, then distance.

A tag or full-text match larger than Lookups.exact_limit (a broad tag or term) is not fetched
whole: its list is read from the HNSW index, filtered to the match, as far as the merge reaches
(BroadList), and its size is counted (for tags, from the tag vocabulary's counts). A list
ordered by a score first (matched terms, summed IDF) reads the records of its broad tags or terms
the same way, one tier per combination of them (TieredList); the records it fetches whole come
with their scores, and their distances are fetched one score level at a time (ScoredList).
"""

import bisect
import functools
import heapq
import itertools
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from emem_db.analysis import QuestionAnalysis
from emem_db.entry import Backend
from emem_db.merge import Candidate

# A match of up to this many records is always fetched whole. With a vector the limit grows with
# the space: a filtered HNSW scan visits about reach * records / size vectors to find `reach`
# matches, each visit costing some ten times what an exact read pays per match, so the two meet
# near size = sqrt(FILTERED_SCAN_COST_RATIO * reach * records). Measured at 1M records, page 1:
# a 3,000-record tag costs 16-23 ms read whole and 32-55 ms by the filtered scan, a term on 17,700
# records 100-145 ms and 45-300 ms, a tag on 120,000 records about 720 ms and 10-35 ms.
EXACT_CANDIDATES = 2_000
FILTERED_SCAN_COST_RATIO = 10
DOCUMENT_FREQUENCY_CAP = 20_000
COMMON_WORD_SHARE = 0.05
COMMON_WORD_FLOOR = 1_000  # a word on fewer records is cheap to search, however common
# ef_search of the filtered scans: fixed, so that a longer fetch extends a shorter one.
FILTERED_SCAN_EF_SEARCH = 100
# A scored list with more broad tags or terms than this is read whole (2^n - 1 tiers otherwise).
MAX_BROAD_PARTS = 3
# Lists ordered by a score fetch their records' distances one score level at a time (ScoredList).
LAZY_DISTANCES = True
# What the statement of a ScoredList selects from `found`: its records and scores, best first.
SCORED_ARRAYS = (
    "pg_catalog.array_agg(record_id order by {score} desc, record_id) as record_ids,"
    " pg_catalog.array_agg({score}::float8 order by {score} desc, record_id) as scores"
)


@dataclass(frozen=True)
class Space:
    space_id: int
    dimension: int
    model_name: str


@dataclass(frozen=True)
class Request:
    question: str
    vector: str | None
    analysis: QuestionAnalysis
    weights: dict[str, float]
    space: Space | None
    candidate_counts: dict[str, int]

    @property
    def degraded(self) -> bool:
        return self.vector is None


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


@dataclass(frozen=True)
class Part:
    """A broad tag or term of a scored list: which records hold it (a SQL predicate over a
    record id, and a query of their ids), how many, and what it adds to a record's score."""

    holds: Callable[[str], str]
    ids_sql: str
    size: int
    score_key: Any


@contextmanager
def scoped_settings(plpy: Any, state: Backend, values: dict[str, str]):
    """Set GUCs for the statements inside, then put back what the caller had."""
    names = list(values)
    saved = plpy.execute(
        state.plan(
            "select name, pg_catalog.current_setting(name) as value from pg_catalog.unnest($1) as name", ["text[]"]
        ),
        [names],
    )
    setter = state.plan("select pg_catalog.set_config($1, $2, true)", ["text", "text"])
    for name, value in values.items():
        plpy.execute(setter, [name, value])
    try:
        yield
    finally:
        for row in saved:
            plpy.execute(setter, [row["name"], row["value"]])


class Lookups:
    """The lookups of one request. `reach` is how far into the merged list the caller reads
    (the end of its page): no list needs more entries than that, duplicates aside."""

    def __init__(self, state: Backend, request: Request, reach: int) -> None:
        self.state = state
        self.plpy = state.plpy
        self.request = request
        self.reach = reach

    def run(self, name: str) -> Sequence[Candidate]:
        return getattr(self, name)()

    @functools.cached_property
    def exact_limit(self) -> int:
        """How many records a match may hold and still be fetched whole (see EXACT_CANDIDATES)."""
        if self.request.degraded:
            return EXACT_CANDIDATES  # degraded broad lists are read in record-id order: cheap at any size
        records = self.execute(
            "select greatest(c.reltuples, 0) as n from pg_catalog.pg_class as c"
            " where c.oid = 'emem.records'::pg_catalog.regclass",
            [],
            [],
        )[0]["n"]
        return max(EXACT_CANDIDATES, int(math.sqrt(FILTERED_SCAN_COST_RATIO * self.reach * records)))

    def execute(self, sql: str, types: list[str], args: list[Any], cache: bool = True) -> list[dict]:
        """Run a statement; its plan is kept for the backend unless the text holds values
        (cache=False), which would fill the cache with one plan per question."""
        plan = self.state.plan(sql, types) if cache else self.plpy.prepare(sql, types)
        return self.plpy.execute(plan, args)

    def candidates(self, sql: str, types: list[str], args: list[Any], cache: bool = True) -> list[Candidate]:
        return [
            Candidate(
                row["record_id"], finite_or_none(row["distance"]), tuple(row.get("windows") or ()), row.get("score")
            )
            for row in self.execute(sql, types, args, cache)
        ]

    def scored(self, sql: str, types: list[str], args: list[Any]) -> "ScoredList":
        """A list ordered by score from a statement giving SCORED_ARRAYS."""
        row = self.execute(sql, types, args)[0]
        return ScoredList(self, list(row["record_ids"] or ()), [float(s) for s in row["scores"] or ()])

    def with_distances(self, record_ids: list[int], scores: list[float]) -> list[Candidate]:
        """These records with their scores and distances, by score, then distance (degraded: none),
        then record id."""
        if self.request.degraded:
            return [
                Candidate(record_id, None, (), score)
                for score, record_id in sorted(zip(scores, record_ids, strict=True), key=lambda p: (-p[0], p[1]))
            ]
        return self.candidates(
            f"""select found.record_id, {self.distance_sql()} as distance, found.score
                from rows from (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($3::float8[]))
                     as found (record_id, score)
                order by found.score desc, distance nulls last, found.record_id""",
            ["bigint[]", "public.vector", "float8[]"],
            [record_ids, self.request.vector, scores],
        )

    def distance_sql(self) -> str:
        """The cosine distance of a record (found.record_id) to the question ($2); NULL without."""
        if self.request.degraded:
            return "null::float8"
        space_id = self.request.space.space_id
        return (
            "(select rv.embedding operator(public.<=>) $2::public.vector from emem.record_vectors as rv"
            f" where rv.space_id = {space_id:d} and rv.record_id = found.record_id)"
        )

    def vector_distance_sql(self, column: str) -> str:
        """The expression the space's HNSW partial index orders by."""
        dimension = self.request.space.dimension
        return f"({column}::public.vector({dimension:d}) operator(public.<=>) $1::public.vector({dimension:d}))"

    # ---- tags and edge properties -----------------------------------------------------------

    def tags(self) -> Sequence[Candidate]:
        """Seed order: by distance (degraded: by matched terms)."""
        return self.tag_candidates(by_terms=False)

    def tags_by_terms(self) -> Sequence[Candidate]:
        """Opt-in: by the number of distinct question terms matched, then by distance."""
        return self.tag_candidates(by_terms=True)

    def tag_candidates(self, by_terms: bool) -> Sequence[Candidate]:
        terms = list(self.request.analysis.terms)
        if not terms:
            return []
        match = self.tag_match(terms)
        if not match.tags or match.estimated_size <= self.exact_limit:
            return self.exact_tags(match.tags, terms, by_terms)
        whole = BroadTagList(self, match)
        if not (self.request.degraded or by_terms) or (len(match.tags) == 1 and not match.edge_endpoints):
            return whole  # by distance, or one tag that every candidate matched: nothing to score
        broad = match.broad_tags(self.exact_limit)
        if not broad or len(broad) > MAX_BROAD_PARTS:
            return self.exact_tags(match.tags, terms, by_terms)
        scored = self.exact_tags(match.tags, terms, by_terms, within=match.narrow_tags(self.exact_limit))
        return TieredList(
            whole,
            scored,
            [self.tag_part(tag, count) for tag, count in zip(match.tags, match.counts, strict=True) if tag in broad],
            lambda parts: len(frozenset().union(*(part.score_key for part in parts))),
            whole.narrow_predicate,
        )

    def tag_part(self, tag: str, count: int) -> Part:
        quoted = self.plpy.quote_literal(tag)
        return Part(
            lambda record_id: (
                f"exists (select from emem.record_tags as rt where rt.record_id = {record_id}"
                f" and rt.tag operator(pg_catalog.=) {quoted})"
            ),
            f"select rt.record_id from emem.record_tags as rt where rt.tag operator(pg_catalog.=) {quoted}",
            count,
            frozenset(self.state.analyser.label_terms(tag)),
        )

    def tag_match(self, terms: list[str]) -> TagMatch:
        row = self.execute(
            """
            with matched as (
                select v.tag, v.record_count from emem.tag_vocabulary as v
                where v.tag_terms operator(pg_catalog.&&) $1 and v.tag_terms operator(pg_catalog.<@) $1
                  and v.record_count > 0
            )
            select coalesce((select pg_catalog.array_agg(tag order by record_count desc, tag) from matched),
                            '{}') as tags,
                   coalesce((select pg_catalog.array_agg(record_count order by record_count desc, tag)
                             from matched), '{}') as counts,
                   array(select distinct ends.endpoint
                         from emem.edge_labels as el
                         join emem.edges as e on e.edge_id = el.edge_id
                         cross join lateral (values (e.from_record_id), (e.to_record_id)) as ends (endpoint)
                         where el.label_terms operator(pg_catalog.&&) $1
                           and el.label_terms operator(pg_catalog.<@) $1) as edge_endpoints
            """,
            ["text[]"],
            [terms],
        )[0]
        return TagMatch(list(row["tags"]), list(row["counts"]), list(row["edge_endpoints"]))

    def exact_tags(
        self, tags: list[str], terms: list[str], by_terms: bool, within: list[str] | None = None
    ) -> "list[Candidate] | ScoredList":
        """Every tag and edge candidate, with its matched terms and distance, in the list's order;
        `within` keeps the records holding one of these tags or an edge (a tiered list's exact part)."""
        if not (by_terms or self.request.degraded):
            return self.tags_by_distance(tags, terms)
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
                select ends.endpoint, el.label_terms
                from emem.edge_labels as el
                join emem.edges as e on e.edge_id = el.edge_id
                cross join lateral (values (e.from_record_id), (e.to_record_id)) as ends (endpoint)
                where el.label_terms operator(pg_catalog.&&) $2 and el.label_terms operator(pg_catalog.<@) $2
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
        return self.scored(sql, ["text[]", "text[]", "text[]"], [tags, terms, within or []])

    def tags_by_distance(self, tags: list[str], terms: list[str]) -> list[Candidate]:
        """The seed's order with a vector needs no matched terms: one join, one sort."""
        sql = f"""
            with found (record_id) as (
                select rt.record_id from emem.record_tags as rt where rt.tag operator(pg_catalog.=) any ($1)
                union
                select ends.endpoint
                from emem.edge_labels as el
                join emem.edges as e on e.edge_id = el.edge_id
                cross join lateral (values (e.from_record_id), (e.to_record_id)) as ends (endpoint)
                where el.label_terms operator(pg_catalog.&&) $3 and el.label_terms operator(pg_catalog.<@) $3
            )
            select found.record_id, rv.embedding operator(public.<=>) $2::public.vector as distance
            from found
            left join emem.record_vectors as rv
                   on rv.space_id = {self.request.space.space_id:d} and rv.record_id = found.record_id
            order by distance nulls last, found.record_id"""
        return self.candidates(sql, ["text[]", "public.vector", "text[]"], [tags, self.request.vector, terms])

    # ---- full text --------------------------------------------------------------------------

    def fulltext(self) -> Sequence[Candidate]:
        """Seed: the terms WordNet does not know, by distance (degraded: by terms matched, then
        record id). A match of more than exact_limit records is read lazily."""
        queries = self.term_queries([[term] for term in self.request.analysis.unknown_terms])
        any_term = self.broad_term_query(queries) if queries else None
        if self.request.degraded:
            if any_term is None:
                return self.fulltext_scored(queries, [1.0] * len(queries))
            _, frequencies = self.document_frequencies(queries)
            return self.scored_fulltext(queries, frequencies, [1.0] * len(queries))
        if any_term is None:
            return self.fulltext_by_distance(queries)
        return BroadFulltextList(self, any_term, lambda: self.fulltext_by_distance(queries))

    def broad_term_query(self, queries: list[str]) -> str | None:
        """The OR of the terms when they match more than exact_limit records."""
        row = self.execute(
            f"""with question as (select emem.tsquery_any(q) as any_term from pg_catalog.unnest($1::tsquery[]) as q)
                select (select any_term from question)::text as any_term,
                       (select pg_catalog.count(*) from (
                            select from emem.records as r
                            where r.content_search operator(pg_catalog.@@) (select any_term from question)
                            limit {self.exact_limit + 1:d}) as matching) as matching""",
            ["tsquery[]"],
            [queries],
        )[0]
        return row["any_term"] if row["matching"] > self.exact_limit else None

    def fulltext_by_rarity(self) -> Sequence[Candidate]:
        """Opt-in: the same terms, by the rarity of those matched (summed IDF), then distance."""
        queries = self.term_queries([[term] for term in self.request.analysis.unknown_terms])
        records, frequencies = self.document_frequencies(queries)
        return self.fulltext_by_idf(queries, frequencies, records)

    def fulltext_words(self) -> list[Candidate]:
        """Opt-in: every content word too (as typed or as its lemma), by summed IDF, then distance.
        A word on more than COMMON_WORD_SHARE of the records (and COMMON_WORD_FLOOR of them, or on
        DOCUMENT_FREQUENCY_CAP) says too little to bring candidates of its own and is left out,
        as a stop word is."""
        terms = [list(dict.fromkeys((typed, term))) for typed, term in self.request.analysis.content_words]
        queries = self.term_queries(terms)
        records, frequencies = self.document_frequencies(queries)
        common = min(DOCUMENT_FREQUENCY_CAP, max(COMMON_WORD_FLOOR, COMMON_WORD_SHARE * records))
        telling = [(query, df) for query, df in zip(queries, frequencies, strict=True) if df < common]
        return self.fulltext_by_idf([query for query, _ in telling], [df for _, df in telling], records)

    def fulltext_by_idf(self, queries: list[str], frequencies: list[float], records: float) -> Sequence[Candidate]:
        """Records matching any of the queries, by the summed IDF of those matched, then distance."""
        return self.scored_fulltext(
            queries, frequencies, [inverse_document_frequency(records, df) for df in frequencies]
        )

    def scored_fulltext(
        self, queries: list[str], frequencies: list[float], weights: list[float]
    ) -> Sequence[Candidate]:
        """Records matching any of the queries, by the summed weights of those matched, then
        distance. Terms on more than exact_limit records are read in tiers."""
        broad = [n for n, df in enumerate(frequencies) if df > self.exact_limit]
        if not broad or len(broad) > MAX_BROAD_PARTS:
            return self.fulltext_scored(queries, weights)
        narrow = [query for n, query in enumerate(queries) if n not in broad]
        any_narrow = quoted_tsquery(self.plpy, any_of(narrow))
        whole = BroadFulltextList(self, any_of(queries), lambda: self.fulltext_scored(queries, weights))
        return TieredList(
            whole,
            self.fulltext_scored(queries, weights, within=narrow),
            [self.term_part(queries[n], frequencies[n], weights[n]) for n in broad],
            lambda parts: sum(part.score_key for part in parts),
            lambda record_id: text_matches(record_id, any_narrow) if narrow else "false",
        )

    def term_part(self, query: str, frequency: float, weight: float) -> Part:
        quoted = quoted_tsquery(self.plpy, query)
        return Part(
            lambda record_id: text_matches(record_id, quoted),
            f"select r.record_id from emem.records as r where r.content_search operator(pg_catalog.@@) {quoted}",
            int(frequency),
            weight,
        )

    def fulltext_by_distance(self, queries: list[str]) -> list[Candidate]:
        """Records matching any of the terms' queries (see term_queries), nearest first."""
        sql = f"""
            with found as (
                select r.record_id from emem.records as r
                where r.content_search operator(pg_catalog.@@)
                      (select emem.tsquery_any(q) from pg_catalog.unnest($1::tsquery[]) as q)
            )
            select record_id, {self.distance_sql()} as distance
            from found order by distance nulls last, record_id"""
        return self.candidates(sql, ["tsquery[]", "public.vector"], [queries, self.request.vector])

    def fulltext_scored(
        self, queries: list[str], weights: list[float], within: list[str] | None = None
    ) -> "ScoredList":
        """Records matching any of the terms' queries, by the summed weights of the terms matched;
        `within` keeps the records that match one of those queries (a tiered list's exact part)."""
        within = queries if within is None else within
        if not within:
            return ScoredList(self, [], [])
        sql = f"""
            with found as (
                select r.record_id,
                       (select coalesce(pg_catalog.sum(t.weight), 0)
                        from rows from (pg_catalog.unnest($1::tsquery[]), pg_catalog.unnest($2::float8[]))
                             as t (q, weight)
                        where r.content_search operator(pg_catalog.@@) t.q) as score
                from emem.records as r
                where r.content_search operator(pg_catalog.@@)
                      (select emem.tsquery_any(q) from pg_catalog.unnest($3::tsquery[]) as q)
            )
            select {SCORED_ARRAYS.format(score="score")} from found"""
        return self.scored(sql, ["tsquery[]", "float8[]", "tsquery[]"], [queries, weights, within])

    def term_queries(self, terms: list[list[str]]) -> list[str]:
        """One tsquery per term: the OR of its distinct variants (spellings), each a phrase of the
        text search parser's tokens, so that a code matches whole. A term whose variants give one
        lexeme ("Q3", "q3") is that lexeme, whose frequency the column's statistics know."""
        if not terms:
            return []
        numbers = [n for n, variants in enumerate(terms) for _ in variants]
        texts = [text for variants in terms for text in variants]
        rows = self.execute(
            """with variant as (
                   select distinct v.term, pg_catalog.phraseto_tsquery('emem.exact'::pg_catalog.regconfig, v.text) as q
                   from rows from (pg_catalog.unnest($1::int[]), pg_catalog.unnest($2::text[])) as v (term, text)
               )
               select emem.tsquery_any(q order by q::text)::text as query from variant
               where pg_catalog.numnode(q) > 0
               group by term order by term""",
            ["int[]", "text[]"],
            [numbers, texts],
        )
        return [row["query"] for row in rows]

    def document_frequencies(self, queries: list[str]) -> tuple[float, list[float]]:
        """The number of records and each term's document frequency. A lexeme common enough to
        be in the column's statistics takes its frequency from them; any other term is counted
        (it is rare, so that is cheap), up to DOCUMENT_FREQUENCY_CAP."""
        if not queries:
            return 0.0, []
        common = self.common_lexemes()
        shares = [common.get(single_lexeme(query)) for query in queries]
        rows = self.execute(
            f"""select case when c.reltuples >= {DOCUMENT_FREQUENCY_CAP:d} then c.reltuples
                            -- an estimate, -1 before the first VACUUM or ANALYZE: a small table is counted
                            else greatest(c.reltuples, (select pg_catalog.count(*) from (
                                select from emem.records limit {DOCUMENT_FREQUENCY_CAP:d}) as r))
                       end::float8 as n,
                       array(select (select pg_catalog.count(*) from (
                                         select from emem.records as r
                                         where r.content_search operator(pg_catalog.@@) q.query::tsquery
                                         limit {DOCUMENT_FREQUENCY_CAP:d}) as matching)::float8
                             from pg_catalog.unnest($1::text[]) with ordinality as q (query, n)
                             order by q.n) as counted
                from pg_catalog.pg_class as c where c.oid = 'emem.records'::pg_catalog.regclass""",
            ["text[]"],
            [[query for query, share in zip(queries, shares, strict=True) if share is None]],
        )[0]
        counted = iter(rows["counted"])
        return rows["n"], [share * rows["n"] if share is not None else next(counted) for share in shares]

    def common_lexemes(self) -> dict[str, float]:
        """The most common lexemes of the records' text with the share of records holding each, from
        the column's statistics; kept for the backend until emem.records is analysed again."""
        analysed = self.execute(
            """select pg_catalog.pg_stat_get_last_analyze_time(c.oid)::text as manual,
                      pg_catalog.pg_stat_get_last_autoanalyze_time(c.oid)::text as auto
               from pg_catalog.pg_class as c where c.oid = 'emem.records'::pg_catalog.regclass""",
            [],
            [],
        )[0]
        key = (analysed["manual"], analysed["auto"])
        if self.state.common_lexemes is None or self.state.common_lexemes[0] != key:
            stats = self.execute(
                """select s.most_common_elems::text::text[] as lexemes, s.most_common_elem_freqs as shares
                   from pg_catalog.pg_stats as s
                   where s.schemaname = 'emem' and s.tablename = 'records' and s.attname = 'content_search'""",
                [],
                [],
            )
            found = stats[0] if stats and stats[0]["lexemes"] else {"lexemes": [], "shares": []}
            self.state.common_lexemes = (key, dict(zip(found["lexemes"], found["shares"], strict=False)))
        return self.state.common_lexemes[1]

    # ---- vectors ----------------------------------------------------------------------------

    def record_vectors(self) -> list[Candidate]:
        sql = f"""
            select record_id, {self.vector_distance_sql("embedding")} as distance
            from emem.record_vectors where space_id = {self.request.space.space_id:d}
            order by distance limit $2"""
        return self.nearest(sql, self.request.candidate_counts["record_vectors"])

    def window_vectors(self) -> list[Candidate]:
        sql = f"""
            with nearest as (
                select window_id, {self.vector_distance_sql("embedding")} as distance
                from emem.windows where space_id = {self.request.space.space_id:d}
                order by distance limit $2
            )
            select m.record_id, pg_catalog.min(n.distance) as distance,
                   pg_catalog.array_agg(n.window_id order by n.distance, n.window_id) as windows
            from nearest as n join emem.window_members as m on m.window_id = n.window_id
            group by m.record_id
            order by distance, record_id"""
        return self.nearest(sql, self.request.candidate_counts["window_vectors"])

    def nearest(self, sql: str, count: int) -> list[Candidate]:
        """An HNSW scan of `count` rows: ef_search must be at least that for the index to return them."""
        ef_search = max(count, self.current_ef_search())
        with scoped_settings(self.plpy, self.state, {"hnsw.ef_search": str(ef_search)}):
            return self.candidates(sql, ["public.vector", "int"], [self.request.vector, count])

    def current_ef_search(self) -> int:
        return int(self.execute("select pg_catalog.current_setting('hnsw.ef_search') as value", [], [])[0]["value"])


class ScoredList(Sequence[Candidate]):
    """A list ordered by a score first (matched terms, summed weights), then by distance (degraded:
    by record id), whose records and scores come whole but whose distances are fetched one score
    level at a time, as the merge reaches them. Scoring a broad match is one aggregate; a distance
    is an index probe per record, and most of a broad match sits in low levels no page reaches.
    `record_ids` and `scores` are sorted by score, highest first."""

    def __init__(self, lookups: Lookups, record_ids: list[int], scores: list[float]) -> None:
        self.lookups = lookups
        self.record_ids = record_ids
        self.levels = [round(score, 9) for score in scores]  # score_level, inlined: lists run long
        self.loaded: list[Candidate] = []

    def __len__(self) -> int:
        return len(self.record_ids)

    def __getitem__(self, index: int) -> Candidate:  # type: ignore[override]  # no slices
        if not 0 <= index < len(self.record_ids):
            raise IndexError(index)
        if index >= len(self.loaded):
            self.load(max(index + 1, self.lookups.reach) if LAZY_DISTANCES else len(self.record_ids))
        return self.loaded[index]

    def load(self, count: int) -> None:
        """Extend what is loaded by whole score levels to at least `count` records."""
        start, end = len(self.loaded), self.level_end(min(count, len(self.record_ids)) - 1)
        self.loaded += self.lookups.with_distances(self.record_ids[start:end], self.levels[start:end])

    def read_through(self, record_ids: Iterable[int]) -> None:
        """Load the levels of these records, where the list holds them."""
        wanted = set(record_ids)
        last = max((n for n, record_id in enumerate(self.record_ids) if record_id in wanted), default=-1)
        if last >= len(self.loaded):
            self.load(last + 1)

    def level_end(self, start: int) -> int:
        """Where the score level of the record at `start` ends."""
        return bisect.bisect_right(self.levels, -self.levels[start], lo=start, key=operator.neg)


class BroadList:
    """The candidates of a broad match (a common tag or term), in the list's order, fetched as
    the merge reaches them; its size is counted, not read.

    With a vector, the matching records nearest the question come from an iterative HNSW scan
    filtered by the match (what a page needs, not every matching row). If the scan stops short
    (it ran out, or hit hnsw.max_scan_tuples), the list falls back to the exact order, which also
    brings the matching records without a vector. Degraded lists are ordered exactly unless a
    subclass can read them in order from an index.

    A match is a SQL predicate over a record id, with its values quoted into the text, so that
    several broad lists combine in one statement (their totals, their members).
    """

    def __init__(self, lookups: Lookups) -> None:
        self.lookups = lookups
        self.loaded: list[Candidate] = []
        self.complete = False

    def predicate(self, record_id: str) -> str:
        raise NotImplementedError

    def candidate_ids_sql(self) -> str:
        """A query of the candidate record ids, less those of known_ids."""
        raise NotImplementedError

    def known_ids(self) -> Sequence[int]:
        """Candidate record ids already at hand, which candidate_ids_sql need not find again."""
        return ()

    def size(self) -> int:
        raise NotImplementedError

    def exact(self) -> list[Candidate]:
        raise NotImplementedError

    def in_order_degraded(self, limit: int) -> list[Candidate] | None:
        """The first `limit` candidates of the degraded order read from an index, or None."""
        return None

    def __getitem__(self, index: int) -> Candidate:
        while index >= len(self.loaded) and not self.complete:
            self.fetch(max(2 * len(self.loaded), index + 1, self.lookups.reach))
        return self.loaded[index]

    def fetch(self, limit: int) -> None:
        rows = self.in_order_degraded(limit) if self.lookups.request.degraded else self.nearest_matching(limit)
        if rows is None or (not self.lookups.request.degraded and len(rows) < limit):
            self.loaded, self.complete = self.exact(), True
        else:
            self.loaded, self.complete = rows, len(rows) < limit

    def nearest_matching(self, limit: int) -> list[Candidate]:
        lookups = self.lookups
        sql = f"""
            select rv.record_id, {lookups.vector_distance_sql("rv.embedding")} as distance
            from emem.record_vectors as rv
            where rv.space_id = {lookups.request.space.space_id:d} and {self.predicate("rv.record_id")}
            order by distance limit $2"""
        settings = {"hnsw.iterative_scan": "strict_order", "hnsw.ef_search": str(FILTERED_SCAN_EF_SEARCH)}
        with scoped_settings(lookups.plpy, lookups.state, settings):
            return lookups.candidates(sql, ["public.vector", "int"], [lookups.request.vector, limit], cache=False)

    def members(self, record_ids: Iterable[int]) -> set[int]:
        """Which of these records the match holds (probed, not fetched)."""
        rows = self.lookups.execute(
            f"select id from pg_catalog.unnest($1::bigint[]) as id where {self.predicate('id')}",
            ["bigint[]"],
            [list(record_ids)],
            cache=False,
        )
        return {row["id"] for row in rows}


class BroadTagList(BroadList):
    """A broad tag match, by distance. Degraded with one tag and no edges, every candidate matched
    the same terms, so the list is the tag's records by id, read from its index."""

    def __init__(self, lookups: Lookups, match: TagMatch) -> None:
        super().__init__(lookups)
        self.match = match
        self.terms = list(lookups.request.analysis.terms)

    def predicate(self, record_id: str) -> str:
        return f"({self.holds_tag(record_id, self.match.tags)} or {self.ends_edge(record_id)})"

    def narrow_predicate(self, record_id: str) -> str:
        """Holds a tag that is not broad, or ends an edge: what a tiered list reads whole."""
        narrow = self.match.narrow_tags(self.lookups.exact_limit)
        return (
            f"({self.holds_tag(record_id, narrow)} or {self.ends_edge(record_id)})"
            if narrow
            else self.ends_edge(record_id)
        )

    def holds_tag(self, record_id: str, tags: list[str]) -> str:
        return (
            f"exists (select from emem.record_tags as rt where rt.record_id = {record_id}"
            f" and rt.tag operator(pg_catalog.=) any ({quoted_array(self.lookups.plpy, tags, 'text')}))"
        )

    def ends_edge(self, record_id: str) -> str:
        """An edge the question's terms name ends at the record. Predicates test a few records (a page,
        what a filtered scan visits): many matched edges are probed through the edges' indexes rather
        than gathered whole for each statement."""
        if not self.match.edge_endpoints:
            return "false"
        if len(self.match.edge_endpoints) <= EXACT_CANDIDATES:
            return f"{record_id} in ({self.edge_endpoints_sql()})"
        terms = quoted_array(self.lookups.plpy, self.terms, "text")
        return (
            f"exists (select from emem.edges as e join emem.edge_labels as el on el.edge_id = e.edge_id"
            f" where (e.from_record_id = {record_id} or e.to_record_id = {record_id})"
            f" and el.label_terms operator(pg_catalog.&&) {terms}"
            f" and el.label_terms operator(pg_catalog.<@) {terms})"
        )

    def edge_endpoints_sql(self) -> str:
        terms = quoted_array(self.lookups.plpy, self.terms, "text")
        return (
            "select ends.endpoint from emem.edge_labels as el"
            " join emem.edges as e on e.edge_id = el.edge_id"
            " cross join lateral (values (e.from_record_id), (e.to_record_id)) as ends (endpoint)"
            f" where el.label_terms operator(pg_catalog.&&) {terms}"
            f" and el.label_terms operator(pg_catalog.<@) {terms}"
        )

    def candidate_ids_sql(self) -> str:
        tags = quoted_array(self.lookups.plpy, self.match.tags, "text")
        return f"select rt.record_id from emem.record_tags as rt where rt.tag operator(pg_catalog.=) any ({tags})"

    def known_ids(self) -> Sequence[int]:
        return self.match.edge_endpoints

    def size(self) -> int:
        """The largest tag's count, plus what the other tags and the edges add."""
        largest, *others = self.match.tags
        row = self.lookups.execute(
            """select pg_catalog.count(distinct o.record_id) as added
               from (select rt.record_id from emem.record_tags as rt where rt.tag operator(pg_catalog.=) any ($2)
                     union all
                     select pg_catalog.unnest($3::bigint[])) as o
               where not exists (select from emem.record_tags as l
                                 where l.record_id = o.record_id and l.tag operator(pg_catalog.=) $1)""",
            ["text", "text[]", "bigint[]"],
            [largest, others, self.match.edge_endpoints],
        )[0]
        return self.match.counts[0] + row["added"]

    def exact(self) -> list[Candidate]:
        return self.lookups.exact_tags(self.match.tags, self.terms, by_terms=False)

    def in_order_degraded(self, limit: int) -> list[Candidate] | None:
        if len(self.match.tags) > 1 or self.match.edge_endpoints:
            return None
        return self.lookups.candidates(
            """select rt.record_id, null::float8 as distance from emem.record_tags as rt
               where rt.tag operator(pg_catalog.=) $1 order by rt.record_id limit $2""",
            ["text", "int"],
            [self.match.tags[0], limit],
        )


class BroadFulltextList(BroadList):
    """A full-text match of many records (a common term), by distance; also the whole match of a
    tiered full-text list (its size, members and totals)."""

    def __init__(self, lookups: Lookups, any_term: str, exact: Callable[[], list[Candidate]]) -> None:
        super().__init__(lookups)
        self.any_term = quoted_tsquery(lookups.plpy, any_term)
        self._exact = exact

    def predicate(self, record_id: str) -> str:
        return text_matches(record_id, self.any_term)

    def candidate_ids_sql(self) -> str:
        return (
            f"select r.record_id from emem.records as r where r.content_search operator(pg_catalog.@@) {self.any_term}"
        )

    def size(self) -> int:
        return self.lookups.execute(
            f"select pg_catalog.count(*) as n from ({self.candidate_ids_sql()}) as c", [], [], cache=False
        )[0]["n"]

    def exact(self) -> list[Candidate]:
        return self._exact()


class TieredList(BroadList):
    """A list ordered by a score first (matched terms, summed IDF), then by distance (degraded: by
    record id), whose broad tags or terms are not read whole.

    The records holding a narrow tag or term (or an edge) come fetched with their scores. A record
    holding only broad ones scores what its combination of them gives, so each combination is a
    Tier, read like a broad list as far as the merge reaches. The list walks the scores from the
    highest, merging the fetched records and the tiers of each score by distance. Its size, members
    and totals are those of the whole match.
    """

    def __init__(
        self,
        whole: BroadList,
        scored: ScoredList,
        broad: list[Part],
        score: Callable[[tuple[Part, ...]], float],
        narrow: Callable[[str], str],
    ) -> None:
        super().__init__(whole.lookups)
        self.whole = whole
        tiers = [
            (score_level(score(parts)), Tier(whole.lookups, parts, broad, narrow))
            for count in range(1, len(broad) + 1)
            for parts in itertools.combinations(broad, count)
        ]
        self.stream = self.in_order(scored, tiers)

    @staticmethod
    def in_order(scored: ScoredList, tiers: list[tuple[float, "Tier"]]) -> Iterator[Candidate]:
        position = 0
        for level in sorted(set(scored.levels) | {level for level, _ in tiers}, reverse=True):
            at_level = position < len(scored) and scored.levels[position] == level
            end = scored.level_end(position) if at_level else position
            yield from heapq.merge(
                (scored[n] for n in range(position, end)),
                *(walk(tier) for tier_level, tier in tiers if tier_level == level),
                key=distance_order,
            )
            position = end

    def __getitem__(self, index: int) -> Candidate:
        while index >= len(self.loaded) and not self.complete:
            candidate = next(self.stream, None)
            if candidate is None:
                self.complete = True
            else:
                self.loaded.append(candidate)
        return self.loaded[index]

    def predicate(self, record_id: str) -> str:
        return self.whole.predicate(record_id)

    def candidate_ids_sql(self) -> str:
        return self.whole.candidate_ids_sql()

    def known_ids(self) -> Sequence[int]:
        return self.whole.known_ids()

    def size(self) -> int:
        return self.whole.size()


class Tier(BroadList):
    """The records holding these broad parts, none of the other broad ones and nothing narrow."""

    def __init__(
        self, lookups: Lookups, parts: tuple[Part, ...], broad: list[Part], narrow: Callable[[str], str]
    ) -> None:
        super().__init__(lookups)
        self.parts = parts
        self.others = [part for part in broad if part not in parts]
        self.narrow = narrow
        self.source = min(parts, key=lambda part: part.size)  # the records to walk when it is read whole

    def predicate(self, record_id: str) -> str:
        return self.holds_also(record_id, self.parts)

    def holds_also(self, record_id: str, parts: Iterable[Part]) -> str:
        """Holds these parts, none of the other broad ones and nothing narrow."""
        held = "".join(f"({part.holds(record_id)}) and " for part in parts)
        not_held = "".join(f"not ({part.holds(record_id)}) and " for part in self.others)
        return f"({held}{not_held}not ({self.narrow(record_id)}))"

    def source_filter(self) -> str:
        """What a record of the source part must also hold (it holds the source)."""
        return self.holds_also("found.record_id", [part for part in self.parts if part is not self.source])

    def exact(self) -> list[Candidate]:
        lookups = self.lookups
        return lookups.candidates(  # distance_sql takes the vector as $2; $1 is unused
            f"""select found.record_id, {lookups.distance_sql()} as distance
                from ({self.source.ids_sql}) as found (record_id) where {self.source_filter()}
                order by distance nulls last, found.record_id""",
            ["text", "public.vector"],
            [None, lookups.request.vector],
            cache=False,
        )

    def in_order_degraded(self, limit: int) -> list[Candidate]:
        return self.lookups.candidates(
            f"""select found.record_id, null::float8 as distance
                from ({self.source.ids_sql}) as found (record_id) where {self.source_filter()}
                order by found.record_id limit {limit:d}""",
            [],
            [],
            cache=False,
        )


def walk(candidates: Sequence[Candidate]) -> Iterator[Candidate]:
    """A list's candidates in order, read as far as they are asked for."""
    for index in itertools.count():
        try:
            yield candidates[index]
        except IndexError:
            return


def distance_order(candidate: Candidate) -> tuple:
    """Nearest first, records without a distance last, ties by record id."""
    return (candidate.distance is None, candidate.distance or 0.0, candidate.record_id)


def score_level(score: float | None) -> float:
    """Scores that differ only by rounding (sums in another order) are one level."""
    return round(float(score or 0.0), 9)


def any_of(queries: list[str]) -> str:
    """The text of the OR of tsqueries given as text."""
    return " | ".join(f"({query})" for query in queries)


def quoted_tsquery(plpy: Any, query: str) -> str:
    return plpy.quote_literal(query) + "::pg_catalog.tsquery"


def text_matches(record_id: str, tsquery: str) -> str:
    """The record's text matches a tsquery (quoted SQL)."""
    return (
        f"exists (select from emem.records as r where r.record_id = {record_id}"
        f" and r.content_search operator(pg_catalog.@@) {tsquery})"
    )


def quoted_array(plpy: Any, values: list[str], element_type: str) -> str:
    """An array literal of quoted values, for SQL text that combines several matches."""
    return f"array[{', '.join(plpy.quote_literal(v) for v in values)}]::{element_type}[]"


def inverse_document_frequency(records: float, df: float) -> float:
    """BM25's IDF, ln(1 + (N - df + 0.5) / (df + 0.5))."""
    return math.log(1 + (records - df + 0.5) / (df + 0.5))


def single_lexeme(query: str) -> str | None:
    """The lexeme of a tsquery's text that is one lexeme (`'word'`), else None."""
    found = re.fullmatch(r"'((?:[^']|'')*)'", query)
    return found.group(1).replace("''", "'") if found else None


def finite_or_none(distance: float | None) -> float | None:
    """A distance that is not a number (a vector written around the API overflowed) counts as none."""
    return distance if distance is not None and math.isfinite(distance) else None


def record_ids(candidates: Sequence[Candidate]) -> Iterable[int]:
    """The records of a list that is not broad, without fetching a scored list's distances."""
    return candidates.record_ids if isinstance(candidates, ScoredList) else (c.record_id for c in candidates)


def members(candidates: Sequence[Candidate], ids: Iterable[int]) -> set[int]:
    """Which of these records a list holds."""
    if isinstance(candidates, BroadList):
        return candidates.members(ids)
    return set(ids).intersection(record_ids(candidates))  # a page's few ids against a long list


def positions(candidates: Sequence[Candidate], wanted: Iterable[int]) -> dict[int, int]:
    """Each record's rank (from 1) in a list, as far as the list was read; a scored list first
    reads the score levels of the `wanted` records it holds (their distances decide their ranks)."""
    read = candidates.loaded if isinstance(candidates, BroadList) else candidates
    if isinstance(read, ScoredList):
        read.read_through(wanted)
        read = read.loaded
    return {c.record_id: rank for rank, c in enumerate(read, start=1)}


def total_candidates(lists: dict[str, Sequence[Candidate]]) -> int:
    """How many distinct records the lists hold together; broad lists are counted, not read. One
    broad list is counted by its size and what the fetched lists add to it; several by one union
    of their records (a union hashes each record once, where probing one match for every record
    of another costs several times more)."""
    broad = [c for c in lists.values() if isinstance(c, BroadList)]
    fetched = {
        record_id
        for candidates in lists.values()
        if not isinstance(candidates, BroadList)
        for record_id in record_ids(candidates)
    }
    if not broad:
        return len(fetched)
    lookups = broad[0].lookups
    if len(broad) > 1:
        fetched.update(record_id for b in broad for record_id in b.known_ids())
        union = " union ".join(f"({b.candidate_ids_sql()})" for b in broad)
        return lookups.execute(
            f"select pg_catalog.count(*) as n from ({union} union select pg_catalog.unnest($1::bigint[])) as c",
            ["bigint[]"],
            [list(fetched)],
            cache=False,
        )[0]["n"]
    held = broad[0].predicate("id")
    return (
        broad[0].size()
        + lookups.execute(
            f"select pg_catalog.count(*) as n from pg_catalog.unnest($1::bigint[]) as id where not ({held})",
            ["bigint[]"],
            [list(fetched)],
            cache=False,
        )[0]["n"]
    )
