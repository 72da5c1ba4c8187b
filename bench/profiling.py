"""Where e_gather_find spends its time, measured on the installed extension.

- e_gather_explain reports each lookup's milliseconds inside PL/Python: the statement plus the
  transfer of its rows into Python objects.
- auto_explain (loaded in the session, log_level = notice, log_nested_statements, log_analyze
  without per-node timing) reports every statement find runs, with its executor time and plan.
  The difference between the two is the cost of PL/Python's row transfer and Candidate building.
- What remains of a find's time beyond its lookups is the analysis, the settings, the merge,
  the detail fetch and the JSON.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from typing import Any

import psycopg
from db import Params, emem_module, timed
from questions import Question

DURATION = re.compile(r"duration: ([0-9.]+) ms\s+plan:\s*(.*)", re.S)
VECTOR_LITERAL = re.compile(r"\[[-0-9.,e]{200,}\]")


@dataclass(frozen=True)
class Statement:
    milliseconds: float
    query: str
    plan: dict[str, Any]

    @property
    def lookup(self) -> str:
        """Which part of find ran it, read from the statement's text."""
        text = self.query
        if any(table in text for table in ("record_tags", "tag_vocabulary", "edge_labels")):
            return "tags"
        if "content_search" in text:
            return "fulltext"
        if "emem.windows" in text and "order by distance" in text:
            return "window_vectors"
        if "emem.record_vectors" in text and "order by distance" in text:
            return "record_vectors"
        if "emem.records" in text and "any" in text:
            return "details"
        return "other"


def plan_rows(plan: dict[str, Any]) -> int:
    return int(plan.get("Plan", {}).get("Actual Rows", 0))


def nested_statements(conn: psycopg.Connection, query: str, params: Params, analyze: bool) -> list[Statement]:
    """Runs `query` with auto_explain reporting every nested statement to this client: its
    executor time, and with `analyze` the plan's actual rows (per-node timing stays off)."""
    notices: list[str] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        if diagnostic.message_primary and diagnostic.message_primary.startswith("duration:"):
            notices.append(diagnostic.message_primary)

    conn.execute("load 'auto_explain'")
    for setting, value in (
        ("log_min_duration", "0"),
        ("log_analyze", "on" if analyze else "off"),
        ("log_timing", "off"),
        ("log_buffers", "on"),
        ("log_nested_statements", "on"),
        ("log_format", "json"),
        ("log_level", "notice"),
    ):
        conn.execute(f"set auto_explain.{setting} = {value}")
    conn.add_notice_handler(keep)
    try:
        timed(conn, query, params)
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("set auto_explain.log_min_duration = -1")
    statements = []
    for notice in notices:
        match = DURATION.match(notice)
        if match:
            plan = json.loads(match.group(2))
            statements.append(Statement(float(match.group(1)), plan.get("Query Text", ""), plan))
    return [s for s in statements if "e_gather" not in s.query and "gather_for_role" not in s.query]


def explain_lookups(
    conn: psycopg.Connection, question: Question, with_vector: bool, repetitions: int
) -> dict[str, dict[str, Any]]:
    """Median per-lookup ms and candidates as e_gather_explain reports them (inside PL/Python)."""
    samples: dict[str, list[float]] = {}
    candidates: dict[str, int] = {}
    for _ in range(repetitions):
        _, rows = timed(
            conn,
            "select emem.e_gather_explain(%s, %s::vector)",
            (question.text, question.vector if with_vector else None),
        )
        for name, lookup in rows[0][0]["lookups"].items():
            samples.setdefault(name, []).append(lookup["milliseconds"])
            candidates[name] = lookup["candidates"]
    return {
        name: {"in_plpython_ms": round(statistics.median(times), 3), "candidates": candidates[name]}
        for name, times in samples.items()
    }


def short_plan(plan: dict[str, Any]) -> str:
    """The plan tree as indented lines: node, relation or index, rows and loops."""
    lines: list[str] = []

    def walk(node: dict[str, Any], depth: int) -> None:
        target = node.get("Index Name") or node.get("Relation Name") or ""
        lines.append(
            f"{'  ' * depth}{node['Node Type']} {target} rows={node.get('Actual Rows')}"
            f" loops={node.get('Actual Loops')}".rstrip()
        )
        for child in node.get("Plans", []):
            walk(child, depth + 1)

    walk(plan.get("Plan", {}), 0)
    return "\n".join(lines)


