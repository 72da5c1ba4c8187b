"""Full text: question terms searched in the records' text (the `emem.exact` configuration keeps
codes and names whole). The seed's lookup searches the terms WordNet does not know; the opt-in
components order by the terms' rarity (BM25's IDF), and fulltext_words searches every content
word too.

Degraded (no vector, so no distances), a list's records are ranked by BM25: a term's rarity
(IDF), how often the record holds it and how long the record is. The seed's lookup keeps the
number of terms matched first and takes BM25 as the tie-break; the opt-in components order by
BM25 alone. A broad term (on more records than Reader.exact_limit) counts its IDF alone: its
records are read in tiers, in record-id order, where scoring every one would cost more than a
page (and a whole reading gives the same order).
"""

import math
import re
from dataclasses import dataclass

from .. import fragments
from ..fragments import SCORED_ARRAYS, any_of
from ..lists.base import CandidateList, Match, Size, planned
from ..lists.broad import BroadList
from ..lists.fetched import FetchedList
from ..lists.scored import ScoredList
from ..lists.tiered import Part, TieredList
from ..plans import ListPlan, Mode, read_whole_because
from ..reader import Reader
from ..sets import TextMatching

# BM25's constants, as Lucene and most engines set them: how soon more occurrences stop adding
# (k1), and how much a record's length counts (b).
BM25_K1 = 1.2
BM25_B = 0.75
# The length BM25 compares a record's length (in characters) with: a constant, where BM25 takes
# the corpus average, which would differ between lanes and with every write.
BM25_REFERENCE_LENGTH = 300


@dataclass(frozen=True)
class TermQueries:
    """One tsquery per question term (as text), and per term the lexemes of each of its
    spellings (space-separated): what BM25 counts the term's occurrences by."""

    queries: list[str]
    spellings: list[list[str]]


@dataclass(frozen=True)
class Relevance:
    """How a degraded list ranks records by BM25: each term's IDF, whether it is narrow (scored
    by its occurrences and the record's length) or broad (its IDF alone), and whether BM25 is
    the order (else the tie-break after the summed weights)."""

    spellings: list[list[str]]
    inverse_frequencies: list[float]
    narrow: list[bool]
    is_the_order: bool


def fulltext(reader: Reader) -> CandidateList:
    """Seed: the terms WordNet does not know, by distance (degraded: by terms matched, then
    BM25). A match of more than Reader.probed_limit records is read lazily."""
    terms = term_queries(reader, [[term] for term in reader.request.analysis.unknown_terms])
    queries = terms.queries
    found = document_frequencies(reader, queries, cap=reader.probed_limit + 1)
    if reader.degraded:
        relevance = relevance_of(reader, terms, found, is_the_order=False)
        return scored_fulltext(reader, queries, found.sizes, [1.0] * len(queries), relevance)
    if not queries:
        return planned(FetchedList([]), ListPlan("empty", "no term of the question is searched in full text"))
    if not is_broad(reader, queries, found.sizes):
        reason = f"the terms match at most {reader.probed_limit} records: read whole"
        plan = ListPlan("whole", read_whole_because(reader.probed_limit, reason))
        return planned(fulltext_by_distance(reader, queries), plan)
    plan = ListPlan("broad", "a broad match by distance alone: read from the HNSW index filtered to it")
    return planned(BroadList(reader, text_match(any_of(queries), Size.of_union(found.sizes))), plan)


def fulltext_by_rarity(reader: Reader) -> CandidateList:
    """Opt-in: the same terms, by the rarity of those matched (summed IDF), then distance
    (degraded: by BM25)."""
    terms = term_queries(reader, [[term] for term in reader.request.analysis.unknown_terms])
    return fulltext_by_idf(reader, terms, document_frequencies(reader, terms.queries))


