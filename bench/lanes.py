"""Another lane's edges, records and windows against an agent's finds and reads.

A lane of its own (`ledger`, EDGE_LANE_RECORDS records with vectors near the corpus's clusters)
holds EDGE_LANE_EDGES edges whose relation, `reconciled`, a question names. Two agents read lane
`ops` only, one under `page_filter` (the default) and one under `strict` (the owner's setting). Each
agent's find of "what was reconciled about the <rare tag>?" is timed against the same question
naming a relation no edge has ("pondered"): the ratio is what that lane's edges cost the agent.
A second lane (`archive`) holds 100,000 conversation turns and 10,000 windows that the question's
words and vector meet (issue 28, items 2 and 6; below). Both built once beside the corpus and kept
with it.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import numpy as np
import psycopg
from corpus import DIMENSION, EPOCH, Corpus
from db import Server, scalar, vacuum_analyze_emem, vector_text
from measure import Cell, percentiles
from psycopg import sql
from writes import EdgeRow, Writes, require_derived_rows

EDGE_LANE = "ledger"
EDGE_LANE_RECORDS = 20_000
EDGE_LANE_EDGES = 100_000
RELATION = "reconciled"  # its edges' relation: the question's "reconciled" (lemma reconcile) names it
NO_RELATION = "pondered"  # no tag, edge or text holds it
AGENT_LANE = "ops"
AGENTS = {"page_filter": "bench_ops_page_filter", "strict": "bench_ops_strict"}


def ensure_edge_lane(conn: psycopg.Connection, corpus: Corpus, space: int, writes: Writes) -> dict[str, Any] | None:
    """Adds the lane with its records and edges once (edges as the release wants them written);
    what that took, or None when it is there."""
    if scalar(conn, "select exists (select from emem.lanes where lane_name = %s)", (EDGE_LANE,)):
        return None
    started = time.perf_counter()
    conn.execute("select emem.create_lane(%s)", (EDGE_LANE,))
    rng = np.random.default_rng(corpus.seed + 7)
    clusters = rng.integers(0, corpus.clusters, EDGE_LANE_RECORDS)
    noise = rng.standard_normal((EDGE_LANE_RECORDS, DIMENSION)).astype(np.float32) * (0.7 / np.sqrt(DIMENSION))
    vectors = corpus.centres[clusters] + noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids: list[int] = []
    for start in range(0, EDGE_LANE_RECORDS, 1000):
        items = [
            {
                "kind": "note",
                "lane": EDGE_LANE,
                "content": f"Ledger entry {start + n}: carried forward.",
                "vector": vector_text(vectors[start + n]),
            }
            for n in range(min(1000, EDGE_LANE_RECORDS - start))
        ]
        rows = conn.execute(
            "select record_id from emem.put_records(%s::jsonb, %s) order by item_number", (json.dumps(items), space)
        ).fetchall()
        ids += [row[0] for row in rows]
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < EDGE_LANE_EDGES:
        start, end = rng.integers(0, EDGE_LANE_RECORDS, 2)
        if start != end:
            pairs.add((ids[start], ids[end]))
    edges_started = time.perf_counter()
    writes.edges(conn, [EdgeRow(start, end, RELATION, {}) for start, end in sorted(pairs)])
    edges_seconds = time.perf_counter() - edges_started
    vacuum_analyze_emem(conn)
    seconds = time.perf_counter() - started
    return {
        "lane": EDGE_LANE,
        "records": EDGE_LANE_RECORDS,
        "edges": EDGE_LANE_EDGES,
        "edges_by": writes.edges_by,
        "edges_per_second": round(EDGE_LANE_EDGES / edges_seconds),
        "seconds": round(seconds, 1),
        "derived_problems": require_derived_rows(conn, writes),
    }


def ensure_agents(conn: psycopg.Connection) -> None:
    """Roles bound to profiles that read lane `ops`: one under `page_filter`, one strict."""
    for isolation, role in AGENTS.items():
        if not scalar(conn, "select exists (select from pg_roles where rolname = %s)", (role,)):
            conn.execute(sql.SQL("create role {} nologin").format(sql.Identifier(role)))
        if not scalar(conn, "select exists (select from emem.agent_profiles where profile_name = %s)", (role,)):
            conn.execute("select emem.create_agent_profile(%s, array[%s])", (role, AGENT_LANE))
        conn.execute("select emem.bind_role(%s, %s)", (role, role))
        conn.execute("select emem.set_agent_setting(%s, 'emem.lane_isolation', %s)", (role, isolation))


def agent_connection(server: Server, dbname: str, role: str) -> psycopg.Connection:
    conn = server.connect(dbname)
    conn.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
    return conn


def lane_cells(
    connections: dict[str, psycopg.Connection], rare_tag: str, vector: str, query: str, page_size: int
) -> list[Cell]:
    """Per isolation, with a vector and degraded: the question naming the lane's relation and the
    one naming none."""
    return [
        Cell(
            f"{isolation}/{mode}/{word}",
            conn,
            query,
            (f"what was {word} about the {rare_tag}?", vector if mode == "vector" else None, 1, page_size),
            [],
        )
        for isolation, conn in connections.items()
        for mode in ("vector", "degraded")
        for word in (RELATION, NO_RELATION)
    ]


def lane_summary(cells: list[Cell]) -> dict[str, dict[str, Any]]:
    """p50 of each cell and, per isolation and mode, the ratio of the heavy question to the plain one."""
    medians = {cell.key: percentiles(cell.times)["p50"] for cell in cells}
    rows: dict[str, dict[str, Any]] = {}
    for key, median in medians.items():
        isolation, mode, word = key.split("/")
        row = rows.setdefault(f"{isolation}/{mode}", {})
        row["heavy" if word == RELATION else "plain"] = median
        row[f"totals_{'heavy' if word == RELATION else 'plain'}"] = envelope_totals(cells, key)
    for row in rows.values():
        row["ratio"] = round(row["heavy"] / row["plain"], 2) if row.get("plain") else None
    return rows


def envelope_totals(cells: list[Cell], key: str) -> tuple[Any, Any, int] | None:
    cell = next(cell for cell in cells if cell.key == key)
    if not cell.first_rows:
        return None
    found = cell.first_rows[0][0]
    return found.get("total_candidates"), found.get("totals_exact"), len(found.get("rows", []))


def lane_lines(summary: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"another lane's {EDGE_LANE_EDGES:,} edges against an agent reading lane {AGENT_LANE} (page 1, p50 ms):"
        f" 'what was {RELATION} about the <rare tag>?' (the lane {EDGE_LANE}'s relation) against"
        f" 'what was {NO_RELATION} ...' (no edge); totals (candidates, exact, rows)",
        f"{'isolation/vector':<18}{'heavy':>8}{'plain':>8}{'ratio':>7}  totals heavy / plain",
    ]
    for key, row in summary.items():
        lines.append(
            f"{key:<18}{row.get('heavy', 0):8.1f}{row.get('plain', 0):8.1f}{row.get('ratio') or 0:7.2f}"
            f"  {row.get('totals_heavy')} / {row.get('totals_plain')}"
        )
    return "\n".join(lines)


# ---- another lane's records and windows (issue 28, items 2 and 6) -----------------------------
#
# A lane of its own (`archive`) holds ARCHIVE_THREADS conversations of ARCHIVE_TURNS turns, each
# turn tagged `audit` and naming Vorkosigan in its content, with vectors near one cluster of the
# corpus, and a window over every ARCHIVE_WINDOW turns with a vector near the same centre. The heavy
# question names both ("audited": its lemma `audit` is a tag lookup term; "Vorkosigan", unknown to
# WordNet, is a full-text term), so every lookup meets the lane's 100,000 records; the plain
# question has the same shape with words nothing holds. Both are asked with the same vector near
# that cluster, and degraded. Under strict isolation (item 2) reads by tag, the timeline and
# explain are timed too, heavy against plain; under page_filter (item 6) only find.

ARCHIVE_LANE = "archive"
ARCHIVE_THREADS = 1_000
ARCHIVE_TURNS = 100
ARCHIVE_WINDOW = 10  # turns per window: 10 windows a thread, 10,000 in all
ARCHIVE_TAG = "audit"
ARCHIVE_NAME = "Vorkosigan"  # unknown to WordNet: a full-text term
ARCHIVE_CLUSTER = 11  # the centre of the lane's vectors and of the questions' vector
ELSEWHERE_CLUSTER = (
    9  # a cluster of about as many ops records (216 against 227 at 100k), with none of the lane's vectors
)
NO_TAG = "pondered"  # no tag, label or text holds it (nor "ponder")
NO_NAME = "Quellenbar"
HEAVY_QUESTION = "what was audited by " + ARCHIVE_NAME + " about the {tag}?"
PLAIN_QUESTION = "what was " + NO_TAG + " by " + NO_NAME + " about the {tag}?"
ITEM_2 = 1.5  # strict: reads only readable lanes' index entries
ITEM_6 = 2.0  # page_filter: bounded reads
TIMELINE_FROM = "2023-01-01T00:00:00+00:00"
EXPLAIN = "select emem.e_gather_explain(%s, %s::vector, %s, %s)"
WITH_ALL_TAGS = "select * from emem.records_with_all_tags(%s::text[])"
TIMELINE = "select * from emem.e_timeline(%s::timestamptz, null, 1, %s, null, %s::text[])"


def archive_supported(conn: psycopg.Connection) -> bool:
    """Whether the release has the API the lane is written with."""
    return bool(
        scalar(
            conn,
            """select to_regprocedure('emem.put_records(jsonb, integer)') is not null
                  and to_regprocedure('emem.put_window(bigint[], public.vector, integer)') is not null""",
        )
    )


def archive_vectors(corpus: Corpus, count: int, rng: np.random.Generator) -> np.ndarray:
    noise = rng.standard_normal((count, DIMENSION)).astype(np.float32) * (0.7 / np.sqrt(DIMENSION))
    vectors = corpus.centres[ARCHIVE_CLUSTER % corpus.clusters] + noise
    normed: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return normed


def archive_turn(thread: int, position: int, vector: np.ndarray) -> dict[str, Any]:
    """One conversation turn of the lane (no figure in its content: the corpus's questions search figures)."""
    day, minutes = thread * 730 // ARCHIVE_THREADS, 540 + position * 5
    return {
        "kind": "conversation",
        "lane": ARCHIVE_LANE,
        "content": f"Archive turn: the ledger was audited by {ARCHIVE_NAME}, every entry checked and signed.",
        "tags": [ARCHIVE_TAG],
        "thread_id": f"archive-{thread}",
        "thread_position": position,
        "occurred_at": (EPOCH + timedelta(days=day, minutes=minutes)).isoformat(),
        "metadata": {"cluster": ARCHIVE_CLUSTER},
        "vector": vector_text(vector),
    }


def ensure_archive_lane(conn: psycopg.Connection, corpus: Corpus, space: int, writes: Writes) -> dict[str, Any] | None:
    """Adds the lane with its records (put_records, batches of 1,000) and windows (put_window, in a
    pipeline) once; what that took, or None when it is there."""
    if scalar(conn, "select exists (select from emem.lanes where lane_name = %s)", (ARCHIVE_LANE,)):
        return None
    started = time.perf_counter()
    conn.execute("select emem.create_lane(%s)", (ARCHIVE_LANE,))
    rng = np.random.default_rng(corpus.seed + 11)
    records = ARCHIVE_THREADS * ARCHIVE_TURNS
    vectors = archive_vectors(corpus, records, rng)
    ids: list[int] = []
    records_seconds = 0.0
    threads_per_batch = max(1, 1000 // ARCHIVE_TURNS)
    for first in range(0, ARCHIVE_THREADS, threads_per_batch):
        items = [
            archive_turn(thread, position, vectors[thread * ARCHIVE_TURNS + position - 1])
            for thread in range(first, min(first + threads_per_batch, ARCHIVE_THREADS))
            for position in range(1, ARCHIVE_TURNS + 1)
        ]
        batch_started = time.perf_counter()
        rows = conn.execute(
            "select record_id from emem.put_records(%s::jsonb, %s) order by item_number", (json.dumps(items), space)
        ).fetchall()
        records_seconds += time.perf_counter() - batch_started
        ids += [row[0] for row in rows]
    window_vectors = archive_vectors(corpus, ARCHIVE_THREADS * (ARCHIVE_TURNS // ARCHIVE_WINDOW), rng)
    calls = [
        (
            ids[thread * ARCHIVE_TURNS + start : thread * ARCHIVE_TURNS + start + ARCHIVE_WINDOW],
            vector_text(vector),
            space,
        )
        for (thread, start), vector in zip(
            ((t, s) for t in range(ARCHIVE_THREADS) for s in range(0, ARCHIVE_TURNS, ARCHIVE_WINDOW)),
            window_vectors,
            strict=True,
        )
    ]
    windows_started = time.perf_counter()
    with conn.cursor() as cursor:
        cursor.executemany("select emem.put_window(%s, %s::vector, %s)", calls)
    windows_seconds = time.perf_counter() - windows_started
    vacuum_analyze_emem(conn)
    return {
        "lane": ARCHIVE_LANE,
        "records": records,
        "threads": ARCHIVE_THREADS,
        "windows": len(calls),
        "cluster": ARCHIVE_CLUSTER,
        "records_per_second": round(records / records_seconds),
        "put_window_per_second": round(len(calls) / windows_seconds),
        "seconds": round(time.perf_counter() - started, 1),
        "derived_problems": require_derived_rows(conn, writes),
    }


def archive_question_vectors(corpus: Corpus) -> tuple[str, str]:
    """The questions' vector, near the centre of the lane's vectors (a cluster lane ops holds too),
    and one near a cluster the lane has nothing in."""
    rng = np.random.default_rng(corpus.seed + 12)
    near = vector_text(corpus.near(ARCHIVE_CLUSTER % corpus.clusters, rng))
    return near, vector_text(corpus.near(ELSEWHERE_CLUSTER % corpus.clusters, rng))


def archive_cells(
    connections: dict[str, psycopg.Connection],
    rare_tag: str,
    vectors: tuple[str, str],
    find: str,
    page_size: int,
) -> list[Cell]:
    """Per isolation, with the vector and degraded: find of the heavy question and the plain one;
    then the plain question with the vector near the lane's against one near a cluster the lane has
    nothing in (what the lane's vectors cost); for the strict agent also records_with_all_tags, the
    timeline by tag, and explain."""
    vector, elsewhere = vectors
    questions = {"heavy": HEAVY_QUESTION.format(tag=rare_tag), "plain": PLAIN_QUESTION.format(tag=rare_tag)}
    tags = {"heavy": ARCHIVE_TAG, "plain": NO_TAG}
    cells = [
        Cell(
            f"find/{isolation}/{mode}/{weight}",
            conn,
            find,
            (question, vector if mode == "vector" else None, 1, page_size),
            [],
        )
        for isolation, conn in connections.items()
        for mode in ("vector", "degraded")
        for weight, question in questions.items()
    ]
    cells += [
        Cell(
            f"find/{isolation}/vector_near_lane_vs_elsewhere/{weight}",
            conn,
            find,
            (questions["plain"], near, 1, page_size),
            [],
        )
        for isolation, conn in connections.items()
        for weight, near in (("heavy", vector), ("plain", elsewhere))
    ]
    strict = connections["strict"]
    for weight in ("heavy", "plain"):
        cells += [
            Cell(f"reads/records_with_all_tags/{weight}", strict, WITH_ALL_TAGS, ([tags[weight]],), []),
            Cell(f"reads/timeline/{weight}", strict, TIMELINE, (TIMELINE_FROM, page_size, [tags[weight]]), []),
        ]
        cells += [
            Cell(
                f"reads/explain_{mode}/{weight}",
                strict,
                EXPLAIN,
                (questions[weight], vector if mode == "vector" else None, 1, page_size),
                [],
            )
            for mode in ("vector", "degraded")
        ]
    return cells


def timing_keys(value: Any, path: str = "") -> list[str]:
    """Where a JSON answer holds timings: keys named milliseconds, or ending in _ms."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if key == "milliseconds" or str(key).endswith("_ms") or "millisecond" in str(key):
                found.append(here)
            found += timing_keys(item, here)
    elif isinstance(value, list):
        for number, item in enumerate(value):
            found += timing_keys(item, f"{path}[{number}]")
    return found


def archive_summary(cells: list[Cell]) -> dict[str, Any]:
    """p50 of heavy and plain per row, their ratio and whether the item's bound holds; the rows each
    answered; and which timings explain gave the strict agent."""
    rows: dict[str, dict[str, Any]] = {}
    explain_timings: dict[str, list[str]] = {}
    for cell in cells:
        section, *name, weight = cell.key.split("/")
        row = rows.setdefault(f"{section}/{'/'.join(name)}", {})
        row[weight] = percentiles(cell.times)["p50"]
        row[f"answer_{weight}"] = answer_size(cell)
        if "explain" in cell.key and cell.first_rows:
            explain_timings[cell.key] = timing_keys(cell.first_rows[0][0])
    for key, row in rows.items():
        bound = ITEM_6 if "/page_filter/" in key else ITEM_2
        row["ratio"] = round(row["heavy"] / row["plain"], 2) if row.get("plain") else None
        row["item"] = 6 if bound == ITEM_6 else 2
        row["bound"] = bound
        row["holds"] = row["ratio"] is not None and row["ratio"] <= bound
    return {
        "lane": ARCHIVE_LANE,
        "heavy_question": HEAVY_QUESTION,
        "plain_question": PLAIN_QUESTION,
        "rows": rows,
        "explain_timings_to_strict": explain_timings,
    }


def answer_size(cell: Cell) -> Any:
    """What a cell answered: a find's totals (candidates, exact, rows), else its row count."""
    if not cell.first_rows:
        return 0
    if cell.key.startswith("find/"):
        found = cell.first_rows[0][0]
        return [found.get("total_candidates"), found.get("totals_exact"), len(found.get("rows", []))]
    if "explain" in cell.key:
        return cell.first_rows[0][0].get("total_candidates")
    return len(cell.first_rows)


def archive_lines(summary: dict[str, Any]) -> str:
    lines = [
        f"another lane's {ARCHIVE_THREADS * ARCHIVE_TURNS:,} records and"
        f" {ARCHIVE_THREADS * ARCHIVE_TURNS // ARCHIVE_WINDOW:,} windows (lane {ARCHIVE_LANE}, tag"
        f" {ARCHIVE_TAG!r}, content naming {ARCHIVE_NAME}, vectors near cluster {ARCHIVE_CLUSTER}) against an"
        f" agent reading lane {AGENT_LANE} (p50 ms): {summary['heavy_question']!r} against"
        f" {summary['plain_question']!r}, the same vector; strict reads by tag {ARCHIVE_TAG!r} against {NO_TAG!r}",
        f"{'row':<46}{'heavy':>8}{'plain':>8}{'ratio':>7}  {'bound':<19}answers heavy / plain",
    ]
    for key, row in summary["rows"].items():
        verdict = f"item {row['item']} <={row['bound']}x {'yes' if row['holds'] else 'NO'}"
        lines.append(
            f"{key:<46}{row.get('heavy', 0):8.1f}{row.get('plain', 0):8.1f}{row.get('ratio') or 0:7.2f}"
            f"  {verdict:<19}{row.get('answer_heavy')} / {row.get('answer_plain')}"
        )
    for key, keys in summary["explain_timings_to_strict"].items():
        lines.append(f"explain to the strict agent, {key}: " + (f"timings at {keys}" if keys else "no timings"))
    return "\n".join(lines)
