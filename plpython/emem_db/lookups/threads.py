"""The thread around exact hits (opt-in): the turns of a conversation, or the chunks of a file,
around a record that holds a question term telling of its thread (a code, a figure, a rare name,
or a name frequent in one conversation but rare overall).

A conversation about an invoice names its number once; the turns around it ("we agreed to split
it") say what was decided without repeating it, and no exact lookup finds them. This lookup
takes as anchors the records of a thread that hold one of the question's full-text terms that is
telling there:
- a rare term, on at most Tuning.anchor_frequency records, in any thread;
- a term on more records (up to Tuning.thread_term_limit) in a thread where it is frequent but
  that it is not spread over: a thread whose share of the term's records is at least
  Tuning.thread_share_lift times the thread's share of all records (a friend's name on 200 turns
  of the one conversation of four where she speaks, not a word on every thread's turns). Of each
  term, the Tuning.anchor_threads threads holding most of its records are weighed.
An anchor of a term that is not rare must also hold another content word of the question (a
name on hundreds of turns does not say which of them). The most telling anchors are kept (at
most Tuning.max_anchors): by the summed IDF of the telling terms they hold, then the summed IDF
of the question's other content words they hold, then distance (degraded: record id). Each
brings the records of its thread within Tuning.thread_radius positions: by the summed IDF of the
anchor's telling terms, then by how far from it, then by the anchor's other words, then by
distance (degraded: by position, then record id); a record near several anchors takes its best.
So a code's thread comes as it did (the code, then its neighbours by steps), and the turns of a
name's many anchors come step by step: the anchors, then the turns next to them. Dates stay out
of the order. Every statement reads a bounded number of rows, however many records hold a name.
"""

from dataclasses import dataclass

from .. import fragments
from ..lists.base import CandidateList, planned
from ..lists.fetched import FetchedList
from ..lookups.fulltext import document_frequencies, inverse_document_frequency, term_queries
from ..merge import Candidate
from ..plans import ListPlan
from ..reader import Reader, distance_key


@dataclass(frozen=True)
class Thread:
    lane_name: str
    kind: str
    thread_id: str


@dataclass(frozen=True)
class Anchor:
    """A record that holds a term telling of its thread, with how telling (the summed IDF of its
    telling terms, `score`, and of the question's other content words it holds, `words`)."""

    thread: Thread
    position: int
    score: float
    words: float


def thread_context(reader: Reader) -> CandidateList:
    analysis, tuning = reader.request.analysis, reader.tuning
    names = list(dict.fromkeys(term_queries(reader, [[term] for term in analysis.unknown_terms]).queries))
    names = names[: tuning.thread_terms]
    # The other content words: not the names again (as their normal form: `Jonas` and `jona`).
    others = [list(dict.fromkeys(word)) for word in analysis.content_words if word[0] not in analysis.unknown_terms]
    content = term_queries(reader, others).queries
    words = [query for query in dict.fromkeys(content) if query not in names][: tuning.thread_terms]
    found = document_frequencies(reader, names + words)
    idf = [inverse_document_frequency(found.records, df) for df in found.frequencies]
    frequencies = found.frequencies[: len(names)]
    rare = [n for n, df in enumerate(frequencies) if df <= tuning.anchor_frequency]
    weighed = [n for n, df in enumerate(frequencies) if tuning.anchor_frequency < df <= tuning.thread_term_limit]
    telling = telling_threads(reader, [names[n] for n in weighed], [frequencies[n] for n in weighed], found.records)
    telling = [(weighed[n], thread) for n, thread in telling]
    if not rare and not telling:
        return planned(
            FetchedList([]),
            ListPlan(
                "empty",
                f"no term of the question is on at most {tuning.anchor_frequency} records"
                f" or telling of a thread (a {tuning.thread_share_lift:g} times larger share of its records)",
            ),
        )
    anchors = choose_anchors(reader, names, idf, rare, telling, words, idf[len(names) :])
    threads = len({thread for _, thread in telling})
    plan = ListPlan(
        "whole", f"the threads around {len(rare)} rare terms and {len(telling)} terms telling of {threads} threads"
    )
    return planned(FetchedList(around_anchors(reader, anchors)), plan)


