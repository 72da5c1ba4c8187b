"""What the lookups and their lists read the database with, for one request: the request
itself, how far the merge reads (`reach`), statements with kept plans, and the distance SQL."""

import functools
import json
import math
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .analysis import QuestionAnalysis
from .entry import Backend
from .merge import Candidate
from .plans import WHOLE_ON_A_CLUSTER
from .sets import SetSql

if TYPE_CHECKING:  # the lists and lookups read through a Reader
    from .lists.base import Size
    from .lookups.fulltext import TermQueries


# The longest statement text whose plan is kept (a find's own statements are at most about 4,000
# characters; one with a subquery per term of a long question is about 150 kB of plan per term).
MAX_KEPT_PLAN_CHARS = 8_000


@dataclass(frozen=True)
class Space:
    space_id: int
    dimension: int
    model_name: str
    fingerprint: str | None = None


@dataclass(frozen=True)
class Statement:
    """A statement a find ran: for which lookup or step, which statement, its text, how many rows
    it gave and how long it took."""

    phase: str
    name: str
    sql: str
    rows: int
    milliseconds: float


@dataclass(frozen=True)
class Request:
    question: str
    vector: str | None
    analysis: QuestionAnalysis
    weights: dict[str, float]
    space: Space | None
    candidate_counts: dict[str, int]
    # Strict isolation: the only lanes every lookup reads (None: every lane, the seed's rule).
    lanes: tuple[str, ...] | None = None
    degraded_reason: str | None = None
    strict: bool = False
    # Totals are exact up to this many candidates, a lower bound beyond (0: always exact).
    totals_bound: int = 0

    @property
    def degraded(self) -> bool:
        return self.vector is None


