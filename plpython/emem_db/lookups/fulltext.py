"""Full text: question terms searched in the records' text (the `emem.exact` configuration keeps
codes and names whole). The seed's lookup searches the terms WordNet does not know; the opt-in
components order by the terms' rarity (BM25's IDF), and fulltext_words searches every content
word too."""

import math
import re

from emem_db import fragments
from emem_db.fragments import SCORED_ARRAYS, any_of, quoted_tsquery
from emem_db.lists.base import CandidateList, Match
from emem_db.lists.broad import BroadList
from emem_db.lists.fetched import FetchedList
from emem_db.lists.scored import ScoredList
from emem_db.lists.tiered import Part, TieredList
from emem_db.reader import Reader


def fulltext(reader: Reader) -> CandidateList:
    """Seed: the terms WordNet does not know, by distance (degraded: by terms matched, then
    record id). A match of more than exact_limit records is read lazily."""
    queries = term_queries(reader, [[term] for term in reader.request.analysis.unknown_terms])
    any_term = broad_term_query(reader, queries) if queries else None
    if reader.degraded:
        if any_term is None:
            return fulltext_scored(reader, queries, [1.0] * len(queries))
        _, frequencies = document_frequencies(reader, queries)
        return scored_fulltext(reader, queries, frequencies, [1.0] * len(queries))
    if any_term is None:
        return fulltext_by_distance(reader, queries)
    return BroadList(reader, text_match(reader, any_term))


def fulltext_by_rarity(reader: Reader) -> CandidateList:
    """Opt-in: the same terms, by the rarity of those matched (summed IDF), then distance."""
    queries = term_queries(reader, [[term] for term in reader.request.analysis.unknown_terms])
    records, frequencies = document_frequencies(reader, queries)
    return fulltext_by_idf(reader, queries, frequencies, records)


def fulltext_words(reader: Reader) -> CandidateList:
    """Opt-in: every content word too (as typed or as its lemma), by summed IDF, then distance.
    A word on more than Tuning.common_word_share of the records (and common_word_floor of them,
    or on document_frequency_cap) says too little to bring candidates of its own and is left
    out, as a stop word is."""
    tuning = reader.tuning
    terms = [list(dict.fromkeys((typed, term))) for typed, term in reader.request.analysis.content_words]
    queries = term_queries(reader, terms)
    records, frequencies = document_frequencies(reader, queries)
    common = min(tuning.document_frequency_cap, max(tuning.common_word_floor, tuning.common_word_share * records))
    telling = [(query, df) for query, df in zip(queries, frequencies, strict=True) if df < common]
    return fulltext_by_idf(reader, [query for query, _ in telling], [df for _, df in telling], records)


def text_match(reader: Reader, query: str) -> Match:
    """The records whose text matches a tsquery given as text."""
    quoted = quoted_tsquery(reader.plpy, query)
    ids_sql = fragments.text_matching(quoted)
    return Match(
        holds=lambda record_id: fragments.text_matches(record_id, quoted),
        ids_sql=ids_sql,
        count_sql=f"select pg_catalog.count(*) as n from ({ids_sql}) as c",
    )


def broad_term_query(reader: Reader, queries: list[str]) -> str | None:
    """The OR of the terms when they match more than exact_limit records."""
    row = reader.execute(
        f"""with question as (select emem.tsquery_any(q) as any_term from pg_catalog.unnest($1::tsquery[]) as q)
            select (select any_term from question)::text as any_term,
                   (select pg_catalog.count(*) from (
                        select from emem.records as r
                        where r.content_search operator(pg_catalog.@@) (select any_term from question)
                        limit {reader.exact_limit + 1:d}) as matching) as matching""",
        ["tsquery[]"],
        [queries],
    )[0]
    return row["any_term"] if row["matching"] > reader.exact_limit else None


def fulltext_by_idf(reader: Reader, queries: list[str], frequencies: list[float], records: float) -> CandidateList:
    """Records matching any of the queries, by the summed IDF of those matched, then distance."""
    weights = [inverse_document_frequency(records, df) for df in frequencies]
    return scored_fulltext(reader, queries, frequencies, weights)


def scored_fulltext(
    reader: Reader, queries: list[str], frequencies: list[float], weights: list[float]
) -> CandidateList:
    """Records matching any of the queries, by the summed weights of those matched, then
    distance. Terms on more than exact_limit records are read in tiers."""
    broad = [n for n, df in enumerate(frequencies) if df > reader.exact_limit]
    if not broad or len(broad) > reader.tuning.max_broad_parts:
        return fulltext_scored(reader, queries, weights)
    narrow = [query for n, query in enumerate(queries) if n not in broad]
    any_narrow = quoted_tsquery(reader.plpy, any_of(narrow))
    return TieredList(
        reader,
        text_match(reader, any_of(queries)),
        fulltext_scored(reader, queries, weights, within=narrow),
        [term_part(reader, queries[n], frequencies[n], weights[n]) for n in broad],
        lambda held: sum(part.score_key for part in held),
        lambda record_id: fragments.text_matches(record_id, any_narrow) if narrow else "false",
    )


