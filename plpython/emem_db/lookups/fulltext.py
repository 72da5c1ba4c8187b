"""Full text: question terms searched in the records' text (the `emem.exact` configuration keeps
codes and names whole). The seed's lookup searches the terms WordNet does not know; the opt-in
components order by the terms' rarity (BM25's IDF), and fulltext_words searches every content
word too."""

import math
import re
from dataclasses import dataclass

from emem_db import fragments
from emem_db.fragments import SCORED_ARRAYS, any_of, quoted_tsquery
from emem_db.lists.base import CandidateList, Match, Size, capped_count
from emem_db.lists.broad import BroadList
from emem_db.lists.fetched import FetchedList
from emem_db.lists.scored import ScoredList
from emem_db.lists.tiered import Narrow, Part, TieredList
from emem_db.reader import Reader


def fulltext(reader: Reader) -> CandidateList:
    """Seed: the terms WordNet does not know, by distance (degraded: by terms matched, then
    record id). A match of more than Reader.probed_limit records is read lazily."""
    queries = term_queries(reader, [[term] for term in reader.request.analysis.unknown_terms])
    terms = document_frequencies(reader, queries, cap=reader.probed_limit + 1)
    broad = is_broad(reader, queries, terms.sizes)
    if reader.degraded:
        if not broad:
            return fulltext_scored(reader, queries, [1.0] * len(queries))
        return scored_fulltext(reader, queries, terms.sizes, [1.0] * len(queries))
    if not broad:
        return fulltext_by_distance(reader, queries)
    return BroadList(reader, text_match(reader, any_of(queries), Size.of_union(terms.sizes)))


def fulltext_by_rarity(reader: Reader) -> CandidateList:
    """Opt-in: the same terms, by the rarity of those matched (summed IDF), then distance."""
    queries = term_queries(reader, [[term] for term in reader.request.analysis.unknown_terms])
    return fulltext_by_idf(reader, queries, document_frequencies(reader, queries))


def fulltext_words(reader: Reader) -> CandidateList:
    """Opt-in: every content word too (as typed or as its lemma), by summed IDF, then distance.
    A word on more than Tuning.common_word_share of the records (and common_word_floor of them,
    or on document_frequency_cap) says too little to bring candidates of its own and is left
    out, as a stop word is."""
    tuning = reader.tuning
    terms = [list(dict.fromkeys((typed, term))) for typed, term in reader.request.analysis.content_words]
    queries = term_queries(reader, terms)
    found = document_frequencies(reader, queries)
    common = min(tuning.document_frequency_cap, max(tuning.common_word_floor, tuning.common_word_share * found.records))
    telling = [n for n, df in enumerate(found.frequencies) if df < common]
    return fulltext_by_idf(
        reader,
        [queries[n] for n in telling],
        Frequencies(found.records, [found.sizes[n] for n in telling]),
    )


def text_match(reader: Reader, query: str, size: Size) -> Match:
    """The records whose text matches a tsquery given as text, of which `size` is known."""
    quoted, lanes = quoted_tsquery(reader.plpy, query), reader.lanes_sql
    ids_sql = fragments.text_matching(quoted, lanes)
    return Match(
        holds=lambda record_id: fragments.text_matches(record_id, quoted, lanes),
        ids_sql=ids_sql,
        count_sql=f"select pg_catalog.count(*) as n from ({ids_sql}) as c",
        count_up_to=capped_count(reader, ids_sql),
        size=size,
    )


def is_broad(reader: Reader, queries: list[str], sizes: list[Size]) -> bool:
    """Whether the terms together match more than probed_limit records: known from one term's
    frequency, or from their sum; else their OR is counted up to the limit."""
    limit = reader.probed_limit
    if any(frequency_of(size) > limit for size in sizes):
        return True
    uppers = [size.upper for size in sizes]
    if None not in uppers and sum(upper for upper in uppers if upper is not None) <= limit:
        return False
    quoted = quoted_tsquery(reader.plpy, any_of(queries))
    return capped_count(reader, fragments.text_matching(quoted, reader.lanes_sql))(limit + 1) > limit


