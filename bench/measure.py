"""Timing: warm latency in rounds, the first call of a fresh connection, throughput with several
clients, and backend memory. All times are wall-clock at the client (local TCP), in ms."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from db import Params, Query, Server, scalar, timed


@dataclass
class Cell:
    """One thing timed repeatedly: a statement on a connection, and what it answered first."""

    key: str
    conn: psycopg.Connection
    query: Query
    params: Params
    times: list[float]
    first_rows: list[tuple[Any, ...]] | None = None

    def run(self) -> float:
        milliseconds, rows = timed(self.conn, self.query, self.params)
        if self.first_rows is None:
            self.first_rows = rows
        return milliseconds


def percentiles(times: list[float]) -> dict[str, float]:
    if not times:
        return {}
    values = np.asarray(times)
    return {
        "p50": round(float(np.percentile(values, 50)), 3),
        "p95": round(float(np.percentile(values, 95)), 3),
        "min": round(min(times), 3),
        "n": len(times),
    }


def latency(
    cells: list[Cell], repetitions: int, warmup: int = 2, progress: Callable[[str], None] | None = None
) -> None:
    """Runs every cell `warmup` times untimed, then `repetitions` rounds of every cell, each round
    in a new shuffled order, so that noise from the rest of the machine and the cost of switching
    between connections spread evenly over all cells."""
    for cell in cells:
        for _ in range(warmup):
            cell.run()
    order = random.Random(0)
    for round_number in range(repetitions):
        for cell in order.sample(cells, len(cells)):
            cell.times.append(cell.run())
        if progress and (round_number + 1) % max(1, repetitions // 4) == 0:
            progress(f"  latency round {round_number + 1}/{repetitions}")


# ---- fresh connections ----------------------------------------------------------------------


def fresh_connections(server: Server, dbname: str, query: Query, params: Params, count: int) -> dict[str, Any]:
    """Opens `count` new connections; times the connection, its first find and its second; and
    the first eight calls in one more new connection (PL/Python's prepared plans are custom for
    their first five executions, then may turn generic)."""
    connect, first, second = [], [], []
    memory: dict[str, dict[str, int | None]] = {}
    for attempt in range(count):
        started = time.perf_counter()
        conn = server.connect(dbname)
        connect.append((time.perf_counter() - started) * 1000)
        try:
            if attempt == 0:
                memory["fresh_backend"] = backend_memory(conn)
            first.append(timed(conn, query, params)[0])
            if attempt == 0:
                memory["after_first_find"] = backend_memory(conn)
            second.append(timed(conn, query, params)[0])
        finally:
            conn.close()
    with server.connect(dbname) as conn:
        series = [round(timed(conn, query, params)[0], 1) for _ in range(8)]
    return {
        "connect": percentiles(connect),
        "first_find": percentiles(first),
        "second_find": percentiles(second),
        "first_find_max": round(max(first), 3),
        "memory": memory,
        "first_eight_calls": series,
        "split": first_call_split(server, dbname, query, params, count),
    }


def first_call_split(
    server: Server, dbname: str, query: Query, params: Params, count: int
) -> dict[str, dict[str, float]]:
    """Where a fresh connection's first find goes: PL/Python with emem's modules and the WordNet
    lexicon (timed as a first emem.analyse_question), then the find itself (catalog caches,
    plans, the first reads of the indexes)."""
    python_start, find_after = [], []
    for _ in range(count):
        with server.connect(dbname) as conn:
            python_start.append(timed(conn, "select emem.analyse_question('warm')")[0])
            find_after.append(timed(conn, query, params)[0])
    return {"plpython_modules_lexicon": percentiles(python_start), "first_find_after_them": percentiles(find_after)}


# ---- throughput -----------------------------------------------------------------------------


def _client(
    server: Server,
    dbname: str,
    calls: Sequence[tuple[Query, Params]],
    seconds: float,
    barrier: threading.Barrier,
    results: list[int],
    index: int,
) -> None:
    with server.connect(dbname) as conn:
        for query, params in calls:  # warm this backend: modules, lexicon, plans
            conn.execute(query, params).fetchall()
        barrier.wait()
        deadline = time.perf_counter() + seconds
        done = 0
        while time.perf_counter() < deadline:
            query, params = calls[done % len(calls)]
            conn.execute(query, params).fetchall()
            done += 1
        results[index] = done


def throughput(
    server: Server, dbname: str, calls: Sequence[tuple[Query, Params]], clients: int, seconds: float
) -> float:
    """Calls per second of `clients` connections, each cycling through `calls` for `seconds`."""
    barrier = threading.Barrier(clients)
    results = [0] * clients
    threads = [
        threading.Thread(target=_client, args=(server, dbname, calls, seconds, barrier, results, i))
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(results) / seconds


# ---- memory ---------------------------------------------------------------------------------


def backend_memory(conn: psycopg.Connection) -> dict[str, int | None]:
    """The backend's memory contexts (bytes) and, when the server runs on this machine, its
    /proc status (kB): VmRSS counts the shared buffers it touched, RssAnon its private memory."""
    figures: dict[str, int | None] = {
        "memory_contexts_bytes": int(scalar(conn, "select sum(total_bytes) from pg_backend_memory_contexts")),
    }
    status = Path(f"/proc/{conn.info.backend_pid}/status")
    try:
        lines = status.read_text().splitlines()
    except OSError:
        return figures
    for line in lines:
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "VmHWM"):
            figures[f"{name}_kB"] = int(value.split()[0])
    return figures
