"""The benchmark's Citus mode (`python3 bench/run.py --citus HOST:PORT`): the corpus built on one
node (EMEM_PGHOST/EMEM_PGPORT, database emem_bench_<records>) and on a Citus cluster
(emem_bench_citus_<records>, distributed before the load), the bench questions timed on both in
the same shuffled rounds (beside.py), their pages compared, and where the coordinator's time goes
(citus.py). Instead of the one-node run: the floor, the hybrids, lanes, fresh connections and
throughput are not measured in this mode.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime
from typing import Any

from beside import beside_cells, beside_lines, exact_vector_pages
from citus import (
    Cluster,
    batch_payload,
    dearest_statements,
    exact_on_workers,
    parse_server,
    placements,
    put_records_functions,
    statement_costs,
    statements_summary,
    workers_of,
)
from corpus import Corpus
from db import Server, connection, emem_version, install_script_md5, modules_md5
from load import Target, space_id
from profiling import profile_question
from questions import Question, build_questions
from report import fmt, machine, machine_line, ratio
from run import FIND_ENVELOPE, LOOKUPS, MODES, add_edge_lane, corpus_ready, git_head, say, timed_pair, write_result
from run import load_lines as one_load_lines

CITUS, ONE = "citus", "one"  # the two sides' names in the tables
SHOWN_CELLS = 3  # the cells whose dearest statements are listed


def targets(args: argparse.Namespace) -> tuple[Target, Target]:
    one = Target(Server(), args.dbname, args.records, args.seed)
    coordinator = parse_server(args.citus)
    cluster = Cluster(workers_of(coordinator), args.citus_shards)
    return one, Target(coordinator, f"emem_bench_citus_{args.records}", args.records, args.seed, cluster=cluster)


def ready(target: Target, args: argparse.Namespace, script_md5: str | None) -> dict[str, Any]:
    load, reused = corpus_ready(target, args, script_md5)
    say(one_load_lines(load))
    with connection(target.server, target.dbname) as conn:
        added = add_edge_lane(conn, target, space_id(conn))
    return {"load": load, "corpus_reused": reused, "edge_lane_added": added}


def timed_beside(args: argparse.Namespace, questions: list[Question], one: Target, cluster: Target) -> dict[str, Any]:
    """Both sides' pages in the same shuffled rounds; then once more with exact vector lookups."""
    assert cluster.cluster is not None
    with connection(cluster.server, cluster.dbname) as on_cluster, connection(one.server, one.dbname) as on_one:
        corpus, figures = timed_pair({CITUS: on_cluster, ONE: on_one}, questions, args, "citus beside one node")
        say("citus beside one node: the pages again with exact vector lookups (index scans off on every node)")
        with exact_on_workers(cluster.server, cluster.cluster, cluster.dbname) as exact_cluster:
            exact = exact_vector_pages(
                beside_cells({CITUS: exact_cluster, ONE: on_one}, questions, MODES, FIND_ENVELOPE, args.page_size),
                CITUS,
                ONE,
            )
    return {"corpus": corpus, **figures, "exact_vector_pages": exact}


def where_time_goes(
    args: argparse.Namespace, questions: list[Question], one: Target, cluster: Target, cells: dict[str, Any]
) -> dict[str, Any]:
    """Page 1 of every question and mode profiled on both sides (profiling.py); the statements
    each finds runs, dearest first, for the cells of the highest ratio; and one statement's cost."""
    repetitions = 2 if args.quick else 3
    ratios = {key.rsplit("/", 1)[0]: row["ratio_p50"] or 0.0 for key, row in cells.items() if key.endswith("/p1")}
    worst = sorted(ratios, key=lambda key: -ratios[key])[:SHOWN_CELLS]
    profiles: dict[str, dict[str, Any]] = {}
    statements: dict[str, dict[str, Any]] = {}
    with connection(cluster.server, cluster.dbname) as on_cluster, connection(one.server, one.dbname) as on_one:
        sides = {CITUS: on_cluster, ONE: on_one}
        # auto_explain on a coordinator: with Citus's EXPLAIN of each remote task a find fails
        # (a worker cannot type the task's parameters, "could not determine data type of parameter
        # $2"), and with log_analyze it fails too ("cache lookup failed for type"): neither on the
        # cluster, so its statements are timed by the executor of the coordinator's plan alone.
        on_cluster.execute("set citus.explain_distributed_queries = off")
        for q in questions:
            for mode, with_vector in MODES.items():
                key = f"{q.kind}/{mode}"
                say(f"  profile {key}")
                profiles[key] = {
                    side: profile_question(conn, q, with_vector, args.page_size, repetitions, side == ONE)
                    for side, conn in sides.items()
                }
                params = (q.text, q.vector if with_vector else None, 1, args.page_size)
                statements[key] = {
                    side: statements_summary(dearest_statements(conn, FIND_ENVELOPE, params, repetitions))
                    for side, conn in sides.items()
                }
        costs = statement_costs(sides, 20 if args.quick else 100)
        say(f"  one put_records batch of {args.batch_size} records on each, rolled back")
        payload = batch_payload(Corpus(args.batch_size, args.seed + 1), args.batch_size)
        writes = {side: put_records_functions(conn, payload, space_id(conn)) for side, conn in sides.items()}
    return {
        "profiles": profiles,
        "statements": statements,
        "worst_cells": worst,
        "statement_costs": costs,
        "put_records": writes,
    }