def statement_parts(
    conn: psycopg.Connection, query: str, params: Params, repetitions: int, analyze: bool = True
) -> dict[str, dict[str, Any]]:
    """Per part of find: median executor ms over `repetitions` runs, and rows and plans of one
    run with analyze (unless `analyze` is false: on a Citus coordinator auto_explain's analyze
    fails the find, citus_bench.py)."""
    samples: dict[str, list[float]] = {}
    for _ in range(repetitions):
        totals: dict[str, float] = {}
        for statement in nested_statements(conn, query, params, analyze=False):
            totals[statement.lookup] = totals.get(statement.lookup, 0.0) + statement.milliseconds
        for name, milliseconds in totals.items():
            samples.setdefault(name, []).append(milliseconds)
    parts: dict[str, dict[str, Any]] = {
        name: {"sql_ms": round(statistics.median(times), 3), "rows": 0, "statements": 0, "plans": []}
        for name, times in samples.items()
    }
    for statement in nested_statements(conn, query, params, analyze=True) if analyze else []:
        part = parts.setdefault(statement.lookup, {"sql_ms": None, "rows": 0, "statements": 0, "plans": []})
        part["rows"] += plan_rows(statement.plan)
        part["statements"] += 1
        part["estimated_cost"] = statement.plan.get("Plan", {}).get("Total Cost")
        part["jit"] = part.get("jit", False) or "JIT" in statement.plan
        if statement.lookup != "other":
            part["plans"].append(short_plan(statement.plan))
    return parts


def profile_question(
    conn: psycopg.Connection,
    question: Question,
    with_vector: bool,
    page_size: int,
    repetitions: int,
    analyze: bool = True,
) -> dict[str, Any]:
    lookups = explain_lookups(conn, question, with_vector, repetitions)
    query = "select emem.e_gather_find_envelope(%s, %s::vector, 1, %s)"
    params = (question.text, question.vector if with_vector else None, page_size)
    timed(conn, query, params)  # warm
    for name, part in statement_parts(conn, query, params, repetitions, analyze).items():
        entry = lookups.setdefault(name, {})
        entry.update(part)
        if "in_plpython_ms" in entry and part["sql_ms"] is not None:
            entry["plpython_overhead_ms"] = round(entry["in_plpython_ms"] - part["sql_ms"], 3)
    in_lookups = sum(entry.get("in_plpython_ms", 0.0) for entry in lookups.values())
    phases = plpython_phases(conn, question, with_vector, page_size, repetitions)
    return {"lookups_in_plpython_ms": round(in_lookups, 3), "parts": lookups, "phases": phases}


# ---- inside PL/Python ---------------------------------------------------------------------------

PHASES_BODY = """
import cProfile, io, json, pstats, time
import importlib
gather_module = importlib.import_module(MODULE + ".find")
VERSION = importlib.import_module(MODULE + "._version").VERSION
backend = importlib.import_module(MODULE + ".entry").backend

p = json.loads(PARAMS)
gather = gather_module.Gather(backend(GD, plpy, VERSION))
phases = {}
patched = []

def wrap(owner, name):
    original = getattr(owner, name, None)
    if original is None:
        return
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            phases[name] = phases.get(name, 0.0) + (time.perf_counter() - started) * 1000
    setattr(owner, name, timed)
    patched.append((owner, name, original))

def find():
    return gather.find(p["question"], p["vector"], 1, p["page_size"])

for _ in range(2):
    find()
for name in ("caller", "request", "active_space", "unit_vector", "run_lookups", "rows"):
    wrap(gather, name)
for name in ("interleave", "bounded_totals"):
    wrap(gather_module, name)
try:
    started = time.perf_counter()
    for _ in range(p["repetitions"]):
        result = find()
        json_started = time.perf_counter()
        gather_module.envelope_json(result)
        phases["envelope_json"] = phases.get("envelope_json", 0.0) + (time.perf_counter() - json_started) * 1000
    total = (time.perf_counter() - started) * 1000
finally:
    for owner, name, original in patched:
        setattr(owner, name, original)
profiler = cProfile.Profile()
profiler.enable()
for _ in range(p["repetitions"]):
    find()
profiler.disable()
out = io.StringIO()
pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
n = p["repetitions"]
plpy.notice("emem-bench-phases " + json.dumps({
    "total_ms": round(total / n, 3),
    "phases_ms": {k: round(v / n, 3) for k, v in phases.items()},
    "cprofile_top_by_tottime": out.getvalue().split("ncalls", 1)[-1],
}))
"""


def plpython_phases(
    conn: psycopg.Connection, question: Question, with_vector: bool, page_size: int, repetitions: int
) -> dict[str, Any]:
    """find's phases timed inside the server (the database's emem modules, run from a DO block),
    and the top of a cProfile of find: PL/Python's own costs, which auto_explain cannot see."""
    params = json.dumps(
        {
            "question": question.text,
            "vector": question.vector if with_vector else None,
            "page_size": page_size,
            "repetitions": repetitions,
        }
    )
    body = PHASES_BODY.replace("MODULE", repr(emem_module(conn))).replace("PARAMS", repr(params))
    if "$phases$" in body:
        raise ValueError("the profile's parameters contain its quoting tag")
    found: list[str] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        message = diagnostic.message_primary or ""
        if message.startswith("emem-bench-phases "):
            found.append(message.removeprefix("emem-bench-phases "))

    conn.add_notice_handler(keep)
    try:
        conn.execute(f"do language plpython3u $phases${body}$phases$")
    except psycopg.Error as error:
        return {"error": f"{type(error).__name__}: {error}".strip()}
    finally:
        conn.remove_notice_handler(keep)
    phases: dict[str, Any] = json.loads(found[0]) if found else {"error": "no result"}
    return phases