def fulltext_words(reader: Reader) -> CandidateList:
    """Opt-in: every content word too (as typed or as its lemma), by summed IDF, then distance.
    A word on more than Tuning.common_word_share of the records (and common_word_floor of them,
    or on document_frequency_cap) says too little to bring candidates of its own and is left
    out, as a stop word is."""
    tuning = reader.tuning
    words = [list(dict.fromkeys((typed, term))) for typed, term in reader.request.analysis.content_words]
    terms = term_queries(reader, words)
    found = document_frequencies(reader, terms.queries)
    common = min(tuning.document_frequency_cap, max(tuning.common_word_floor, tuning.common_word_share * found.records))
    telling = [n for n, df in enumerate(found.frequencies) if df < common]
    return fulltext_by_idf(
        reader,
        TermQueries([terms.queries[n] for n in telling], [terms.spellings[n] for n in telling]),
        Frequencies(found.records, [found.sizes[n] for n in telling]),
    )


def text_match(query: str, size: Size) -> Match:
    """The records whose text matches a tsquery given as text, of which `size` is known."""
    return Match(TextMatching(query), size)


def is_broad(reader: Reader, queries: list[str], sizes: list[Size]) -> bool:
    """Whether the terms together match more than probed_limit records: known from one term's
    frequency, or from their sum; else their OR is counted up to the limit."""
    limit = reader.probed_limit
    if any(frequency_of(size) > limit for size in sizes):
        return True
    uppers = [size.upper for size in sizes]
    if None not in uppers and sum(upper for upper in uppers if upper is not None) <= limit:
        return False
    counted = reader.execute(
        "fulltext.is_broad", reader.sets.count_up_to(TextMatching(any_of(queries)), limit + 1), [], [], cache=False
    )
    count: int = counted[0]["n"]
    return count > limit


def fulltext_by_idf(reader: Reader, terms: TermQueries, found: "Frequencies") -> CandidateList:
    """Records matching any of the terms, by the summed IDF of those matched, then distance
    (degraded: by BM25)."""
    weights = [inverse_document_frequency(found.records, df) for df in found.frequencies]
    relevance = relevance_of(reader, terms, found, is_the_order=True) if reader.degraded else None
    return scored_fulltext(reader, terms.queries, found.sizes, weights, relevance)


def relevance_of(reader: Reader, terms: TermQueries, found: "Frequencies", is_the_order: bool) -> Relevance:
    """BM25 over these terms: a term read in tiers (broad) counts its IDF alone."""
    return Relevance(
        terms.spellings,
        [inverse_document_frequency(found.records, df) for df in found.frequencies],
        [df <= reader.probed_limit for df in found.frequencies],
        is_the_order,
    )


def plan_scored_text(frequencies: list[float], mode: Mode) -> ListPlan:
    """How a list of terms ordered by score reads them (a pure function: tested in tests/unit): a
    term on more than probed_limit records (`mode.exact_limit`) is broad and read in tiers, one per
    combination of broad terms, unless there are more than max_broad_parts of them."""
    broad = [n for n, frequency in enumerate(frequencies) if frequency > mode.exact_limit]
    if not frequencies:
        return ListPlan("empty", "no term of the question is searched in full text")
    if not broad:
        reason = f"every term is on at most {mode.exact_limit} records: scored whole"
        return ListPlan("whole", read_whole_because(mode.exact_limit, reason))
    if len(broad) > mode.max_broad_parts:
        return ListPlan("whole", f"{len(broad)} broad terms (at most {mode.max_broad_parts} are read in tiers)")
    return ListPlan("tiered", f"{len(broad)} broad terms read in tiers, the rest scored whole", tuple(map(str, broad)))


def scored_fulltext(
    reader: Reader, queries: list[str], sizes: list[Size], weights: list[float], relevance: Relevance | None = None
) -> CandidateList:
    """Records matching any of the queries, by the summed weights of those matched, then
    distance (degraded: by `relevance`), as plan_scored_text chooses."""
    mode = Mode(True, reader.degraded, reader.probed_limit, reader.tuning.max_broad_parts)
    plan = plan_scored_text([frequency_of(size) for size in sizes], mode)
    if plan.kind != "tiered":
        return planned(fulltext_scored(reader, queries, weights, relevance=relevance), plan)
    broad = [int(n) for n in plan.broad]
    narrow = [query for n, query in enumerate(queries) if n not in broad]
    tiered = TieredList(
        reader,
        text_match(any_of(queries), Size.of_union(sizes)),
        fulltext_scored(reader, queries, weights, within=narrow, relevance=relevance),
        [Part(TextMatching(queries[n]), sizes[n], weights[n]) for n in broad],
        lambda held: sum(part.score_key for part in held),
        TextMatching(any_of(narrow)) if narrow else None,
    )
    return planned(tiered, plan)