def lookup_ms(profile: dict[str, Any], name: str) -> float | None:
    value = profile["parts"].get(name, {}).get("in_plpython_ms")
    return float(value) if value is not None else None


def where_lines(found: dict[str, Any], cells: dict[str, Any]) -> str:
    lines = [
        f"where the time goes (page 1, ms, {CITUS} / {ONE}): find p50 of the timed rounds; the lookups inside"
        " PL/Python (e_gather_explain); find's statements, their count and summed executor ms (auto_explain);"
        " each lookup inside PL/Python",
        f"{'question':<22}{'find':>15}{'lookups':>15}{'statements':>17}  lookups",
    ]
    for key, sides in found["profiles"].items():
        row = cells[f"{key}/p1"]
        counted = found["statements"][key]
        each = ", ".join(
            f"{name} {fmt(lookup_ms(sides[CITUS], name), 0)}/{fmt(lookup_ms(sides[ONE], name), 0)}"
            for name in LOOKUPS
            if name in sides[CITUS]["parts"] or name in sides[ONE]["parts"]
        )
        lines.append(
            f"{key:<22}{fmt(row[CITUS]['p50'], 7)} /{fmt(row[ONE]['p50'], 6)}"
            f"{fmt(sides[CITUS]['lookups_in_plpython_ms'], 7)} /{fmt(sides[ONE]['lookups_in_plpython_ms'], 6)}"
            f"{counted[CITUS]['statements']:>4}/{counted[ONE]['statements']:<3}"
            f"{fmt(counted[CITUS]['executor_ms'], 5)}/{fmt(counted[ONE]['executor_ms'], 0)}  {each}"
        )
    for key in found["worst_cells"]:
        lines.append(f"dearest statements on the cluster, {key} (executor ms, lookup, text):")
        for statement in found["statements"][key][CITUS]["dearest"]:
            lines.append(f"  {statement['ms']:>7.1f}  {statement['lookup']:<15} {statement['query']}")
    for side, batch in found["put_records"].items():
        functions = ", ".join(f"{f['function']} {f['calls']} calls {f['self_ms']:.0f} ms" for f in batch["functions"])
        lines.append(
            f"put_records batch on {side}, track_functions = all: {batch['batch_ms']:.0f} ms; by own time: {functions}"
        )
    lines.append(f"one statement, p50 ms ({CITUS} / {ONE}, ratio):")
    for name, sides in found["statement_costs"].items():
        cluster_ms, one_ms = sides[CITUS]["p50"], sides[ONE]["p50"]
        lines.append(f"  {name:<18}{cluster_ms:>7.2f} /{one_ms:>6.2f}{fmt(ratio(cluster_ms, one_ms), 7, 1)}")
    return "\n".join(lines)


def main_citus(args: argparse.Namespace, command: str) -> int:
    started = time.perf_counter()
    one, cluster = targets(args)
    head = git_head()
    with connection(one.server, "postgres") as admin:
        script_md5 = install_script_md5(admin)
    with connection(cluster.server, "postgres") as admin:
        if install_script_md5(admin) != script_md5:
            say("warning: the cluster's emem install script is not the one node's")
    sides = {ONE: ready(one, args, script_md5), CITUS: ready(cluster, args, script_md5)}
    with connection(one.server, one.dbname) as conn:
        questions = build_questions(conn, Corpus(args.records, args.seed))
        info = machine(conn)
        installed = {"version": emem_version(conn), "script_md5": script_md5, "modules_md5": modules_md5(conn)}
    with connection(cluster.server, cluster.dbname) as conn:
        shards = placements(conn)
        installed["cluster_modules_md5"] = modules_md5(conn)
    say(f"cluster: coordinator {cluster.server.host}:{cluster.server.port}, lanes on {shards}")
    for q in questions:
        say(f"  {q.kind:<13} {q.text!r}: terms {list(q.terms)}, full text {list(q.fulltext_terms)}")
    beside = timed_beside(args, questions, one, cluster)
    say("where the coordinator's time goes: every question's page 1 profiled on both")
    where = where_time_goes(args, questions, one, cluster, beside["cells"])
    info["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "mode": "citus beside one node",
        "records": args.records,
        "seed": args.seed,
        "page_size": args.page_size,
        "repetitions": args.repetitions,
        "machine": info,
        "emem_installed": installed,
        "git_head_at_start": head,
        "one_node": {"server": f"{one.server.host}:{one.server.port}", "database": one.dbname, **sides[ONE]},
        "citus": {
            "coordinator": f"{cluster.server.host}:{cluster.server.port}",
            "workers": [f"{w.host}:{w.port}" for w in cluster.cluster.workers] if cluster.cluster else [],
            "database": cluster.dbname,
            "placements": shards,
            **sides[CITUS],
        },
        "questions": [vars(q) | {"vector": "(near a cluster centre)"} for q in questions],
        "beside": beside,
        "where_time_goes": where,
        "duration_seconds": round(time.perf_counter() - started, 1),
    }
    path = write_result(result, "-citus")
    say("")
    say("citus = the coordinator and its workers, one = one node")
    say(beside_lines(beside | {"releases": [CITUS, ONE], "load": sides[ONE]["load"]}, sides[CITUS]["load"]))
    say("")
    say(where_lines(where, beside["cells"]))
    say(f"\nmachine: {machine_line(info)}; load average {info['load_average_1m']} -> {info['load_average_1m_end']}")
    say(f"reproduce: {command}   (run took {result['duration_seconds']:.0f} s)")
    say(f"figures: {path}")
    return 0
