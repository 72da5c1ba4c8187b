"""The floor and the classic two-way hybrid: bare SQL on the same tables as e_gather_find.

The floor is each of the four lookups alone, as a bare, correct, indexed query that fetches
what page 1 needs: the `page_size` best rows of its list (a record vector or window list
with fewer rows than asked, as an HNSW scan can return, is not correct and is reported).
The tag lookup has two correct formulations, and the faster one is the floor:
- `tags_exact`: every record the question's terms tag (GIN on tag_terms / label_terms), its
  distance from the primary key of record_vectors, sorted;
- `tags_hnsw`: the space's HNSW index scanned in distance order with pgvector's iterative scan,
  keeping records the terms tag (cheap when the tag is broad, useless when it is rare).
The totals e_gather_find reports (total_candidates) need the size of each exact list and the
whole candidate lists of the vector lookups (emem's defaults: 100 nearest records, 20 nearest
windows with their records; page 1 needs fewer): the `*_count` queries measure what counting and
fetching those cost on their own.

The classic hybrid is the Supabase recipe (full text + pgvector fused by reciprocal rank
fusion, each side limited to 2 x match_count), created in the benchmark's schema `bench`, on
emem's tables: full text on records.content_search (configuration emem.exact), vectors from
record_vectors of the space. The recipe's websearch_to_tsquery ANDs every word, and emem.exact
keeps stop words, so a natural question would match nothing: it is given the question's words
(WordNet lemmas and full-text terms) joined by `or`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import psycopg
from db import one_row
from psycopg import sql
from questions import Question

ITERATIVE_SCAN = "strict_order"
# fulltext_words leaves out a word on more than this share of the records (and this many of them,
# or on the cap), as plpython/emem_db/lookups.py does.
COMMON_WORD_SHARE, COMMON_WORD_FLOOR, DOCUMENT_FREQUENCY_CAP = 0.05, 1_000, 20_000
# emem.record_vector_candidates and emem.window_vector_candidates as control/emem.conf sets them.
RECORD_VECTOR_CANDIDATES = 100
WINDOW_VECTOR_CANDIDATES = 20


@dataclass(frozen=True)
class Bare:
    name: str
    query: sql.SQL | sql.Composed
    params: dict[str, Any]


MATCHES_TERMS = "{column} && %(terms)s::text[] and {column} <@ %(terms)s::text[]"
# Endpoints of the edges whose labels the question's terms match, with the label's terms: from
# every label row (before 0.3.0), or, where each end has its rows and the labels a vocabulary
# with a GIN index (0.3.0), through that vocabulary (a scan of every label row took 48 ms once a
# lane's 100,000 edges were in, against 2).
EDGE_ROWS = f"""
        select ends.endpoint, el.label_terms from emem.edge_labels as el
        join emem.edges as e on e.edge_id = el.edge_id
        cross join lateral (values (e.from_record_id), (e.to_record_id)) as ends (endpoint)
        where {MATCHES_TERMS.format(column="el.label_terms")}"""
EDGE_ROWS_BY_VOCABULARY = f"""
        select el.record_id as endpoint, el.label_terms
        from (select distinct v.label from emem.edge_label_vocabulary as v
              where {MATCHES_TERMS.format(column="v.label_terms")}) as v
        join emem.edge_labels as el on el.label = v.label"""


@dataclass(frozen=True)
class TagSchema:
    """How tags are matched in the installed emem: terms stored on each record_tags row (0.1.0
    as first released), once per tag in emem.tag_vocabulary (0.1.1), or once per lane and tag,
    record_tags carrying the lane (0.2.0)."""

    tagged_rows: str  # (record_id, terms) of the records the question's terms tag
    tagged_exists: str  # whether record {alias}.record_id is one of them
    has_vocabulary: bool = False
    edge_rows: str = EDGE_ROWS  # (endpoint, terms) of the edges the question's terms label

    @classmethod
    def detect(cls, conn: psycopg.Connection) -> TagSchema:
        found = cls.detect_tags(conn)
        per_end = """select exists (select from pg_attribute where attrelid = to_regclass('emem.edge_labels')
                                    and attname = 'far_record_id' and not attisdropped)"""
        if one_row(conn.execute(per_end))[0]:
            return dataclasses.replace(found, edge_rows=EDGE_ROWS_BY_VOCABULARY)
        return found

    @classmethod
    def detect_tags(cls, conn: psycopg.Connection) -> TagSchema:
        per_lane = one_row(
            conn.execute(
                """select exists (select from pg_attribute where attrelid = to_regclass('emem.tag_vocabulary')
                                  and attname = 'lane_name' and not attisdropped)"""
            )
        )[0]
        if per_lane or one_row(conn.execute("select to_regclass('emem.tag_vocabulary') is not null"))[0]:
            same_row = " and rt.lane_name = v.lane_name" if per_lane else ""
            return cls(
                f"""select rt.record_id, v.tag_terms from emem.tag_vocabulary as v
                    join emem.record_tags as rt on rt.tag = v.tag{same_row}
                    where {MATCHES_TERMS.format(column="v.tag_terms")}""",
                f"""exists (select from emem.record_tags as rt where rt.record_id = {{alias}}.record_id
                            and rt.tag = any (array(select distinct v.tag from emem.tag_vocabulary as v
                                                    where {MATCHES_TERMS.format(column="v.tag_terms")})))""",
                True,
            )
        return cls(
            f"""select rt.record_id, rt.tag_terms from emem.record_tags as rt
                where {MATCHES_TERMS.format(column="rt.tag_terms")}""",
            f"""exists (select from emem.record_tags as rt where rt.record_id = {{alias}}.record_id
                        and {MATCHES_TERMS.format(column="rt.tag_terms")})""",
        )

    @property
    def matches(self) -> str:
        """Records tagged by the question's terms, or endpoints of an edge labelled by them."""
        return (
            f"select record_id from ({self.tagged_rows}) as tagged"
            f" union select endpoint from ({self.edge_rows}) as ends"
        )