class Reader:
    """Runs the statements of one request. `reach` is how far into the merged list the caller
    reads (the end of its page): no list needs more entries than that, duplicates aside."""

    def __init__(self, state: Backend, request: Request, reach: int) -> None:
        self.state = state
        self.plpy = state.plpy
        self.tuning = state.tuning
        self.request = request
        self.reach = reach
        self.table_rows: dict[str, float] = {}
        # Each edge label's ends as counted for this request, with the limit they were counted up
        # to: the lookup, the page and the totals ask for the same count.
        self.counted_ends: dict[str, tuple[int, int]] = {}
        # What several lookups ask of the same terms, worked out once a request: each term list's
        # tsqueries, each tsquery's document frequency and the number of records they are
        # frequencies in (both with the cap they were counted to).
        self.term_queries: dict[tuple[tuple[str, ...], ...], TermQueries] = {}
        self.frequencies: dict[tuple[str, int], Size] = {}
        self.record_counts: dict[int, float] = {}
        # Every statement the lookups, lists and totals ran, in order; `phase` is the lookup (or
        # step of the find) running them.
        self.log: list[Statement] = []
        self.phase = "request"

    @property
    def degraded(self) -> bool:
        return self.request.degraded

    @functools.cached_property
    def lanes_sql(self) -> str | None:
        """The lanes every lookup keeps to, as an array literal (None: every lane)."""
        lanes = self.request.lanes
        if lanes is None:
            return None
        return f"array[{', '.join(self.plpy.quote_literal(lane) for lane in lanes)}]::text[]"

    @functools.cached_property
    def lane_vector_indexes(self) -> bool:
        """Whether each lane this request keeps to has HNSW indexes of its own in the active space
        (emem._sync_lane_indexes: the lanes strict profiles read), which its vector scans then read."""
        if self.request.lanes is None or self.request.space is None:
            return False
        indexed: bool = self.execute(
            "reader.lane_vector_indexes",
            """select pg_catalog.bool_and(pg_catalog.to_regclass(pg_catalog.format(
                          'emem.%I', emem._lane_index_name(t.name, $1, l.lane))) is not null) as indexed
               from pg_catalog.unnest($2::text[]) as l (lane)
               cross join (values ('record_vectors'), ('windows')) as t (name)""",
            ["int", "text[]"],
            [self.space.space_id, list(self.request.lanes)],
        )[0]["indexed"]
        return bool(indexed)

    @functools.cached_property
    def sets(self) -> SetSql:
        """Renders the request's sets of records, within its lanes."""
        return SetSql(self.plpy, self.lanes_sql)

    @property
    def space(self) -> Space:
        """The active space; only asked for with a question vector, which needs one."""
        assert self.request.space is not None
        return self.request.space

    @functools.cached_property
    def distributed(self) -> bool:
        """Whether emem's tables are distributed over a Citus cluster (docs/scale-out.md)."""
        citus = "select pg_catalog.to_regclass('pg_catalog.pg_dist_partition') is not null as c"
        if not self.execute("reader.distributed", citus, [], [])[0]["c"]:
            return False
        distributed: bool = self.execute(
            "reader.distributed",
            """select exists (select 1 from pg_catalog.pg_dist_partition as p
                              where p.logicalrelid operator(pg_catalog.=) 'emem.records'::pg_catalog.regclass) as d""",
            [],
            [],
        )[0]["d"]
        return distributed

    @functools.cached_property
    def exact_limit(self) -> int:
        """How many records a tag match may hold and still be fetched whole (Tuning.exact_candidates);
        with a vector, the crossover with a filtered HNSW scan. On a Citus cluster every match is
        read whole: a lazy read probes records one by one, which a cluster cannot push down."""
        if self.distributed:
            return WHOLE_ON_A_CLUSTER
        if self.degraded:
            return self.tuning.exact_candidates  # degraded broad tags are read in record-id order from their index
        return self.crossover(self.tuning.filtered_scan_cost_ratio)

    @functools.cached_property
    def probed_limit(self) -> int:
        """How many records a full-text or edge match may hold and still be fetched whole. With a
        vector as exact_limit; degraded, such a match is read in record-id order by probing the
        records one by one (it has no index in that order): the crossover with that."""
        if not self.degraded or self.distributed:
            return self.exact_limit
        return self.crossover(self.tuning.degraded_probe_cost_ratio)

    def scan_budget(self, limit: int) -> int:
        """How many records a lazy read of `limit` records of a broad match may pass (HNSW visits, a
        walk in record-id order): twice what finding them in a match of probed_limit records takes.
        A sparser match is read whole."""
        return max(limit, int(2 * limit * self.rows_of("records") / self.probed_limit))

    def crossover(self, ratio: float) -> int:
        """Where reading a match whole costs what reading `reach` of it from a scan that passes about
        reach * records / size records costs, each `ratio` times a whole read's cost per record."""
        records = self.rows_of("records")
        return max(self.tuning.exact_candidates, int(math.sqrt(ratio * self.reach * records)))

    def common_elements(self, table: str, column: str) -> dict[str, float]:
        """The most common elements of an array or text-search column of an emem table (lexemes,
        label terms) with the share of rows holding each, from the column's statistics."""
        rows = self.statistics(
            table, column, "s.most_common_elems::text::text[] as elements, s.most_common_elem_freqs as shares"
        )
        return dict(zip(rows[0]["elements"] or (), rows[0]["shares"] or (), strict=False)) if rows else {}

    def common_arrays(self, table: str, column: str) -> dict[frozenset[str], float]:
        """The most common values of an array column of an emem table (label terms) as sets, with
        the share of rows holding each, from the column's statistics."""
        rows = self.statistics(
            table,
            column,
            "v.value::text[] as elements, v.share",
            "cross join lateral rows from (pg_catalog.unnest(s.most_common_vals::text::text[]),"
            " pg_catalog.unnest(s.most_common_freqs)) as v (value, share)",
        )
        return {frozenset(row["elements"]): row["share"] for row in rows if row["elements"] is not None}

    def statistics(self, table: str, column: str, columns: str, joined: str = "") -> list[dict[str, Any]]:
        """Columns selected from a column's pg_stats row `s` (and what is joined to it), kept for the
        backend until the table is analysed again. Statistics span every lane."""
        analysed = self.execute(
            "reader.statistics",
            """select pg_catalog.pg_stat_get_last_analyze_time(c.oid)::text as manual,
                      pg_catalog.pg_stat_get_last_autoanalyze_time(c.oid)::text as auto
               from pg_catalog.pg_class as c
               where c.relnamespace = 'emem'::pg_catalog.regnamespace and c.relname = $1""",
            ["name"],
            [table],
        )
        key = (analysed[0]["manual"], analysed[0]["auto"]) if analysed else (None, None)
        name = f"{table}.{column}: {columns}"
        cached = self.state.statistics.get(name)
        if cached is None or cached[0] != key:
            rows = self.execute(
                "reader.statistics",
                f"""select {columns} from pg_catalog.pg_stats as s {joined}
                    where s.schemaname = 'emem' and s.tablename = $1 and s.attname = $2""",
                ["name", "name"],
                [table, column],
            )
            cached = self.state.statistics[name] = (key, rows)
        return cached[1]

    def rows_of(self, table: str) -> float:
        """The planner's estimate of an emem table's rows (0 before it was first analysed), read
        once per request."""
        if table not in self.table_rows:
            self.table_rows[table] = self.execute(
                "reader.rows_of",
                """select greatest(c.reltuples, 0) as n from pg_catalog.pg_class as c
                   where c.relnamespace = 'emem'::pg_catalog.regnamespace and c.relname = $1""",
                ["name"],
                [table],
            )[0]["n"]
        return self.table_rows[table]

    def execute(
        self, name: str, sql: str, types: list[str], args: list[Any], cache: bool = True
    ) -> list[dict[str, Any]]:
        """Run a statement (`name`: which one, as explain lists it); its plan is kept for the backend
        unless the text holds values (cache=False), which would fill the cache with one plan per
        question."""
        started = time.perf_counter()
        # A text that grows with the question (a subquery per term) is planned per call beyond
        # MAX_KEPT_PLAN_CHARS: each length would keep a plan of its own for the backend's life.
        cache = cache and len(sql) <= MAX_KEPT_PLAN_CHARS
        plan = self.state.plan(sql, types) if cache else self.plpy.prepare(sql, types)
        rows: list[dict[str, Any]] = self.plpy.execute(plan, args)
        self.log.append(Statement(self.phase, name, sql, len(rows), (time.perf_counter() - started) * 1000))
        return rows

    def candidates(self, name: str, sql: str, types: list[str], args: list[Any], cache: bool = True) -> list[Candidate]:
        """Candidates from a statement selecting record_id, distance and optionally windows, score."""
        return [
            Candidate(
                row["record_id"],
                finite_or_none(row["distance"]),
                tuple(row.get("windows") or ()),
                row.get("score"),
            )
            for row in self.execute(name, sql, types, args, cache)
        ]

    def with_distances(self, record_ids: list[int], scores: list[float]) -> list[Candidate]:
        """These records with their scores and distances, by score, then distance (degraded:
        none), then record id."""
        distances = self.distances(record_ids)
        return sorted(
            (
                Candidate(record_id, distances.get(record_id), (), score)
                for record_id, score in zip(record_ids, scores, strict=True)
            ),
            key=lambda c: (-(c.score or 0.0), *distance_key(c.distance), c.record_id),
        )

    def by_distance(self, record_ids: Iterable[int]) -> list[Candidate]:
        """These records nearest first, those without a distance last, ties by record id."""
        distances = self.distances(record_ids)
        return sorted(
            (Candidate(record_id, distance) for record_id, distance in distances.items()),
            key=lambda c: (*distance_key(c.distance), c.record_id),
        )

    def distances(self, record_ids: Iterable[int]) -> dict[int, float | None]:
        """Each record's cosine distance to the question vector (None: no vector in the active
        space, or degraded), read from the vectors by id (a cluster's shards each answer for
        theirs: no vector leaves a shard). A record without a vector has no row."""
        wanted = list(dict.fromkeys(record_ids))
        if self.degraded or not wanted:
            return dict.fromkeys(wanted)
        rows = self.execute(
            "reader.distances",
            f"""select rv.record_id, rv.embedding operator(public.<=>) $2::public.vector as distance
                from emem.record_vectors as rv
                where rv.space_id = {self.space.space_id:d} and rv.record_id operator(pg_catalog.=) any ($1)""",
            ["bigint[]", "public.vector"],
            [wanted, self.request.vector],
        )
        found = {row["record_id"]: finite_or_none(row["distance"]) for row in rows}
        return {record_id: found.get(record_id) for record_id in wanted}

    def vector_distance_sql(self, column: str) -> str:
        """The expression the space's HNSW partial index orders by (the question vector is $1)."""
        dimension = self.space.dimension
        return f"({column}::public.vector({dimension:d}) operator(public.<=>) $1::public.vector({dimension:d}))"

    def scan(
        self, name: str, sql: str, count: int, ef_search: int, settings: dict[str, str], cache: bool = True
    ) -> list[Candidate]:
        """The candidates of an HNSW scan (`sql` takes the question vector as $1 and the count as $2,
        and selects record_id, distance and windows) with hnsw.ef_search at least `ef_search` and
        these settings. On a Citus cluster emem._scan runs it, SET LOCAL, so that the settings reach
        the shards; on one node the statement's plan is kept (unless its text holds values:
        cache=False) and the settings are set around it, which saves planning it on every find."""
        if self.distributed:
            found = self.candidates(
                name,
                "select * from emem._scan($1, $2, $3, $4, $5)",
                ["text", "public.vector", "int", "int", "jsonb"],
                [sql, self.request.vector, count, ef_search, json.dumps(settings)],
            )
        else:
            found = self.scan_here(name, sql, count, ef_search, settings, cache)
        # An HNSW scan returns equal distances in the graph's order, which differs between builds
        # and runs: ties go by record id, so that a page's ranks do not depend on it.
        return sorted(found, key=lambda c: (*distance_key(c.distance), c.record_id))

    def scan_here(
        self, name: str, sql: str, count: int, ef_search: int, settings: dict[str, str], cache: bool
    ) -> list[Candidate]:
        """`scan` on one node: the settings set around the kept plan."""
        wanted = dict(settings)
        if "hnsw.ef_search" not in wanted:  # as emem._scan: at least ef_search, unless the settings fix it
            current = "select pg_catalog.current_setting('hnsw.ef_search')::integer as n"
            wanted["hnsw.ef_search"] = str(max(ef_search, self.execute("reader.ef_search", current, [], [])[0]["n"]))
        with self.locally(wanted):
            return self.candidates(name, sql, ["public.vector", "int"], [self.request.vector, count], cache)

    @contextmanager
    def locally(self, settings: dict[str, str]) -> Iterator[None]:
        """These settings for the statements run within, then the values they had again."""
        saved = self.set_locally(settings)
        try:
            yield
        finally:
            self.set_locally(saved)

    def set_locally(self, settings: dict[str, str]) -> dict[str, str]:
        """Sets these settings for the rest of the transaction; the values they had."""
        rows = self.execute(
            "reader.set_locally",
            """select s.name, pg_catalog.current_setting(s.name) as was, pg_catalog.set_config(s.name, s.value, true)
               from rows from (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]))
               with ordinality as s(name, value, n) order by s.n""",
            ["text[]", "text[]"],
            [list(settings), list(settings.values())],
        )
        return {row["name"]: row["was"] for row in rows}


def distance_key(distance: float | None) -> tuple[bool, float]:
    """Nearest first, no distance last (SQL's `order by distance nulls last`)."""
    return (distance is None, distance or 0.0)


def finite_or_none(distance: float | None) -> float | None:
    """A distance that is not a number (a vector written around the API overflowed) counts as none."""
    return distance if distance is not None and math.isfinite(distance) else None
