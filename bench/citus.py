"""The benchmark on a Citus cluster (`--citus HOST:PORT`, the coordinator), beside one node.

The workers are read from pg_dist_node of a database on the coordinator that has Citus. The
corpus database is created on every node with Citus in it, the workers added in it, emem created
on the coordinator (Citus creates it on the workers) and `emem.distribute()` called before the
load, which then runs through the coordinator as on one node (docs/scale-out.md).

What the coordinator's time goes to is measured three ways: each lookup's milliseconds inside
PL/Python and its statement's executor time (profiling.py), the statements find runs that cost
most on the cluster, and the fixed cost of one Citus statement (a router query on one shard, a
query on every shard) beside the same statements on one node.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Any

import psycopg
from corpus import Corpus
from db import Params, Server, connection, scalar, timed
from measure import Cell, latency, percentiles
from profiling import VECTOR_LITERAL, nested_statements
from psycopg import sql

SHOWN_STATEMENTS = 6
WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Cluster:
    """A Citus cluster's workers (the coordinator is the target's server), and its shard count
    for emem.distribute() (None: citus.shard_count)."""

    workers: tuple[Server, ...]
    shard_count: int | None = None


def parse_server(text: str) -> Server:
    host, _, port = text.rpartition(":")
    return Server(host or "127.0.0.1", int(port))


def workers_of(coordinator: Server) -> tuple[Server, ...]:
    """The primary workers in pg_dist_node of the first database on the coordinator that has
    Citus with workers."""
    with connection(coordinator, "postgres") as admin:
        names = [row[0] for row in admin.execute("select datname from pg_database where datallowconn order by 1")]
    for name in names:
        with connection(coordinator, name) as conn:
            if not scalar(conn, "select exists (select from pg_extension where extname = 'citus')"):
                continue
            rows = conn.execute(
                "select nodename, nodeport from pg_dist_node where groupid > 0 and noderole = 'primary'"
                " and isactive order by nodeport"
            ).fetchall()
            if rows:
                return tuple(Server(host, port, coordinator.user) for host, port in rows)
    raise RuntimeError(f"no database on {coordinator.host}:{coordinator.port} has Citus with workers")


def create_cluster_database(coordinator: Server, cluster: Cluster, dbname: str) -> None:
    """The database, new on every node, with Citus in it and the workers added."""
    name = sql.Identifier(dbname)
    nodes = (coordinator, *cluster.workers)
    for server in nodes:  # the nodes' Citus maintenance daemons connect to one another's database
        with connection(server, "postgres") as admin:
            if scalar(admin, "select true from pg_database where datname = %s", (dbname,)):
                admin.execute(sql.SQL("alter database {} allow_connections false").format(name))
    for server in nodes:
        with connection(server, "postgres") as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(name))
            admin.execute(sql.SQL("create database {}").format(name))
        with connection(server, dbname) as conn:
            conn.execute("set client_min_messages = warning")
            conn.execute("create extension citus")
    with connection(coordinator, dbname) as conn:
        conn.execute("select citus_set_coordinator_host(%s, %s)", (coordinator.host, coordinator.port))
        for worker in cluster.workers:
            conn.execute("select citus_add_node(%s, %s)", (worker.host, worker.port))


def distribute(conn: psycopg.Connection, cluster: Cluster) -> Any:
    return scalar(conn, "select emem.distribute(%s)", (cluster.shard_count,))


def placements(conn: psycopg.Connection) -> dict[str, str]:
    """Each lane's records shard and the worker holding it."""
    rows = conn.execute(
        """select l.lane_name, p.shardid, p.nodename || ':' || p.nodeport from emem.lanes as l
           join pg_dist_shard_placement as p
             on p.shardid = get_shard_id_for_distribution_column('emem.records', l.lane_name)
           order by 1"""
    ).fetchall()
    return {lane: f"shard {shard} on {node}" for lane, shard, node in rows}


@contextmanager
def exact_on_workers(coordinator: Server, cluster: Cluster, dbname: str) -> Iterator[psycopg.Connection]:
    """A new coordinator connection whose shard connections run with index scans off (a session's
    SET stays on the coordinator: the setting is the database's on each worker while it lasts)."""
    for worker in cluster.workers:
        with connection(worker, "postgres") as admin:
            admin.execute(sql.SQL("alter database {} set enable_indexscan = off").format(sql.Identifier(dbname)))
    try:
        with connection(coordinator, dbname) as conn:
            yield conn
    finally:
        for worker in cluster.workers:
            with connection(worker, "postgres") as admin:
                admin.execute(sql.SQL("alter database {} reset enable_indexscan").format(sql.Identifier(dbname)))