def any_term(terms: tuple[str, ...]) -> sql.Composed:
    """The OR of full-text terms, each a phrase of the emem.exact configuration."""
    return sql.SQL(" || ").join(
        sql.SQL("phraseto_tsquery('emem.exact', {})").format(sql.Literal(term)) for term in terms
    )


def matched_term_count(question: Question) -> sql.Composed:
    return sql.SQL(" + ").join(
        sql.SQL("(r.content_search @@ phraseto_tsquery('emem.exact', {}))::int").format(sql.Literal(term))
        for term in question.fulltext_terms
    )


def distance(dimension: int, alias: str = "rv") -> str:
    return f"{alias}.embedding::vector({dimension}) <=> %(vector)s::vector({dimension})"


@dataclass(frozen=True)
class WeightedTerms:
    """Full-text terms with their BM25 IDF, as the opt-in components weight them (counted exactly
    here, outside the timing: what emem reads from the column's statistics)."""

    terms: tuple[str, ...]
    weights: tuple[float, ...]

    @classmethod
    def of(cls, conn: psycopg.Connection, terms: tuple[str, ...], leave_out_common: bool) -> WeightedTerms:
        records = float(one_row(conn.execute("select reltuples from pg_class where oid = 'emem.records'::regclass"))[0])
        common = min(DOCUMENT_FREQUENCY_CAP, max(COMMON_WORD_FLOOR, COMMON_WORD_SHARE * records))
        kept = []
        for term in dict.fromkeys(terms):
            df = one_row(
                conn.execute(
                    f"""select count(*) from (select from emem.records as r
                                      where r.content_search @@ phraseto_tsquery('emem.exact', %s)
                                      limit {DOCUMENT_FREQUENCY_CAP}) as matching""",
                    (term,),
                )
            )[0]
            if df > 0 and not (leave_out_common and df >= common):
                kept.append((term, math.log(1 + (records - df + 0.5) / (df + 0.5))))
        return cls(tuple(t for t, _ in kept), tuple(w for _, w in kept))

    @property
    def score(self) -> sql.Composed:
        return sql.SQL(" + ").join(
            sql.SQL("{} * (r.content_search @@ phraseto_tsquery('emem.exact', {}))::int").format(
                sql.Literal(w), sql.Literal(t)
            )
            for t, w in zip(self.terms, self.weights, strict=True)
        )


# A list ordered by a score, then distance: the records of the best scores down to the page's last
# one (`cut`) are the only ones whose distance decides page 1.
SCORED_PAGE = """
            with scored as materialized ({scored}),
            cut as (select score from scored order by score desc offset %(k)s - 1 limit 1)
            select s.record_id, s.score, {distance} as distance
            from scored as s
            left join emem.record_vectors as rv on rv.space_id = {space} and rv.record_id = s.record_id
            where s.score >= coalesce((select score from cut), 0)
            order by s.score desc, distance nulls last, s.record_id limit %(k)s"""


