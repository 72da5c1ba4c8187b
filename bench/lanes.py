"""Another lane's edges against an agent's finds.

A lane of its own (`ledger`, EDGE_LANE_RECORDS records with vectors near the corpus's clusters)
holds EDGE_LANE_EDGES edges whose relation, `reconciled`, a question names. Two agents read lane
`ops` only, one under `page_filter` (the default) and one under `strict` (the owner's setting). Each
agent's find of "what was reconciled about the <rare tag>?" is timed against the same question
naming a relation no edge has ("pondered"): the ratio is what that lane's edges cost the agent.
Built once beside the corpus and kept with it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import psycopg
from corpus import DIMENSION, Corpus
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