def telling_threads(
    reader: Reader, queries: list[str], frequencies: list[float], records: float
) -> list[tuple[int, Thread]]:
    """Of each term (on at most thread_term_limit records), the threads among the anchor_threads
    holding most of its records whose share of them is at least thread_share_lift times their
    share of all records. A thread's size is the span of its positions (two index probes: at
    least its records, so that the test errs towards no anchor). Two statements: the threads of
    at most thread_term_limit records of each term, then the spans of those kept. Each term's read
    is a subquery of its own with its limit (a Citus cluster pushes down no limit in a lateral
    join), as is each span."""
    if not queries:
        return []
    tuning, lanes = reader.tuning, reader.lanes_sql
    reads = " union all ".join(
        f"""select {n:d} as n, r.lane_name, r.kind, r.thread_id from (
                select r.lane_name, r.kind, r.thread_id from emem.records as r
                where r.content_search operator(pg_catalog.@@) ($1::tsquery[])[{n:d}]
                  and r.thread_id is not null{fragments.in_lanes("r.lane_name", lanes)}
                limit $2) as r"""
        for n in range(1, len(queries) + 1)
    )
    held = reader.execute(
        "threads.telling_threads",
        f"""with held as (
                select h.n, h.lane_name, h.kind, h.thread_id, pg_catalog.count(*) as held
                from ({reads}) as h group by h.n, h.lane_name, h.kind, h.thread_id
            ), ranked as (
                select h.*, pg_catalog.row_number() over (
                    partition by h.n order by h.held desc, h.lane_name, h.kind, h.thread_id) as place
                from held as h
            )
            select k.n, k.lane_name, k.kind::text as kind, k.thread_id, k.held
            from ranked as k where k.place <= $3 order by k.n, k.place""",
        ["tsquery[]", "int", "int"],
        [queries, tuning.thread_term_limit, tuning.anchor_threads],
    )
    if not held:
        return []
    spans = ", ".join(
        f"""(select pg_catalog.max(s.thread_position) - pg_catalog.min(s.thread_position) + 1
             from emem.records as s
             where s.lane_name = ($1::text[])[{k:d}] and s.kind = ($2::text[])[{k:d}]::emem.record_kind
               and s.thread_id = ($3::text[])[{k:d}]{fragments.in_lanes("s.lane_name", lanes)})"""
        for k in range(1, len(held) + 1)
    )
    span = reader.execute(
        "threads.thread_spans",
        f"select array[{spans}]::bigint[] as spans",
        ["text[]", "text[]", "text[]"],
        [[row["lane_name"] for row in held], [row["kind"] for row in held], [row["thread_id"] for row in held]],
    )[0]["spans"]
    return [
        (row["n"] - 1, Thread(row["lane_name"], row["kind"], row["thread_id"]))
        for row, size in zip(held, span, strict=True)
        if is_telling(row["held"], frequencies[row["n"] - 1], size, records, tuning.thread_share_lift)
    ]


def is_telling(held: int, frequency: float, span: int, records: float, lift: float) -> bool:
    """Whether a thread of `span` positions holding `held` of a term's `frequency` records holds
    a share of them at least `lift` times its share of all `records`."""
    return held * records >= lift * span * max(frequency, held)