class Floor:
    """The bare queries for one question, with or without its vector."""

    def __init__(self, schema: TagSchema, space: int, dimension: int, page_size: int) -> None:
        self.schema = schema
        self.space = space
        self.dimension = dimension
        self.k = page_size

    def queries(self, question: Question, with_vector: bool) -> list[Bare]:
        params = {"terms": list(question.terms), "vector": question.vector if with_vector else None, "k": self.k}
        bare = [self.tags_count(params)]
        if with_vector:
            bare += [
                self.tags_exact(params),
                self.tags_hnsw(params),
                self.record_vectors(params),
                self.window_vectors(params),
            ]
        else:
            bare.append(self.tags_degraded(params))
            if len(question.terms) == 1 and self.schema.has_vocabulary:
                bare.append(self.tags_by_id(params))
        if with_vector:
            bare.append(
                Bare(
                    "vectors_count",
                    sql.SQL(
                        f"select bench.vector_candidates(%(vector)s::vector, {RECORD_VECTOR_CANDIDATES}, "
                        f"{WINDOW_VECTOR_CANDIDATES})"
                    ),
                    params,
                )
            )
        if question.fulltext_terms:
            bare += [
                self.fulltext_count(question, params),
                *(self.fulltext(question, params) if with_vector else [self.fulltext_degraded(question, params)]),
            ]
        return bare

    def exact_first_queries(
        self, question: Question, with_vector: bool, rare: WeightedTerms, words: WeightedTerms
    ) -> list[Bare]:
        """The opt-in components' lists for page 1 (xf_*), where they differ from the default
        profile's: tags by matched terms then distance (degraded or with one term, its tag list is
        already in that order), full text by summed IDF then distance, and counting the content
        words' matches, which the totals add."""
        params = {"terms": list(question.terms), "vector": question.vector if with_vector else None, "k": self.k}
        bare = []
        if with_vector and len(question.terms) > 1:  # one term: every candidate scores 1, the default order
            rows = f"{self.schema.tagged_rows} union all {self.schema.edge_rows}"
            scored = f"""with matched (record_id, terms) as ({rows})
                         select m.record_id, count(distinct t) as score
                         from matched as m cross join lateral unnest(m.terms) as t group by m.record_id"""
            bare.append(
                Bare(
                    "xf_tags",
                    sql.SQL(SCORED_PAGE.format(scored=scored, distance=distance(self.dimension), space=self.space)),
                    params,
                )
            )
        for name, weighted in (("xf_fulltext_by_rarity", rare), ("xf_fulltext_words", words)):
            if weighted.terms:
                bare.append(Bare(name, self.scored_fulltext(weighted, with_vector), params))
        if words.terms:
            bare.append(
                Bare(
                    "xf_words_count",
                    sql.SQL("select count(*) from emem.records as r where r.content_search @@ ({})").format(
                        any_term(words.terms)
                    ),
                    params,
                )
            )
        return bare

    def scored_fulltext(self, weighted: WeightedTerms, with_vector: bool) -> sql.Composed:
        scored = "select r.record_id, {score} as score from emem.records as r where r.content_search @@ ({any_term})"
        if with_vector:
            query = SCORED_PAGE.format(scored=scored, distance=distance(self.dimension), space=self.space)
        else:
            query = f"{scored} order by score desc, r.record_id limit %(k)s"
        return sql.SQL(query).format(score=weighted.score, any_term=any_term(weighted.terms))

    def tags_exact(self, params: dict[str, Any]) -> Bare:
        query = f"""
            with matched as ({self.schema.matches})
            select m.record_id, {distance(self.dimension)} as distance
            from matched as m
            left join emem.record_vectors as rv on rv.space_id = {self.space} and rv.record_id = m.record_id
            order by distance nulls last, m.record_id limit %(k)s"""
        return Bare("tags_exact", sql.SQL(query), params)

    def tags_hnsw(self, params: dict[str, Any]) -> Bare:
        query = f"""
            select rv.record_id, {distance(self.dimension)} as distance
            from emem.record_vectors as rv
            where rv.space_id = {self.space}
              and ({self.schema.tagged_exists.format(alias="rv")}
                   or exists (select from emem.edge_labels as el join emem.edges as e on e.edge_id = el.edge_id
                              where rv.record_id in (e.from_record_id, e.to_record_id)
                                and el.label_terms && %(terms)s::text[] and el.label_terms <@ %(terms)s::text[]))
            order by distance limit %(k)s"""
        return Bare("tags_hnsw", sql.SQL(query), params)

    def tags_degraded(self, params: dict[str, Any]) -> Bare:
        query = f"""
            with matched (record_id, terms) as ({self.schema.tagged_rows} union all {self.schema.edge_rows})
            select m.record_id, count(distinct t) as matched_terms
            from matched as m cross join lateral unnest(m.terms) as t
            group by m.record_id order by matched_terms desc, m.record_id limit %(k)s"""
        return Bare("tags", sql.SQL(query), params)

    def tags_by_id(self, params: dict[str, Any]) -> Bare:
        """Degraded, one term: every candidate matches that one term, so the list is in record id
        order; each matching tag's first rows come from its (tag, record_id) index."""
        query = f"""
            with tags as (select v.tag from emem.tag_vocabulary as v
                          where {MATCHES_TERMS.format(column="v.tag_terms")})
            select record_id from (
                select first.record_id from tags cross join lateral (
                    select rt.record_id from emem.record_tags as rt where rt.tag = tags.tag
                    order by rt.record_id limit %(k)s) as first
                union
                select endpoint from ({self.schema.edge_rows}) as ends) as matched
            order by record_id limit %(k)s"""
        return Bare("tags_by_id", sql.SQL(query), params)

    def tags_count(self, params: dict[str, Any]) -> Bare:
        query = f"select count(*) from ({self.schema.matches}) as matched"
        return Bare("tags_count", sql.SQL(query), params)

    def fulltext(self, question: Question, params: dict[str, Any]) -> list[Bare]:
        """Two correct formulations, the faster counts: every match sorted by distance, and (for a
        broad match) the HNSW index scanned in distance order keeping matching records."""
        exact = sql.SQL(f"""
            select r.record_id, {distance(self.dimension)} as distance
            from emem.records as r
            left join emem.record_vectors as rv on rv.space_id = {self.space} and rv.record_id = r.record_id
            where r.content_search @@ ({{any_term}})
            order by distance nulls last, r.record_id limit %(k)s""").format(any_term=any_term(question.fulltext_terms))
        hnsw = sql.SQL(f"""
            select rv.record_id, {distance(self.dimension)} as distance
            from emem.record_vectors as rv
            where rv.space_id = {self.space}
              and exists (select from emem.records as r where r.record_id = rv.record_id
                          and r.content_search @@ ({{any_term}}))
            order by distance limit %(k)s""").format(any_term=any_term(question.fulltext_terms))
        return [Bare("fulltext_exact", exact, params), Bare("fulltext_hnsw", hnsw, params)]

    def fulltext_degraded(self, question: Question, params: dict[str, Any]) -> Bare:
        query = sql.SQL("""
            select r.record_id, {matched} as matched_terms, ts_rank(r.content_search, {any_term}) as rank
            from emem.records as r
            where r.content_search @@ ({any_term})
            order by matched_terms desc, rank desc, r.record_id limit %(k)s""").format(
            matched=matched_term_count(question), any_term=any_term(question.fulltext_terms)
        )
        return Bare("fulltext", query, params)

    def fulltext_count(self, question: Question, params: dict[str, Any]) -> Bare:
        query = sql.SQL("select count(*) from emem.records as r where r.content_search @@ ({any_term})").format(
            any_term=any_term(question.fulltext_terms)
        )
        return Bare("fulltext_count", query, params)

    def record_vectors(self, params: dict[str, Any]) -> Bare:
        query = f"""
            select record_id, {distance(self.dimension, "record_vectors")} as distance
            from emem.record_vectors where space_id = {self.space}
            order by distance limit %(k)s"""
        return Bare("record_vectors", sql.SQL(query), params)

    def window_vectors(self, params: dict[str, Any]) -> Bare:
        """The nearest windows, enough of them to give page_size records (3 records per window)."""
        query = f"""
            with nearest as (
                select window_id, {distance(self.dimension, "windows")} as distance
                from emem.windows where space_id = {self.space}
                order by distance limit %(k)s / 3)
            select m.record_id, min(n.distance) as distance
            from nearest as n join emem.window_members as m on m.window_id = n.window_id
            group by m.record_id order by distance, m.record_id"""
        return Bare("window_vectors", sql.SQL(query), params)


