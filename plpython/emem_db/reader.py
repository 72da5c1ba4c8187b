"""What the lookups and their lists read the database with, for one request: the request
itself, how far the merge reads (`reach`), statements with kept plans, and the distance SQL."""

import functools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from emem_db.analysis import QuestionAnalysis
from emem_db.entry import Backend
from emem_db.merge import Candidate


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


class Reader:
    """Runs the statements of one request. `reach` is how far into the merged list the caller
    reads (the end of its page): no list needs more entries than that, duplicates aside."""

    def __init__(self, state: Backend, request: Request, reach: int) -> None:
        self.state = state
        self.plpy = state.plpy
        self.tuning = state.tuning
        self.request = request
        self.reach = reach

    @property
    def degraded(self) -> bool:
        return self.request.degraded

    @property
    def space(self) -> Space:
        """The active space; only asked for with a question vector, which needs one."""
        assert self.request.space is not None
        return self.request.space

    @functools.cached_property
    def exact_limit(self) -> int:
        """How many records a match may hold and still be fetched whole (Tuning.exact_candidates)."""
        if self.degraded:
            return self.tuning.exact_candidates  # degraded broad lists are read in record-id order: cheap at any size
        records = self.execute(
            "select greatest(c.reltuples, 0) as n from pg_catalog.pg_class as c"
            " where c.oid = 'emem.records'::pg_catalog.regclass",
            [],
            [],
        )[0]["n"]
        ratio = self.tuning.filtered_scan_cost_ratio
        return max(self.tuning.exact_candidates, int(math.sqrt(ratio * self.reach * records)))

    def execute(self, sql: str, types: list[str], args: list[Any], cache: bool = True) -> list[dict]:
        """Run a statement; its plan is kept for the backend unless the text holds values
        (cache=False), which would fill the cache with one plan per question."""
        plan = self.state.plan(sql, types) if cache else self.plpy.prepare(sql, types)
        return self.plpy.execute(plan, args)

    def candidates(self, sql: str, types: list[str], args: list[Any], cache: bool = True) -> list[Candidate]:
        """Candidates from a statement selecting record_id, distance and optionally windows, score."""
        return [
            Candidate(
                row["record_id"],
                finite_or_none(row["distance"]),
                tuple(row.get("windows") or ()),
                row.get("score"),
            )
            for row in self.execute(sql, types, args, cache)
        ]

    def with_distances(self, record_ids: list[int], scores: list[float]) -> list[Candidate]:
        """These records with their scores and distances, by score, then distance (degraded:
        none), then record id."""
        if self.degraded:
            ordered = sorted(zip(scores, record_ids, strict=True), key=lambda pair: (-pair[0], pair[1]))
            return [Candidate(record_id, None, (), score) for score, record_id in ordered]
        return self.candidates(
            f"""select found.record_id, {self.distance_sql("$2")} as distance, found.score
                from rows from (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($3::float8[]))
                     as found (record_id, score)
                order by found.score desc, distance nulls last, found.record_id""",
            ["bigint[]", "public.vector", "float8[]"],
            [record_ids, self.request.vector, scores],
        )

    def distance_sql(self, vector: str) -> str:
        """The cosine distance of a record (found.record_id) to the question vector (the
        parameter `vector`); NULL without a vector."""
        if self.degraded:
            return "null::float8"
        return (
            f"(select rv.embedding operator(public.<=>) {vector}::public.vector from emem.record_vectors as rv"
            f" where rv.space_id = {self.space.space_id:d} and rv.record_id = found.record_id)"
        )

    def vector_distance_sql(self, column: str) -> str:
        """The expression the space's HNSW partial index orders by (the question vector is $1)."""
        dimension = self.space.dimension
        return f"({column}::public.vector({dimension:d}) operator(public.<=>) $1::public.vector({dimension:d}))"

    @contextmanager
    def settings(self, values: dict[str, str]) -> Iterator[None]:
        """Set GUCs for the statements inside, then put back what the caller had."""
        saved = self.execute(
            "select name, pg_catalog.current_setting(name) as value from pg_catalog.unnest($1) as name",
            ["text[]"],
            [list(values)],
        )
        setter = self.state.plan("select pg_catalog.set_config($1, $2, true)", ["text", "text"])
        for name, value in values.items():
            self.plpy.execute(setter, [name, value])
        try:
            yield
        finally:
            for row in saved:
                self.plpy.execute(setter, [row["name"], row["value"]])


def finite_or_none(distance: float | None) -> float | None:
    """A distance that is not a number (a vector written around the API overflowed) counts as none."""
    return distance if distance is not None and math.isfinite(distance) else None