def choose_anchors(
    reader: Reader,
    names: list[str],
    idf: list[float],
    rare: list[int],
    telling: list[tuple[int, Thread]],
    words: list[str],
    word_idf: list[float],
) -> list[Anchor]:
    """The max_anchors most telling records holding a rare term, or a term telling of their
    thread and another content word: by the summed IDF of those terms, then of the other content
    words, then distance (degraded: record id). The statement reads the rare terms' records and
    at most thread_term_limit records of each telling term's thread, and returns those ranked
    among the first max_anchors on both sums, ties included (distance breaks them), up to
    exact_candidates."""
    tuning, lanes = reader.tuning, reader.lanes_sql
    # Computed with each read, on the records' own node: the IDF of the rare terms a record
    # holds, and of the other words.
    scores = """(select coalesce(pg_catalog.sum(t.idf), 0)
                 from rows from (pg_catalog.unnest($1::tsquery[]), pg_catalog.unnest($2::float8[])) as t (q, idf)
                 where r.content_search operator(pg_catalog.@@) t.q) as rare_idf,
                (select coalesce(pg_catalog.sum(w.idf), 0)
                 from rows from (pg_catalog.unnest($3::tsquery[]), pg_catalog.unnest($4::float8[])) as w (q, idf)
                 where r.content_search operator(pg_catalog.@@) w.q) as words"""
    columns = "r.record_id, r.lane_name, r.kind, r.thread_id, r.thread_position"
    # The rare terms' records in threads, planned for all of them (they are few: the terms are
    # rare), read up to $5: under the LIMIT the planner bet that a sequential scan soon finds a few,
    # and a code on records in no thread then read every record (54 ms against 2 at 100k).
    rare_read = f"""select {columns}, 0::float8 as telling_idf, {scores} from emem.records as r
            where r.content_search operator(pg_catalog.@@) (select emem._tsquery_any(q) from pg_catalog.unnest($1) as q)
              and r.thread_id is not null{fragments.in_lanes("r.lane_name", lanes)}"""
    reads = ["select * from rare_read limit $5"]
    # One read per term telling of a thread, of its records there that hold another word.
    reads += [
        f"""select {columns}, ($7::float8[])[{k:d}] as telling_idf, {scores} from emem.records as r
            where r.content_search operator(pg_catalog.@@) ($6::tsquery[])[{k:d}]
              and r.lane_name = ($8::text[])[{k:d}] and r.kind = ($9::text[])[{k:d}]::emem.record_kind
              and r.thread_id = ($10::text[])[{k:d}]
              and r.content_search operator(pg_catalog.@@)
                  (select emem._tsquery_any(w.q) from pg_catalog.unnest($3::tsquery[]) as w (q))
              {fragments.in_lanes("r.lane_name", lanes)}
            limit $11"""
        for k in range(1, len(telling) + 1)
    ]
    rows = reader.execute(
        "threads.anchors",
        f"""with rare_read as materialized ({rare_read}
            ), found as (
                {" union all ".join(f"select * from ({read}) as r" for read in reads)}
            ), scored as (
                select f.record_id, f.lane_name, f.kind::text as kind, f.thread_id, f.thread_position,
                       pg_catalog.max(f.rare_idf) + pg_catalog.sum(f.telling_idf) as score,
                       pg_catalog.max(f.words) as words
                from found as f group by f.record_id, f.lane_name, f.kind, f.thread_id, f.thread_position
            ), ranked as (
                select s.*, pg_catalog.rank() over (order by s.score desc, s.words desc) as place
                from scored as s where s.score > 0
            )
            select k.record_id, k.lane_name, k.kind, k.thread_id, k.thread_position, k.score, k.words
            from ranked as k where k.place <= $12
            order by k.place, k.record_id limit $13""",
        [
            "tsquery[]",
            "float8[]",
            "tsquery[]",
            "float8[]",
            "int",
            "tsquery[]",
            "float8[]",
            "text[]",
            "text[]",
            "text[]",
            "int",
            "int",
            "int",
        ],
        [
            [names[n] for n in rare],
            [idf[n] for n in rare],
            words,
            word_idf,
            tuning.anchor_frequency * len(rare),
            [names[n] for n, _ in telling],
            [idf[n] for n, _ in telling],
            [thread.lane_name for _, thread in telling],
            [thread.kind for _, thread in telling],
            [thread.thread_id for _, thread in telling],
            tuning.thread_term_limit,
            tuning.max_anchors,
            tuning.exact_candidates,
        ],
    )
    distances = reader.distances(row["record_id"] for row in rows)
    rows = sorted(
        rows,
        key=lambda row: (-row["score"], -row["words"], *distance_key(distances[row["record_id"]]), row["record_id"]),
    )
    return [
        Anchor(
            Thread(row["lane_name"], row["kind"], row["thread_id"]), row["thread_position"], row["score"], row["words"]
        )
        for row in rows[: tuning.max_anchors]
    ]


def around_anchors(reader: Reader, anchors: list[Anchor]) -> list[Candidate]:
    """The records of each anchor's thread within Tuning.thread_radius positions of it: by the
    anchor's score, then steps from it, then the anchor's words (a record near several: its best),
    then distance (degraded: none), then position, then record id."""
    if not anchors:
        return []
    radius, plpy = reader.tuning.thread_radius, reader.plpy
    near = " or ".join(
        f"""(n.lane_name = {plpy.quote_literal(a.thread.lane_name)} and n.kind = {plpy.quote_literal(a.thread.kind)}
             and n.thread_id = {plpy.quote_literal(a.thread.thread_id)}
             and n.thread_position between {a.position - radius:d} and {a.position + radius:d})"""
        for a in anchors
    )
    rows = reader.execute(
        "threads.around",
        f"""select n.record_id, n.lane_name, n.kind::text as kind, n.thread_id, n.thread_position
            from emem.records as n where ({near}){fragments.in_lanes("n.lane_name", reader.lanes_sql)}""",
        [],
        [],
        cache=False,
    )
    best: dict[int, tuple[float, int, float, int]] = {}  # record -> (-score, steps, -words, position)
    for row in rows:
        thread = Thread(row["lane_name"], row["kind"], row["thread_id"])
        for a in anchors:
            steps = abs(row["thread_position"] - a.position)
            if thread == a.thread and steps <= radius:
                key = (-float(a.score), steps, -float(a.words), row["thread_position"])
                best[row["record_id"]] = min(best.get(row["record_id"], key), key)
    distances = reader.distances(best)
    ordered = sorted(best, key=lambda r: (*best[r][:3], *distance_key(distances[r]), best[r][3], r))
    return [Candidate(record_id, distances[record_id]) for record_id in ordered]