def fulltext_by_idf(reader: Reader, queries: list[str], found: "Frequencies") -> CandidateList:
    """Records matching any of the queries, by the summed IDF of those matched, then distance."""
    weights = [inverse_document_frequency(found.records, df) for df in found.frequencies]
    return scored_fulltext(reader, queries, found.sizes, weights)


def scored_fulltext(reader: Reader, queries: list[str], sizes: list[Size], weights: list[float]) -> CandidateList:
    """Records matching any of the queries, by the summed weights of those matched, then
    distance. Terms on more than probed_limit records are read in tiers."""
    broad = [n for n, size in enumerate(sizes) if frequency_of(size) > reader.probed_limit]
    if not broad or len(broad) > reader.tuning.max_broad_parts:
        return fulltext_scored(reader, queries, weights)
    narrow = [query for n, query in enumerate(queries) if n not in broad]
    any_narrow = quoted_tsquery(reader.plpy, any_of(narrow))
    return TieredList(
        reader,
        text_match(reader, any_of(queries), Size.of_union(sizes)),
        fulltext_scored(reader, queries, weights, within=narrow),
        [term_part(reader, queries[n], sizes[n], weights[n]) for n in broad],
        lambda held: sum(part.score_key for part in held),
        Narrow(lambda record_id: fragments.text_matches(record_id, any_narrow, reader.lanes_sql), any_of(narrow))
        if narrow
        else None,
    )


def term_part(reader: Reader, query: str, size: Size, weight: float) -> Part:
    quoted, lanes = quoted_tsquery(reader.plpy, query), reader.lanes_sql
    return Part(
        lambda record_id: fragments.text_matches(record_id, quoted, lanes),
        fragments.text_matching(quoted, lanes),
        size,
        weight,
        tsquery=query,
    )


def fulltext_by_distance(reader: Reader, queries: list[str]) -> FetchedList:
    """Records matching any of the terms' queries (see term_queries), nearest first."""
    sql = f"""
        with found as (
            select r.record_id from emem.records as r
            where r.content_search operator(pg_catalog.@@)
                  (select emem._tsquery_any(q) from pg_catalog.unnest($1::tsquery[]) as q)
                  {fragments.in_lanes("r.lane_name", reader.lanes_sql)}
        )
        select record_id, {reader.distance_sql("$2")} as distance
        from found order by distance nulls last, record_id"""
    return FetchedList(reader.candidates(sql, ["tsquery[]", "public.vector"], [queries, reader.request.vector]))


def fulltext_scored(
    reader: Reader, queries: list[str], weights: list[float], within: list[str] | None = None
) -> ScoredList:
    """Records matching any of the terms' queries, by the summed weights of the terms matched;
    `within` keeps the records that match one of those queries (a tiered list's exact part)."""
    within = queries if within is None else within
    if not within:
        return ScoredList(reader, [], [])
    sql = f"""
        with found as (
            select r.record_id,
                   (select coalesce(pg_catalog.sum(t.weight), 0)
                    from rows from (pg_catalog.unnest($1::tsquery[]), pg_catalog.unnest($2::float8[]))
                         as t (q, weight)
                    where r.content_search operator(pg_catalog.@@) t.q) as score
            from emem.records as r
            where r.content_search operator(pg_catalog.@@)
                  (select emem._tsquery_any(q) from pg_catalog.unnest($3::tsquery[]) as q)
                  {fragments.in_lanes("r.lane_name", reader.lanes_sql)}
        )
        select {SCORED_ARRAYS.format(score="score")} from found"""
    return ScoredList.from_statement(reader, sql, ["tsquery[]", "float8[]", "tsquery[]"], [queries, weights, within])


