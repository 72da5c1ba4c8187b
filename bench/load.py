"""Builds (or reuses) the benchmark database and loads the corpus through the bulk path.

Records, their tags and vectors go through `emem.put_records(jsonb, space_id)` in batches.
Edges and windows go in as the database's release wants them (writes.py): edges through
`emem.put_edges` in batches (0.2.1: a bulk INSERT, its trigger wrote the labels). Windows: a
sample through `emem.put_window` (to measure the API), the rest by a bulk INSERT into emem.windows
and emem.window_members (put_window, one call and its checks per window, ran 296 windows/s
against 3,618/s for the bulk INSERT at 100k records with 0.2.0). From 0.3.0 on the load ends with
`emem.check_derived()`, which must list nothing.

By default the two HNSW indexes of the space are dropped before the load and built again after
it (the usual way to bulk-load pgvector); --load-with-indexes keeps them during the load.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import psycopg
from citus import Cluster, create_cluster_database, distribute
from corpus import DIMENSION, LANES, Corpus, Unit, windows
from db import Server, connection, emem_version, one_row, scalar, vacuum_analyze_emem, vector_text
from writes import CITUS_WRITES, EDGE_BATCH, EdgeRow, Writes, require_derived_rows, writes_for

MODEL_NAME = "bench-synthetic"
PUT_WINDOW_SAMPLE = 200
# Windows with their members (the member rows carry the window's lane from 0.3.0 on).
BULK_WINDOWS = """
    with new_windows as (
        insert into emem.windows (space_id, lane_name, thread_kind, thread_id, first_position, last_position, embedding)
        select %s, lane, 'conversation', thread, first_position, last_position, embedding::vector
        from unnest(%s::text[], %s::text[], %s::int[], %s::int[], %s::text[])
             as w (lane, thread, first_position, last_position, embedding)
        returning window_id, lane_name, thread_id, first_position, last_position)
    insert into emem.window_members (window_id, record_id{member_lane_column})
    select w.window_id, r.record_id{member_lane}
    from new_windows as w
    join emem.records as r on r.lane_name = w.lane_name and r.kind = 'conversation' and r.thread_id = w.thread_id
         and r.thread_position between w.first_position and w.last_position"""


@dataclass
class LoadReport:
    records: int = 0
    tags: int = 0
    edges: int = 0
    windows: int = 0
    window_members: int = 0
    put_records_seconds: float = 0.0
    edges_seconds: float = 0.0
    put_window_count: int = 0
    put_window_seconds: float = 0.0
    bulk_windows_seconds: float = 0.0
    generation_seconds: float = 0.0
    index_build_seconds: dict[str, float] = field(default_factory=dict)
    vacuum_analyze_seconds: float = 0.0
    total_seconds: float = 0.0
    with_indexes: bool = False
    batch_size: int = 0
    maintenance_work_mem: str = ""
    release: str = ""
    edges_by: str = ""
    edge_batch_size: int = EDGE_BATCH
    derived_problems: int | None = None  # rows emem.check_derived() listed (None: the release has none)
    load_average_1m: list[float] = field(default_factory=list)  # at the start and the end: loads run one after another

    @property
    def records_per_second(self) -> float:
        return self.records / self.put_records_seconds if self.put_records_seconds else 0.0

    def summary(self) -> dict[str, Any]:
        figures = asdict(self)
        figures["records_per_second"] = round(self.records_per_second)
        figures["edges_per_second"] = round(self.edges / self.edges_seconds) if self.edges_seconds else None
        figures["put_window_per_second"] = (
            round(self.put_window_count / self.put_window_seconds) if self.put_window_seconds else None
        )
        bulk = self.windows - self.put_window_count
        figures["bulk_windows_per_second"] = (
            round(bulk / self.bulk_windows_seconds) if self.bulk_windows_seconds else None
        )
        return figures


@dataclass(frozen=True)
class Target:
    server: Server
    dbname: str
    records: int
    seed: int
    release: str | None = None  # None: the release installed by default
    cluster: Cluster | None = None  # a Citus cluster, whose coordinator is `server`

    @property
    def writes(self) -> Writes:
        return CITUS_WRITES if self.cluster is not None else writes_for(self.release)


# ---- the database ---------------------------------------------------------------------------


def stored_corpus(target: Target) -> dict[str, Any] | None:
    """The load report of a complete corpus of the same size and seed in the database, if any."""
    with connection(target.server, "postgres") as admin:
        if not scalar(admin, "select true from pg_database where datname = %s", (target.dbname,)):
            return None
    with connection(target.server, target.dbname) as conn:
        if not scalar(conn, "select to_regclass('bench.corpus') is not null"):
            return None
        row = conn.execute(
            "select load from bench.corpus where records = %s and seed = %s and completed_at is not null",
            (target.records, target.seed),
        ).fetchone()
        return row[0] if row else None


def installed_release(target: Target) -> str:
    with connection(target.server, target.dbname) as conn:
        return emem_version(conn)


def update_extension(target: Target, script_md5: str | None) -> str | None:
    """Updates the corpus's emem to the installed release in place (the upgrade path users take);
    the version it had, or None when it was at the installed release already."""
    with connection(target.server, target.dbname) as conn:
        installed, default = one_row(
            conn.execute("select installed_version, default_version from pg_available_extensions where name = 'emem'")
        )
        if installed == default:
            return None
        conn.execute("alter extension emem update")
        conn.execute(
            """update bench.corpus set load = jsonb_set(load, '{extension_script_md5}', to_jsonb(%s::text))
               where records = %s and seed = %s""",
            (script_md5, target.records, target.seed),
        )
        return str(installed)


def create_database(target: Target) -> Any:
    """The database with emem, its lanes and space, and bench.corpus; on a cluster what
    emem.distribute() did (called before anything is written), else None."""
    if target.cluster is not None:
        create_cluster_database(target.server, target.cluster, target.dbname)
    else:
        with connection(target.server, "postgres") as admin:
            admin.execute(
                psycopg.sql.SQL("drop database if exists {} with (force)").format(psycopg.sql.Identifier(target.dbname))
            )
            admin.execute(psycopg.sql.SQL("create database {}").format(psycopg.sql.Identifier(target.dbname)))
    with connection(target.server, target.dbname) as conn:
        conn.execute("set client_min_messages = warning")
        release = psycopg.sql.SQL("version {}").format(target.release) if target.release else psycopg.sql.SQL("")
        conn.execute(psycopg.sql.SQL("create extension emem {} cascade").format(release))
        distributed = distribute(conn, target.cluster) if target.cluster is not None else None
        for lane in LANES:
            conn.execute("select emem.create_lane(%s)", (lane,))
        conn.execute("select emem.create_embedding_space(%s, %s, activate => true)", (MODEL_NAME, DIMENSION))
        conn.execute("create schema bench")
        conn.execute("""create table bench.corpus (
            records integer, seed integer, load jsonb, completed_at timestamptz)""")
    return distributed


def space_id(conn: psycopg.Connection) -> int:
    return int(scalar(conn, "select space_id from emem.embedding_spaces where is_active"))


def hnsw_indexes(conn: psycopg.Connection, space: int) -> dict[str, str]:
    rows = conn.execute(
        "select indexname, indexdef from pg_indexes where schemaname = 'emem' and indexname = any (%s)",
        ([f"record_vectors_space_{space}", f"windows_space_{space}"],),
    ).fetchall()
    return dict(rows)


# ---- loading --------------------------------------------------------------------------------


class Loader:
    def __init__(self, conn: psycopg.Connection, corpus: Corpus, space: int, batch_size: int, writes: Writes) -> None:
        self.conn = conn
        self.corpus = corpus
        self.space = space
        self.batch_size = batch_size
        self.writes = writes
        self.report = LoadReport(batch_size=batch_size, release=emem_version(conn), edges_by=writes.edges_by)
        self.ids = np.zeros(corpus.size, dtype=np.int64)
        self.loaded = 0
        self.pending_edges: list[EdgeRow] = []  # written in whole batches, the rest at the end

    def batches(self) -> Iterator[list[Unit]]:
        """The corpus in batches of whole units (a thread is never split)."""
        batch: list[Unit] = []
        size = 0
        for unit in self.corpus.units():
            batch.append(unit)
            size += len(unit.records)
            if size >= self.batch_size:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    def load(self) -> LoadReport:
        started = time.perf_counter()
        self.report.load_average_1m.append(round(os.getloadavg()[0], 2))
        generating = time.perf_counter()
        for batch in self.batches():
            records = [record for unit in batch for record in unit.records]
            vectors = self.corpus.vectors([record.cluster for record in records])
            payload = json.dumps([record.item(vector) for record, vector in zip(records, vectors, strict=True)])
            self.report.generation_seconds += time.perf_counter() - generating
            self.put_records(payload, len(records), sum(len(record.tags) for record in records))
            self.put_edges(batch)
            self.put_windows(batch, vectors)
            self.loaded += len(records)
            generating = time.perf_counter()
        self.write_edges(len(self.pending_edges))
        self.report.total_seconds = time.perf_counter() - started
        self.report.load_average_1m.append(round(os.getloadavg()[0], 2))
        return self.report

    def put_records(self, payload: str, count: int, tags: int) -> None:
        started = time.perf_counter()
        rows = self.conn.execute(
            "select record_id from emem.put_records(%s::jsonb, %s) order by item_number", (payload, self.space)
        ).fetchall()
        self.report.put_records_seconds += time.perf_counter() - started
        self.ids[self.loaded : self.loaded + count] = [row[0] for row in rows]
        self.report.records += count
        self.report.tags += tags

    def put_edges(self, batch: list[Unit]) -> None:
        self.pending_edges += [
            EdgeRow(int(self.ids[e.from_index]), int(self.ids[e.to_index]), e.relation, e.properties)
            for unit in batch
            for e in unit.edges
        ]
        self.write_edges(len(self.pending_edges) - len(self.pending_edges) % EDGE_BATCH)

    def write_edges(self, count: int) -> None:
        if not count:
            return
        started = time.perf_counter()
        self.writes.edges(self.conn, self.pending_edges[:count])
        self.report.edges_seconds += time.perf_counter() - started
        self.report.edges += count
        del self.pending_edges[:count]

    def put_windows(self, batch: list[Unit], vectors: np.ndarray) -> None:
        runs: list[tuple[str, str, list[int], np.ndarray]] = []  # lane, thread, batch offsets, vector
        offset = 0
        for unit in batch:
            if unit.is_thread:
                for run in windows(list(range(offset, offset + len(unit.records)))):
                    mean = vectors[run].mean(axis=0)
                    first = unit.records[0]
                    runs.append((first.lane, first.thread_id or "", run, mean / np.linalg.norm(mean)))
            offset += len(unit.records)
        sample = max(0, min(len(runs), PUT_WINDOW_SAMPLE - self.report.put_window_count))
        self.put_window_calls(runs[:sample])
        self.bulk_windows(runs[sample:], batch)
        self.report.windows += len(runs)
        self.report.window_members += sum(len(run[2]) for run in runs)

    def put_window_calls(self, runs: list[tuple[str, str, list[int], np.ndarray]]) -> None:
        started = time.perf_counter()
        for _, _, members, vector in runs:
            ids = [int(self.ids[self.loaded + m]) for m in members]
            self.conn.execute("select emem.put_window(%s, %s::vector, %s)", (ids, vector_text(vector), self.space))
        self.report.put_window_seconds += time.perf_counter() - started
        self.report.put_window_count += len(runs)

    def bulk_windows(self, runs: list[tuple[str, str, list[int], np.ndarray]], batch: list[Unit]) -> None:
        if not runs:
            return
        records = [record for unit in batch for record in unit.records]
        first = [records[run[2][0]].thread_position for run in runs]
        last = [records[run[2][-1]].thread_position for run in runs]
        column, value = (", lane_name", ", w.lane_name") if self.writes.member_lane else ("", "")
        started = time.perf_counter()
        self.conn.execute(
            BULK_WINDOWS.format(member_lane_column=column, member_lane=value),
            (
                self.space,
                [run[0] for run in runs],
                [run[1] for run in runs],
                first,
                last,
                [vector_text(run[3]) for run in runs],
            ),
        )
        self.report.bulk_windows_seconds += time.perf_counter() - started


def rebuild_indexes(
    conn: psycopg.Connection, definitions: dict[str, str], report: LoadReport, on_cluster: bool
) -> None:
    """Each index built again; on a cluster with the build's maintenance_work_mem on the shards too
    (SET LOCAL, which Citus sends to the transaction's shard connections)."""
    for name, definition in sorted(definitions.items()):
        started = time.perf_counter()
        with conn.transaction():
            if on_cluster:
                conn.execute("set local citus.propagate_set_commands = 'local'")
                conn.execute(
                    psycopg.sql.SQL("set local maintenance_work_mem = {}").format(
                        psycopg.sql.Literal(report.maintenance_work_mem)
                    )
                )
            conn.execute(definition)
        report.index_build_seconds[name] = round(time.perf_counter() - started, 2)


def vacuum_analyze(conn: psycopg.Connection, report: LoadReport) -> None:
    started = time.perf_counter()
    vacuum_analyze_emem(conn)
    report.vacuum_analyze_seconds = round(time.perf_counter() - started, 2)


def build(
    target: Target, batch_size: int, with_indexes: bool, maintenance_work_mem: str, script_md5: str | None
) -> dict[str, Any]:
    """Creates the database and loads the corpus; returns the load report (also stored in bench.corpus)."""
    distributed = create_database(target)
    with connection(target.server, target.dbname) as conn:
        space = space_id(conn)
        definitions = hnsw_indexes(conn, space)
        if not with_indexes:
            for name in definitions:
                conn.execute(psycopg.sql.SQL("drop index emem.{}").format(psycopg.sql.Identifier(name)))
        loader = Loader(conn, Corpus(target.records, target.seed), space, batch_size, target.writes)
        report = loader.load()
        report.with_indexes = with_indexes
        report.maintenance_work_mem = maintenance_work_mem
        conn.execute("select set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
        if not with_indexes:
            rebuild_indexes(conn, definitions, report, target.cluster is not None)
        vacuum_analyze(conn, report)
        report.derived_problems = require_derived_rows(conn, target.writes)
        summary = report.summary() | {"extension_script_md5": script_md5}
        if target.cluster is not None:
            summary["citus"] = {
                "workers": [f"{w.host}:{w.port}" for w in target.cluster.workers],
                "distributed": distributed,
            }
        conn.execute(
            "insert into bench.corpus values (%s, %s, %s, now())", (target.records, target.seed, json.dumps(summary))
        )
        return summary