# The semantic side of the recipe as published: row_number() over the distance, then
# `order by rank_ix limit`. PostgreSQL does not see that rank_ix follows the distance, so it
# sorts every vector of the space (no HNSW).
RECIPE_SEMANTIC = """
            select rv.record_id,
                   row_number() over (order by rv.embedding::vector({dimension}) <=> query_embedding) as rank_ix
            from emem.record_vectors as rv
            where rv.space_id = {space} and query_embedding is not null
            order by rank_ix
            limit least(match_count, 30) * 2"""
# The same, written so that the space's HNSW index serves it: nearest first, then numbered.
INDEXED_SEMANTIC = """
            select nearest.record_id, row_number() over (order by nearest.distance) as rank_ix
            from (select rv.record_id, rv.embedding::vector({dimension}) <=> query_embedding as distance
                  from emem.record_vectors as rv
                  where rv.space_id = {space} and query_embedding is not null
                  order by distance
                  limit least(match_count, 30) * 2) as nearest"""
HYBRIDS = {"hybrid_recipe": RECIPE_SEMANTIC, "hybrid": INDEXED_SEMANTIC}


def create_hybrids(conn: psycopg.Connection, space: int, dimension: int) -> None:
    """The Supabase-style hybrid search on emem's tables, in the benchmark's schema: as published
    (bench.hybrid_recipe) and with its vector side served by HNSW (bench.hybrid); and the vector
    candidates the floor's exact totals need (bench.vector_candidates)."""
    conn.execute(f"""
        create or replace function bench.vector_candidates(question vector, record_count integer, window_count integer)
        returns bigint language plpgsql stable  -- plpgsql keeps its plan; a SQL function plans every call
        set hnsw.ef_search = {max(RECORD_VECTOR_CANDIDATES, WINDOW_VECTOR_CANDIDATES)}
        as $$ begin return (
        select count(*) from (
            (select record_id from emem.record_vectors where space_id = {space}
             order by embedding::vector({dimension}) <=> question::vector({dimension}) limit record_count)
            union
            select m.record_id from (select window_id from emem.windows where space_id = {space}
                                     order by embedding::vector({dimension}) <=> question::vector({dimension})
                                     limit window_count) as w
            join emem.window_members as m on m.window_id = w.window_id) as candidates);
        end $$""")
    for name, semantic in HYBRIDS.items():
        conn.execute(f"""
            create or replace function bench.{name}(
                query_text text, query_embedding vector({dimension}), match_count integer,
                full_text_weight double precision default 1, semantic_weight double precision default 1,
                rrf_k integer default 50)
            returns table (record_id bigint, content text, score double precision)
            language sql stable
            as $$
            with full_text as (
                select r.record_id,
                       row_number() over (order by ts_rank_cd(r.content_search,
                                                              websearch_to_tsquery('emem.exact', query_text)) desc)
                           as rank_ix
                from emem.records as r
                where r.content_search @@ websearch_to_tsquery('emem.exact', query_text)
                order by rank_ix
                limit least(match_count, 30) * 2
            ),
            semantic as ({semantic.format(space=space, dimension=dimension)}
            )
            select r.record_id, r.content,
                   coalesce(1.0 / (rrf_k + full_text.rank_ix), 0.0) * full_text_weight
                   + coalesce(1.0 / (rrf_k + semantic.rank_ix), 0.0) * semantic_weight as score
            from full_text
            full outer join semantic on full_text.record_id = semantic.record_id
            join emem.records as r on r.record_id = coalesce(full_text.record_id, semantic.record_id)
            order by score desc
            limit least(match_count, 30)
            $$""")


def hybrid_queries(question: Question, with_vector: bool, page_size: int) -> list[Bare]:
    params = {"text": question.websearch_text, "vector": question.vector if with_vector else None, "k": page_size}
    return [
        Bare(
            name,
            sql.SQL("select * from bench.{}(%(text)s, %(vector)s::vector, %(k)s)").format(sql.Identifier(name)),
            params,
        )
        for name in HYBRIDS
    ]