def term_queries(reader: Reader, terms: list[list[str]]) -> list[str]:
    """One tsquery per term: the OR of its distinct variants (spellings), each a phrase of the
    text search parser's tokens, so that a code matches whole. A term whose variants give one
    lexeme ("Q3", "q3") is that lexeme, whose frequency the column's statistics know."""
    if not terms:
        return []
    numbers = [n for n, variants in enumerate(terms) for _ in variants]
    texts = [text for variants in terms for text in variants]
    rows = reader.execute(
        """with variant as (
               select distinct v.term, pg_catalog.phraseto_tsquery('emem.exact'::pg_catalog.regconfig, v.text) as q
               from rows from (pg_catalog.unnest($1::int[]), pg_catalog.unnest($2::text[])) as v (term, text)
           )
           select emem._tsquery_any(q order by q::text)::text as query from variant
           where pg_catalog.numnode(q) > 0
           group by term order by term""",
        ["int[]", "text[]"],
        [numbers, texts],
    )
    return [row["query"] for row in rows]


@dataclass(frozen=True)
class Frequencies:
    """The number of records and what is known of each term's document frequency."""

    records: float
    sizes: list[Size]

    @property
    def frequencies(self) -> list[float]:
        return [frequency_of(size) for size in self.sizes]


def frequency_of(size: Size) -> float:
    """A term's document frequency as its weight takes it: the statistics' estimate, else its
    count (up to the cap it was counted to)."""
    return size.estimate if size.estimate is not None else float(size.lower)


def document_frequencies(reader: Reader, queries: list[str], cap: int | None = None) -> Frequencies:
    """The number of records and each term's document frequency. A lexeme common enough to be in
    the column's statistics takes its frequency from them (an estimate); any other term is
    counted (it is rare, so that is cheap), up to `cap` (Tuning.document_frequency_cap)."""
    if not queries:
        return Frequencies(0.0, [])
    cap = reader.tuning.document_frequency_cap if cap is None else cap
    lanes = reader.lanes_sql
    # The column's statistics span every lane: under strict isolation every term is counted in
    # the readable lanes, so that no ranking reflects what other lanes hold.
    common = reader.common_elements("records", "content_search") if lanes is None else {}
    shares = [common.get(single_lexeme(query) or "") for query in queries]
    records = (
        """case when c.reltuples >= $2 then c.reltuples
                -- an estimate, -1 before the first VACUUM or ANALYZE: a small table is counted
                else greatest(c.reltuples, (select pg_catalog.count(*) from (
                    select from emem.records limit $2) as r))
           end"""
        if lanes is None
        else f"(select pg_catalog.count(*) from emem.records as r where true{fragments.in_lanes('r.lane_name', lanes)})"
    )
    rows = reader.execute(
        f"""select {records}::float8 as n,
                   array(select (select pg_catalog.count(*) from (
                                     select from emem.records as r
                                     where r.content_search operator(pg_catalog.@@) q.query::tsquery
                                           {fragments.in_lanes("r.lane_name", lanes)}
                                     limit $2) as matching)::bigint
                         from pg_catalog.unnest($1::text[]) with ordinality as q (query, n)
                         order by q.n) as counted
            from pg_catalog.pg_class as c where c.oid = 'emem.records'::pg_catalog.regclass""",
        ["text[]", "bigint"],
        [[query for query, share in zip(queries, shares, strict=True) if share is None], cap],
    )[0]
    counted = iter(rows["counted"])
    return Frequencies(
        rows["n"],
        [
            Size(0, None, share * rows["n"]) if share is not None else counted_size(next(counted), cap)
            for share in shares
        ],
    )


def counted_size(count: int, cap: int) -> Size:
    """A count taken up to a cap: exact below it, at least the cap when it reached it."""
    return Size.exactly(count) if count < cap else Size(cap)


def inverse_document_frequency(records: float, df: float) -> float:
    """BM25's IDF, ln(1 + (N - df + 0.5) / (df + 0.5))."""
    return math.log(1 + (records - df + 0.5) / (df + 0.5))


def single_lexeme(query: str) -> str | None:
    """The lexeme of a tsquery's text that is one lexeme (`'word'`), else None."""
    found = re.fullmatch(r"'((?:[^']|'')*)'", query)
    return found.group(1).replace("''", "'") if found else None