def fulltext_by_distance(reader: Reader, queries: list[str]) -> FetchedList:
    """Records matching any of the terms' queries (see term_queries), nearest first."""
    rows = reader.execute(
        "fulltext.fulltext_by_distance",
        f"""select r.record_id from emem.records as r
            where r.content_search operator(pg_catalog.@@)
                  (select emem._tsquery_any(q) from pg_catalog.unnest($1::tsquery[]) as q)
                  {fragments.in_lanes("r.lane_name", reader.lanes_sql)}""",
        ["tsquery[]"],
        [queries],
    )
    return FetchedList(reader.by_distance(row["record_id"] for row in rows))


def fulltext_scored(
    reader: Reader,
    queries: list[str],
    weights: list[float],
    within: list[str] | None = None,
    relevance: Relevance | None = None,
) -> ScoredList:
    """Records matching any of the terms' queries, by the summed weights of the terms matched
    (or by `relevance`); `within` keeps the records that match one of those queries (a tiered
    list's exact part)."""
    within = queries if within is None else within
    if not within:
        return ScoredList(reader, [], [])
    if relevance is not None:
        return fulltext_by_relevance(reader, queries, weights, within, relevance)
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
    return ScoredList.from_statement(
        reader, "fulltext.fulltext_scored", sql, ["tsquery[]", "float8[]", "tsquery[]"], [queries, weights, within]
    )


def fulltext_by_relevance(
    reader: Reader, queries: list[str], weights: list[float], within: list[str], relevance: Relevance
) -> ScoredList:
    """The degraded order: BM25, or the summed weights with BM25 as the tie-break (a fraction
    below one). A term's occurrences in a record are those of its spelling found most often (a
    spelling of several lexemes, a code, occurs as often as its rarest lexeme); only narrow
    terms are counted, so that every record of a broad tier scores alike."""
    spellings = [
        (n, k, spelling)
        for n, (term, narrow) in enumerate(zip(relevance.spellings, relevance.narrow, strict=True), start=1)
        if narrow
        for k, spelling in enumerate(term)
    ]
    keys = [(n, k, lexeme, len(spelling.split())) for n, k, spelling in spellings for lexeme in spelling.split()]
    lexemes = sorted({lexeme for _, _, lexeme, _ in keys})
    length_factor = (
        f"{BM25_K1!r} * (1 - {BM25_B!r} + {BM25_B!r} * greatest(f.characters, {BM25_REFERENCE_LENGTH:d})"
        f" / {BM25_REFERENCE_LENGTH:d}.0)"
    )
    tf = "greatest(coalesce(o.tf, 1), 1)"
    score = "s.flat + s.bm25" if relevance.is_the_order else "s.weights + s.bm25 / (1 + s.bm25)"
    sql = f"""
        with term (q, weight, idf, narrow, n) as (
            select * from rows from (pg_catalog.unnest($1::tsquery[]), pg_catalog.unnest($2::float8[]),
                                     pg_catalog.unnest($3::float8[]), pg_catalog.unnest($4::bool[]))
                          with ordinality
        ), spelling_lexeme (n, spelling, lexeme, size) as (
            select * from rows from (pg_catalog.unnest($5::int[]), pg_catalog.unnest($6::int[]),
                                     pg_catalog.unnest($7::text[]), pg_catalog.unnest($8::int[]))
        ), found as (
            select r.record_id, r.content_search, pg_catalog.length(r.content) as characters
            from emem.records as r
            where r.content_search operator(pg_catalog.@@)
                  (select emem._tsquery_any(q) from pg_catalog.unnest($9::tsquery[]) as q)
                  {fragments.in_lanes("r.lane_name", reader.lanes_sql)}
        ), scored as (
            -- per record, a lateral subquery over its own few terms and lexemes: the planner cannot
            -- know how many records match, and a join between the matches ran in their square
            select f.record_id, s.weights, s.flat, s.bm25
            from found as f
            cross join lateral (
                select pg_catalog.sum(t.weight) as weights,
                       coalesce(pg_catalog.sum(t.weight) filter (where not t.narrow), 0) as flat,
                       coalesce(pg_catalog.sum(t.idf * ({tf} * {BM25_K1 + 1!r}) / ({tf} + {length_factor}))
                                    filter (where t.narrow), 0) as bm25
                from term as t
                left join lateral (
                    -- only the lexemes of narrow terms are kept of the record's text before it is
                    -- unnested; `lateral` (a function's default) keeps Citus from wrapping the
                    -- function in a subquery of its own, which loses the outer reference to f
                    select so.n, pg_catalog.sum(so.occurrences)::float8 as tf
                    from (
                        select l.n, pg_catalog.min(pg_catalog.cardinality(o.positions)) as occurrences
                        from lateral pg_catalog.unnest(pg_catalog.ts_filter(
                            pg_catalog.setweight(f.content_search, 'A', $10::text[]), '{{a}}')) as o
                        join spelling_lexeme as l on l.lexeme operator(pg_catalog.=) o.lexeme
                        group by l.n, l.spelling, l.size having pg_catalog.count(*) = l.size
                    ) as so
                    group by so.n
                ) as o on o.n = t.n
                where f.content_search operator(pg_catalog.@@) t.q
            ) as s
            where s.weights is not null
        ), found_scores as (
            select s.record_id, {score} as score from scored as s
        )
        select {SCORED_ARRAYS.format(score="score")} from found_scores"""
    return ScoredList.from_statement(
        reader,
        "fulltext.fulltext_by_relevance",
        sql,
        ["tsquery[]", "float8[]", "float8[]", "bool[]", "int[]", "int[]", "text[]", "int[]", "tsquery[]", "text[]"],
        [
            queries,
            weights,
            relevance.inverse_frequencies,
            relevance.narrow,
            [n for n, _, _, _ in keys],
            [k for _, k, _, _ in keys],
            [lexeme for _, _, lexeme, _ in keys],
            [size for _, _, _, size in keys],
            within,
            lexemes,
        ],
    )