def term_part(reader: Reader, query: str, frequency: float, weight: float) -> Part:
    quoted = quoted_tsquery(reader.plpy, query)
    return Part(
        lambda record_id: fragments.text_matches(record_id, quoted),
        fragments.text_matching(quoted),
        int(frequency),
        weight,
    )


def fulltext_by_distance(reader: Reader, queries: list[str]) -> FetchedList:
    """Records matching any of the terms' queries (see term_queries), nearest first."""
    sql = f"""
        with found as (
            select r.record_id from emem.records as r
            where r.content_search operator(pg_catalog.@@)
                  (select emem.tsquery_any(q) from pg_catalog.unnest($1::tsquery[]) as q)
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
                  (select emem.tsquery_any(q) from pg_catalog.unnest($3::tsquery[]) as q)
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
           select emem.tsquery_any(q order by q::text)::text as query from variant
           where pg_catalog.numnode(q) > 0
           group by term order by term""",
        ["int[]", "text[]"],
        [numbers, texts],
    )
    return [row["query"] for row in rows]


def document_frequencies(reader: Reader, queries: list[str]) -> tuple[float, list[float]]:
    """The number of records and each term's document frequency. A lexeme common enough to
    be in the column's statistics takes its frequency from them; any other term is counted
    (it is rare, so that is cheap), up to Tuning.document_frequency_cap."""
    if not queries:
        return 0.0, []
    cap = reader.tuning.document_frequency_cap
    common = common_lexemes(reader)
    shares = [common.get(single_lexeme(query) or "") for query in queries]
    rows = reader.execute(
        f"""select case when c.reltuples >= {cap:d} then c.reltuples
                        -- an estimate, -1 before the first VACUUM or ANALYZE: a small table is counted
                        else greatest(c.reltuples, (select pg_catalog.count(*) from (
                            select from emem.records limit {cap:d}) as r))
                   end::float8 as n,
                   array(select (select pg_catalog.count(*) from (
                                     select from emem.records as r
                                     where r.content_search operator(pg_catalog.@@) q.query::tsquery
                                     limit {cap:d}) as matching)::float8
                         from pg_catalog.unnest($1::text[]) with ordinality as q (query, n)
                         order by q.n) as counted
            from pg_catalog.pg_class as c where c.oid = 'emem.records'::pg_catalog.regclass""",
        ["text[]"],
        [[query for query, share in zip(queries, shares, strict=True) if share is None]],
    )[0]
    counted = iter(rows["counted"])
    return rows["n"], [share * rows["n"] if share is not None else next(counted) for share in shares]


def common_lexemes(reader: Reader) -> dict[str, float]:
    """The most common lexemes of the records' text with the share of records holding each, from
    the column's statistics; kept for the backend until emem.records is analysed again."""
    analysed = reader.execute(
        """select pg_catalog.pg_stat_get_last_analyze_time(c.oid)::text as manual,
                  pg_catalog.pg_stat_get_last_autoanalyze_time(c.oid)::text as auto
           from pg_catalog.pg_class as c where c.oid = 'emem.records'::pg_catalog.regclass""",
        [],
        [],
    )[0]
    key = (analysed["manual"], analysed["auto"])
    state = reader.state
    if state.common_lexemes is None or state.common_lexemes[0] != key:
        stats = reader.execute(
            """select s.most_common_elems::text::text[] as lexemes, s.most_common_elem_freqs as shares
               from pg_catalog.pg_stats as s
               where s.schemaname = 'emem' and s.tablename = 'records' and s.attname = 'content_search'""",
            [],
            [],
        )
        found = stats[0] if stats and stats[0]["lexemes"] else {"lexemes": [], "shares": []}
        state.common_lexemes = (key, dict(zip(found["lexemes"], found["shares"], strict=False)))
    return state.common_lexemes[1]


def inverse_document_frequency(records: float, df: float) -> float:
    """BM25's IDF, ln(1 + (N - df + 0.5) / (df + 0.5))."""
    return math.log(1 + (records - df + 0.5) / (df + 0.5))


def single_lexeme(query: str) -> str | None:
    """The lexeme of a tsquery's text that is one lexeme (`'word'`), else None."""
    found = re.fullmatch(r"'((?:[^']|'')*)'", query)
    return found.group(1).replace("''", "'") if found else None