# ---- where the coordinator's time goes ------------------------------------------------------

# One statement of each shape a find runs, without emem's functions: what a statement costs
# before it does any work.
PROBES = {
    "select_1": ("select 1", ()),
    "router_one_shard": (
        "select count(*) from emem.records where lane_name = 'team' and record_id = %s",
        (1,),
    ),
    "every_shard": ("select count(*) from emem.records where record_id = %s", (1,)),
    "reference_table": ("select count(*) from emem.lanes", ()),
}


def statement_costs(connections: dict[str, psycopg.Connection], repetitions: int) -> dict[str, dict[str, Any]]:
    """p50 of each probe on each connection, timed in the same shuffled rounds."""
    cells = [
        Cell(f"{side}/{name}", conn, query, params, [])
        for side, conn in connections.items()
        for name, (query, params) in PROBES.items()
    ]
    latency(cells, repetitions)
    by_key = {cell.key: percentiles(cell.times) for cell in cells}
    return {name: {side: by_key[f"{side}/{name}"] for side in connections} for name in PROBES}


def short_query(text: str) -> str:
    return WHITESPACE.sub(" ", VECTOR_LITERAL.sub("[vector]", text)).strip()[:160]


def dearest_statements(conn: psycopg.Connection, query: str, params: Params, repetitions: int) -> list[dict[str, Any]]:
    """The statements a find runs, by their median executor ms (auto_explain), dearest first."""
    samples: dict[tuple[int, str], list[float]] = {}
    lookups: dict[tuple[int, str], str] = {}
    timed(conn, query, params)  # warm
    for _ in range(repetitions):
        found = nested_statements(conn, query, params, analyze=False)
        inner = [statement for statement in found if "_gather_plainly" not in statement.query]  # not find itself
        for position, statement in enumerate(inner):
            key = (position, short_query(statement.query) or "(no text: a statement Citus ran for another)")
            samples.setdefault(key, []).append(statement.milliseconds)
            lookups[key] = statement.lookup
    rows: list[dict[str, Any]] = [
        {"ms": round(statistics.median(times), 3), "lookup": lookups[key], "query": key[1], "position": key[0]}
        for key, times in samples.items()
    ]
    rows.sort(key=lambda row: -row["ms"])
    return rows


def statements_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "statements": len(rows),
        "executor_ms": round(sum(float(row["ms"]) for row in rows), 3),
        "dearest": rows[:SHOWN_STATEMENTS],
    }


# ---- where put_records's time goes ----------------------------------------------------------

SHOWN_FUNCTIONS = 6


def batch_payload(corpus: Corpus, size: int) -> str:
    """`size` records of another corpus as one put_records batch, their threads renamed so that
    they meet none of the stored corpus's."""
    records = list(islice((record for unit in corpus.units() for record in unit.records), size))
    items = [
        record.item(vector)
        for record, vector in zip(records, corpus.vectors([r.cluster for r in records]), strict=True)
    ]
    for item in items:
        if "thread_id" in item:
            item["thread_id"] = f"batch-{item['thread_id']}"
    return json.dumps(items)


def put_records_functions(conn: psycopg.Connection, payload: str, space: int) -> dict[str, Any]:
    """One put_records batch in a transaction rolled back (after a first one, also rolled back),
    with track_functions = 'all': its wall ms, and the functions it called by their own time
    (pg_stat_xact_user_functions). With track_functions = 'all' no SQL function is inlined, so
    the batch takes longer than in the load; the PL/pgSQL functions' counts and times stand."""
    query = "select count(*) from emem.put_records(%s::jsonb, %s)"
    conn.execute("set track_functions = 'all'")
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(query, (payload, space))
        with conn.transaction(force_rollback=True):
            milliseconds, _ = timed(conn, query, (payload, space))
            rows = conn.execute(
                """select funcname, calls, total_time, self_time from pg_stat_xact_user_functions
                   where funcname <> 'put_records' order by self_time desc limit %s""",
                (SHOWN_FUNCTIONS,),
            ).fetchall()
    finally:
        conn.execute("reset track_functions")
    return {
        "batch_ms": round(milliseconds, 1),
        "functions": [
            {"function": name, "calls": calls, "total_ms": round(total, 1), "self_ms": round(own, 1)}
            for name, calls, total, own in rows
        ],
    }