def term_queries(reader: Reader, terms: list[list[str]]) -> TermQueries:
    """One tsquery per term: the OR of its distinct variants (spellings), each a phrase of the
    text search parser's tokens, so that a code matches whole. A term whose variants give one
    lexeme ("Q3", "q3") is that lexeme, whose frequency the column's statistics know. With each
    term, the lexemes of each of its spellings."""
    if not terms:
        return TermQueries([], [])
    key = tuple(tuple(variants) for variants in terms)
    if key not in reader.term_queries:  # once a request: the lookups ask for the same terms
        reader.term_queries[key] = queries_of(reader, terms)
    return reader.term_queries[key]


def queries_of(reader: Reader, terms: list[list[str]]) -> TermQueries:
    """term_queries' statement."""
    numbers = [n for n, variants in enumerate(terms) for _ in variants]
    texts = [text for variants in terms for text in variants]
    rows = reader.execute(
        "fulltext.term_queries",
        """with variant as (
               select distinct v.term, pg_catalog.phraseto_tsquery('emem.exact'::pg_catalog.regconfig, v.text) as q,
                      pg_catalog.array_to_string(pg_catalog.tsvector_to_array(
                          pg_catalog.to_tsvector('emem.exact'::pg_catalog.regconfig, v.text)), ' ') as lexemes
               from rows from (pg_catalog.unnest($1::int[]), pg_catalog.unnest($2::text[])) as v (term, text)
           )
           select emem._tsquery_any(q order by q::text)::text as query,
                  pg_catalog.array_agg(distinct lexemes) as spellings
           from variant
           where pg_catalog.numnode(q) > 0
           group by term order by term""",
        ["int[]", "text[]"],
        [numbers, texts],
    )
    return TermQueries([row["query"] for row in rows], [list(row["spellings"]) for row in rows])


@dataclass(frozen=True)
class RareTerms:
    """The question's rare full-text terms (a code, a figure, a rare name), as tsqueries with their
    IDF: a record holding one is an exact hit, an anchor the opt-in components reach from (the
    thread around it, the records linked to it)."""

    queries: list[str]
    weights: list[float]


def rare_terms(reader: Reader, at_most: int) -> RareTerms:
    """The terms WordNet does not know that are on at most `at_most` records: rare enough to make
    their records anchors."""
    terms = term_queries(reader, [[term] for term in reader.request.analysis.unknown_terms])
    found = document_frequencies(reader, terms.queries)
    rare = [n for n, df in enumerate(found.frequencies) if df <= at_most]
    weights = [inverse_document_frequency(found.records, found.frequencies[n]) for n in rare]
    return RareTerms([terms.queries[n] for n in rare], weights)


def anchor_score(record: str) -> str:
    """The summed IDF of the rare terms (tsqueries $1, IDFs $2) a record (its alias) holds: an
    anchor's rarity."""
    return f"""(select pg_catalog.sum(t.idf)
                from rows from (pg_catalog.unnest($1::tsquery[]), pg_catalog.unnest($2::float8[])) as t (q, idf)
                where {record}.content_search operator(pg_catalog.@@) t.q)"""


def holds_a_rare_term(record: str) -> str:
    """The record (its alias) holds one of the rare terms ($1), through the text index."""
    return (
        f"{record}.content_search operator(pg_catalog.@@)"
        " (select emem._tsquery_any(q) from pg_catalog.unnest($1::tsquery[]) as q)"
    )


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
    counted (it is rare, so that is cheap), up to `cap` (Tuning.document_frequency_cap). Each is
    worked out once a request: the lookups ask for the same terms."""
    if not queries:
        return Frequencies(0.0, [])
    cap = reader.tuning.document_frequency_cap if cap is None else cap
    missing = [query for query in dict.fromkeys(queries) if (query, cap) not in reader.frequencies]
    if missing or cap not in reader.record_counts:
        reader.record_counts[cap], sizes = counted_frequencies(reader, missing, cap)
        reader.frequencies.update({(query, cap): size for query, size in zip(missing, sizes, strict=True)})
    return Frequencies(reader.record_counts[cap], [reader.frequencies[(query, cap)] for query in queries])


def counted_frequencies(reader: Reader, queries: list[str], cap: int) -> tuple[float, list[Size]]:
    """document_frequencies' statement: the number of records, and these terms' frequencies."""
    lanes = reader.lanes_sql
    # The column's statistics span every lane: under strict isolation every term is counted in
    # the readable lanes, so that no ranking reflects what other lanes hold.
    common = reader.common_elements("records", "content_search") if lanes is None else {}
    shares = [common.get(single_lexeme(query) or "") for query in queries]
    records = (
        """case when c.reltuples >= $2 then c.reltuples
                -- an estimate, -1 before the first VACUUM or ANALYZE: a small table is counted
                else greatest(c.reltuples, (select pg_catalog.count(*) from (
                    select 1 from emem.records limit $2) as r))
           end"""
        if lanes is None
        else f"(select pg_catalog.count(*) from emem.records as r where true{fragments.in_lanes('r.lane_name', lanes)})"
    )
    counted_queries = [query for query, share in zip(queries, shares, strict=True) if share is None]
    # One pass over the records matching any counted term, each term counted by its filter (a
    # statement a cluster's shards each answer for their records).
    counts = ", ".join(
        f"least(pg_catalog.count(*) filter (where r.content_search operator(pg_catalog.@@)"
        f" ($1::text[])[{n:d}]::tsquery), $2)"
        for n in range(1, len(counted_queries) + 1)
    )
    any_counted = " || ".join(f"($1::text[])[{n:d}]::tsquery" for n in range(1, len(counted_queries) + 1))
    counted_sql = (
        f"""(select array[{counts}]::bigint[] from emem.records as r
              where r.content_search operator(pg_catalog.@@) ({any_counted})
                    {fragments.in_lanes("r.lane_name", lanes)})"""
        if counted_queries
        else "'{}'::bigint[]"
    )
    rows = reader.execute(
        "fulltext.document_frequencies",
        f"""select {records}::float8 as n, {counted_sql} as counted
            from pg_catalog.pg_class as c where c.oid = 'emem.records'::pg_catalog.regclass""",
        ["text[]", "bigint"],
        [counted_queries, cap],
    )[0]
    counted = iter(rows["counted"])
    return rows["n"], [
        Size(0, None, share * rows["n"]) if share is not None else counted_size(next(counted), cap) for share in shares
    ]


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
