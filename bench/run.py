"""emem's benchmark: e_gather_find against the floor (its four lookups as bare SQL) and a classic
two-way hybrid (full text + pgvector, reciprocal rank fusion), on one synthetic corpus.

    python3 bench/run.py                        # 100k records (builds emem_bench_100000 once)
    python3 bench/run.py --records 10000 --quick  # smoke run, under two minutes
    make bench BENCH_ARGS="--records 1000000"
    python3 bench/run.py --citus 127.0.0.1:5470  # a Citus cluster beside one node (citus_bench.py)

Prints the tables and writes every figure to bench/results/<timestamp>-<records>.json.
Not a test: nothing here fails on a slow figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from beside import beside_cells, beside_lines, compare, exact_vector_pages, same_corpus
from corpus import DIMENSION, Corpus
from db import Server, connection, emem_version, install_script_md5, modules_md5, scalar
from floor import ITERATIVE_SCAN, Floor, TagSchema, WeightedTerms, create_hybrids, hybrid_queries
from lanes import (
    AGENTS,
    agent_connection,
    archive_cells,
    archive_lines,
    archive_question_vectors,
    archive_summary,
    archive_supported,
    ensure_agents,
    ensure_archive_lane,
    ensure_edge_lane,
    lane_cells,
    lane_lines,
    lane_summary,
)
from load import Target, build, installed_release, space_id, stored_corpus, update_extension
from measure import Cell, backend_memory, fresh_connections, latency, percentiles, throughput
from profiling import profile_question
from questions import Question, build_questions
from report import machine, machine_line, summarise, tables
from writes import PREVIOUS

RESULTS = Path(__file__).resolve().parent / "results"
MODES = {"vector": True, "degraded": False}
FIND_ENVELOPE = "select emem.e_gather_find_envelope(%s, %s::vector, %s, %s)"
# The recommended opt-in profile, timed beside the default profile on its own connection.
EXACT_FIRST_PROFILE = next(
    line.split("=", 1)[1].strip().strip("'")
    for line in (Path(__file__).resolve().parent.parent / "control" / "exact_first.conf").read_text().splitlines()
    if line.startswith("emem.pipeline_profile")
)
FRESH_KINDS = ("code_only", "mixed")  # the cheapest question, and the dearest
LOOKUPS = ("tags", "fulltext", "record_vectors", "window_vectors")
FIND_TABLE = "select * from emem.e_gather_find(%s, %s::vector, %s, %s)"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000, help="corpus size (default 100000)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--rebuild", action="store_true", help="build the corpus again even when it is stored")
    parser.add_argument(
        "--reuse-corpus",
        action="store_true",
        help="reuse a stored corpus of the same size and seed even when this release's install script changed"
        " since it was built (while developing: its tables must be the same)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and shorter runs (smoke run)")
    parser.add_argument("--repetitions", type=int, help="timed rounds per cell (default 40, quick 8)")
    parser.add_argument("--fresh-connections", type=int, help="new connections timed (default 10, quick 3)")
    parser.add_argument("--throughput-seconds", type=float, help="per client count (default 10, quick 3)")
    parser.add_argument("--page-size", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=1000, help="records per put_records call")
    parser.add_argument(
        "--load-with-indexes",
        action="store_true",
        help="keep the HNSW indexes during the load (default: drop, load, build)",
    )
    parser.add_argument("--maintenance-work-mem", default=None, help="for the index build (default 1GB, 4GB at 1M)")
    parser.add_argument("--dbname", help="default emem_bench_<records>")
    parser.add_argument("--no-profile", action="store_true", help="skip the auto_explain profile of find")
    parser.add_argument(
        "--beside",
        choices=sorted(PREVIOUS),
        help="also build (or reuse) the corpus with this previous release in database <dbname>_<release> and"
        " time both releases' finds in the same rounds, comparing their pages",
    )
    parser.add_argument(
        "--citus",
        metavar="HOST:PORT",
        help="a Citus cluster's coordinator: build the corpus there too (database emem_bench_citus_<records>,"
        " distributed before the load) and time its finds beside one node's in the same rounds, instead of"
        " the one-node run",
    )
    parser.add_argument("--citus-shards", type=int, help="emem.distribute(shard_count) (default citus.shard_count)")
    args = parser.parse_args(argv)
    args.repetitions = args.repetitions or (8 if args.quick else 40)
    args.fresh_connections = args.fresh_connections or (3 if args.quick else 10)
    args.throughput_seconds = args.throughput_seconds or (3.0 if args.quick else 10.0)
    args.maintenance_work_mem = args.maintenance_work_mem or ("4GB" if args.records >= 500_000 else "1GB")
    args.dbname = args.dbname or f"emem_bench_{args.records}"
    return args


def say(message: str) -> None:
    print(message, flush=True)


def corpus_ready(target: Target, args: argparse.Namespace, script_md5: str | None) -> tuple[dict[str, Any], bool]:
    """The load report: of the stored corpus when it matches (size, seed and the installed
    extension script, after updating an older release in place; a previous release's corpus
    when it is still at that release), else of a new load."""
    stored = None if args.rebuild else stored_corpus(target)
    reusable = False
    if stored is not None and target.release is not None:  # a shipped release: its scripts do not change
        reusable = installed_release(target) == target.release
    elif stored is not None:
        updated_from = update_extension(target, script_md5)
        if updated_from is not None:
            say(f"updated emem in {target.dbname} from {updated_from} by ALTER EXTENSION emem UPDATE")
            stored = stored | {"extension_script_md5": script_md5}
        reusable = stored.get("extension_script_md5") == script_md5 or args.reuse_corpus
    if stored is not None and reusable:
        say(f"reusing {target.dbname}: {target.records} records, seed {target.seed} (--rebuild to load again)")
        return stored, True
    say(
        f"building {target.dbname}: {target.records} records, seed {target.seed}, emem {target.release or 'installed'}"
        " (none stored, or built with another emem install script or release)"
    )
    load = build(target, args.batch_size, args.load_with_indexes, args.maintenance_work_mem, script_md5)
    return load, False


def load_lines(load: dict[str, Any]) -> str:
    builds = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in load["index_build_seconds"].items())
    derived = load.get("derived_problems")
    return "\n".join(
        [
            f"load (emem {load.get('release') or 'installed'}): {load['records']} records with {load['tags']} tags"
            f" and 384-d vectors through put_records, {load['records_per_second']} records/s"
            f" ({load['put_records_seconds']:.1f} s, batches of {load['batch_size']}, HNSW indexes"
            f" {'kept' if load['with_indexes'] else 'dropped'} during the load)",
            f"      {load['edges']} edges by {load.get('edges_by', 'bulk INSERT')} in batches of"
            f" {load.get('edge_batch_size', load['batch_size'])}, {load['edges_per_second']} edges/s; "
            f"{load['windows']} windows ({load['window_members']} members): "
            f"{load['put_window_count']} through put_window at "
            f"{load['put_window_per_second']}/s, the rest by bulk INSERT at {load['bulk_windows_per_second']}/s",
            f"      index build: {builds or 'during the load'} (maintenance_work_mem {load['maintenance_work_mem']}); "
            f"vacuum analyze {load['vacuum_analyze_seconds']:.1f} s; whole load {load['total_seconds']:.0f} s "
            f"(client-side generation {load['generation_seconds']:.0f} s); load average"
            f" {' -> '.join(map(str, load.get('load_average_1m', [])))}; emem.check_derived(): "
            + (
                "empty"
                if derived == 0
                else "refused on a cluster"
                if "citus" in load
                else "not in this release"
                if derived is None
                else f"{derived} problems"
            ),
        ]
    )


def find_cells(
    conn: psycopg.Connection,
    exact_first_conn: psycopg.Connection,
    exact_conn: psycopg.Connection,
    question: Question,
    with_vector: bool,
    page_size: int,
) -> list[Cell]:
    vector = question.vector if with_vector else None
    return [
        Cell(name, connection, query, (question.text, vector, page, page_size), [])
        for name, connection, query, page in (
            ("find_p1", conn, FIND_ENVELOPE, 1),
            ("find_p10", conn, FIND_ENVELOPE, 10),
            ("find_table_p1", conn, FIND_TABLE, 1),
            ("find_table_p10", conn, FIND_TABLE, 10),
            ("exact_first_p1", exact_first_conn, FIND_ENVELOPE, 1),
            ("find_exact_p1", exact_conn, FIND_ENVELOPE, 1),
        )
    ]


def bare_cells(conn: psycopg.Connection, floor: Floor, question: Question, with_vector: bool) -> list[Cell]:
    rare = WeightedTerms.of(conn, question.fulltext_terms, leave_out_common=False)
    words = WeightedTerms.of(conn, (*question.known_words, *question.fulltext_terms), leave_out_common=True)
    bare = (
        floor.queries(question, with_vector)
        + floor.exact_first_queries(question, with_vector, rare, words)
        + hybrid_queries(question, with_vector, floor.k)
    )
    return [Cell(b.name, conn, b.query, b.params, []) for b in bare]


def run_latency(server: Server, args: argparse.Namespace, questions: list[Question], space: int) -> dict[str, Any]:
    with (
        connection(server, args.dbname) as find_conn,
        connection(server, args.dbname) as floor_conn,
        connection(server, args.dbname) as exact_first_conn,
        connection(server, args.dbname) as exact_conn,
    ):
        exact_first_conn.execute("select set_config('emem.pipeline_profile', %s, false)", (EXACT_FIRST_PROFILE,))
        exact_conn.execute("set emem.exact_totals_up_to = 0")  # totals always exact: the column beside the bounded
        floor = Floor(TagSchema.detect(floor_conn), space, DIMENSION, args.page_size)
        floor_conn.execute(f"set hnsw.iterative_scan = {ITERATIVE_SCAN}")
        cells: dict[str, dict[str, Cell]] = {}
        for question in questions:
            for mode, with_vector in MODES.items():
                group = find_cells(find_conn, exact_first_conn, exact_conn, question, with_vector, args.page_size)
                group += bare_cells(floor_conn, floor, question, with_vector)
                cells[f"{question.kind}/{mode}"] = {cell.key: cell for cell in group}
        say(f"latency: {sum(len(g) for g in cells.values())} cells x {args.repetitions} rounds")
        latency([cell for group in cells.values() for cell in group.values()], args.repetitions, progress=say)
        summaries = {key: summarise(group, args.page_size, MODES[key.split("/")[1]]) for key, group in cells.items()}
        memory = backend_memory(find_conn)
        round_trip = Cell("select_1", find_conn, "select 1", (), [])
        latency([round_trip], 200)
    return {
        "summaries": summaries,
        "memory_after_warm_runs": memory,
        "round_trip_select_1": percentiles(round_trip.times),
    }


def run_lanes(
    server: Server, args: argparse.Namespace, questions: list[Question]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Another lane's edges, and another lane's records and windows, against agents reading lane
    ops, under each isolation (lanes.py), timed in the same rounds."""
    rare = next(q for q in questions if q.kind == "rare_tag")
    vectors = archive_question_vectors(Corpus(args.records, args.seed))
    connections = {isolation: agent_connection(server, args.dbname, role) for isolation, role in AGENTS.items()}
    try:
        edge_cells = lane_cells(connections, rare.terms[0], rare.vector, FIND_ENVELOPE, args.page_size)
        records_cells = archive_cells(connections, rare.terms[0], vectors, FIND_ENVELOPE, args.page_size)
        say(f"other lanes: {len(edge_cells) + len(records_cells)} cells x {args.repetitions} rounds")
        latency(edge_cells + records_cells, args.repetitions, progress=say)
    finally:
        for conn in connections.values():
            conn.close()
    return lane_summary(edge_cells), archive_summary(records_cells)


def timed_pair(
    sides: dict[str, psycopg.Connection], questions: list[Question], args: argparse.Namespace, label: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two databases' pages of the same questions timed in the same shuffled rounds (beside.py):
    whether they hold the same corpus, and the figures compared (the first side against the second)."""
    (first_name, first), (second_name, second) = sides.items()
    corpus = same_corpus(first, second)
    if not all(table["same"] for table in corpus.values()):
        say(f"warning: {first_name} and {second_name} do not hold the same corpus: {corpus}")
    cells = beside_cells(sides, questions, MODES, FIND_ENVELOPE, args.page_size)
    say(f"{label}: {len(cells)} cells x {args.repetitions} rounds")
    latency(cells, args.repetitions, progress=say)
    return corpus, compare(cells, first_name, second_name)


def run_beside(args: argparse.Namespace, questions: list[Question], target: Target, beside: Target) -> dict[str, Any]:
    """Both releases' pages timed in the same shuffled rounds (beside.py), on the same questions."""
    release = beside.release or ""
    with connection(target.server, target.dbname) as this, connection(beside.server, beside.dbname) as previous:
        this_release = emem_version(this)
        corpus, figures = timed_pair({this_release: this, release: previous}, questions, args, f"beside {release}")
        say(f"beside {release}: the pages again with exact vector lookups")
        exact = exact_vector_pages(
            beside_cells({this_release: this, release: previous}, questions, MODES, FIND_ENVELOPE, args.page_size),
            this_release,
            release,
        )
        modules = modules_md5(previous)
    return {
        "database": beside.dbname,
        "modules_md5": modules,
        "corpus": corpus,
        **figures,
        "exact_vector_pages": exact,
    }


def prepare_previous(args: argparse.Namespace, beside: Target) -> dict[str, Any]:
    """The previous release's corpus, built or reused, with the other lane's edges."""
    load, reused = corpus_ready(beside, args, None)
    say(load_lines(load))
    with connection(beside.server, beside.dbname) as conn:
        space = space_id(conn)
        added = add_edge_lane(conn, beside, space)
        archive = add_archive_lane(conn, beside, space)
    return {"load": load, "corpus_reused": reused, "edge_lane_added": added, "archive_lane_added": archive}


def add_edge_lane(conn: psycopg.Connection, target: Target, space: int) -> dict[str, Any] | None:
    added = ensure_edge_lane(conn, Corpus(target.records, target.seed), space, target.writes)
    if added is not None:
        derived = (
            "empty"
            if added["derived_problems"] == 0
            else "refused on a cluster"
            if target.cluster
            else "not in this release"
        )
        say(
            f"added lane {added['lane']} to {target.dbname}: {added['records']} records, {added['edges']} edges"
            f" by {added['edges_by']} at {added['edges_per_second']}/s ({added['seconds']} s);"
            f" emem.check_derived(): {derived}"
        )
    return added


def add_archive_lane(conn: psycopg.Connection, target: Target, space: int) -> dict[str, Any] | None:
    if not archive_supported(conn):
        say(f"lane archive not added to {target.dbname}: its emem lacks put_records(jsonb, integer) or put_window")
        return None
    added = ensure_archive_lane(conn, Corpus(target.records, target.seed), space, target.writes)
    if added is not None:
        say(
            f"added lane {added['lane']} to {target.dbname}: {added['records']} conversation records in"
            f" {added['threads']} threads by put_records at {added['records_per_second']}/s, {added['windows']}"
            f" windows by put_window at {added['put_window_per_second']}/s ({added['seconds']} s);"
            f" emem.check_derived(): {'not in this release' if added['derived_problems'] is None else 'empty'}"
        )
    return added


def run_concurrency(server: Server, args: argparse.Namespace, questions: list[Question]) -> dict[str, Any]:
    calls = [
        (FIND_ENVELOPE, (q.text, q.vector if with_vector else None, 1, args.page_size))
        for q in questions
        for with_vector in MODES.values()
    ]
    one = throughput(server, args.dbname, calls, 1, args.throughput_seconds)
    two = throughput(server, args.dbname, calls, 2, args.throughput_seconds)
    return {
        "finds_per_second_1_client": round(one, 1),
        "finds_per_second_2_clients": round(two, 1),
        "speedup": round(two / one, 2) if one else None,
        "seconds_each": args.throughput_seconds,
        "mix": "page 1 of every question kind, with vector and degraded, in turn",
    }


def run_profile(server: Server, args: argparse.Namespace, questions: list[Question]) -> dict[str, dict[str, Any]]:
    repetitions = 2 if args.quick else 5
    with connection(server, args.dbname) as conn:
        return {
            f"{q.kind}/{mode}": profile_question(conn, q, with_vector, args.page_size, repetitions)
            for q in questions
            for mode, with_vector in MODES.items()
        }


def fresh_line(kind: str, fresh: dict[str, Any]) -> str:
    split = fresh["split"]
    return (
        f"first find in a fresh connection ({kind}, with vector): p50 {fresh['first_find']['p50']:.1f} ms,"
        f" max {fresh['first_find_max']:.1f} ms (connect {fresh['connect']['p50']:.1f} ms; second find"
        f" {fresh['second_find']['p50']:.1f} ms); PL/Python, modules and lexicon"
        f" {split['plpython_modules_lexicon']['p50']:.1f} ms, then the find"
        f" {split['first_find_after_them']['p50']:.1f} ms; calls 1-8 of a new connection:"
        f" {fresh['first_eight_calls']}"
    )


def profile_lines(profile: dict[str, dict[str, Any]]) -> str:
    lines = [
        "where find's time goes (page 1, ms): each lookup as e_gather_explain times it inside PL/Python /"
        " its SQL's executor time (auto_explain) (candidates); then find's phases timed inside the server"
    ]
    for key, entry in profile.items():
        parts = ", ".join(
            f"{name} {p.get('in_plpython_ms', 0):.1f}/{p.get('sql_ms') or 0:.1f} ({p.get('candidates', 0)})"
            for name, p in entry["parts"].items()
            if name in LOOKUPS
        )
        lines.append(f"  {key:<22} {parts}")
        phases = entry["phases"]
        if "phases_ms" in phases:
            steps = ", ".join(f"{name} {ms:.1f}" for name, ms in phases["phases_ms"].items())
            lines.append(f"  {'':<22} inside the server: find {phases['total_ms']:.1f} = {steps}")
        else:
            lines.append(f"  {'':<22} phases unavailable: {phases.get('error')}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.citus:
        from citus_bench import main_citus

        return main_citus(args, "python3 bench/run.py " + shlex.join(argv))
    started = time.perf_counter()
    server = Server()
    target = Target(server, args.dbname, args.records, args.seed)
    beside = (
        Target(server, f"{args.dbname}_{args.beside.replace('.', '_')}", args.records, args.seed, args.beside)
        if args.beside
        else None
    )
    command = "python3 bench/run.py " + shlex.join(argv)
    head = git_head()
    try:
        with connection(server, "postgres") as admin:
            script_md5 = install_script_md5(admin)
        load, reused = corpus_ready(target, args, script_md5)
        say(load_lines(load))
        previous = prepare_previous(args, beside) if beside is not None else None
    except psycopg.OperationalError as error:
        print(f"cannot reach PostgreSQL at {server.host}:{server.port} as {server.user}: {error}", file=sys.stderr)
        return 2
    with connection(server, args.dbname) as conn:
        space = space_id(conn)
        added = add_edge_lane(conn, target, space)
        archive_added = add_archive_lane(conn, target, space)
        ensure_agents(conn)
        create_hybrids(conn, space, DIMENSION)
        questions = build_questions(conn, Corpus(args.records, args.seed))
        info = machine(conn)
        emem_installed = {"script_md5": script_md5, "modules_md5": modules_md5(conn)}
        records = int(scalar(conn, "select count(*) from emem.records"))
    for q in questions:
        say(f"  {q.kind:<13} {q.text!r}: terms {list(q.terms)}, full text {list(q.fulltext_terms)}")
    timings = run_latency(server, args, questions, space)
    beside_figures = (
        run_beside(args, questions, target, beside) | previous if beside is not None and previous is not None else None
    )
    say("another lane's edges, records and windows: agents reading lane ops, under page_filter and strict")
    lanes, other_lane = run_lanes(server, args, questions)
    say(f"fresh connections: {args.fresh_connections} per question ({', '.join(FRESH_KINDS)})")
    fresh = {
        q.kind: fresh_connections(
            server, args.dbname, FIND_ENVELOPE, (q.text, q.vector, 1, args.page_size), args.fresh_connections
        )
        for q in questions
        if q.kind in FRESH_KINDS
    }
    say(f"throughput: 1 and 2 clients, {args.throughput_seconds:.0f} s each")
    concurrency = run_concurrency(server, args, questions)
    profile = {} if args.no_profile else run_profile(server, args, questions)
    info["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    with connection(server, args.dbname) as conn:
        emem_installed["script_md5_at_end"] = install_script_md5(conn)
        emem_installed["modules_md5_at_end"] = modules_md5(conn)
    if emem_installed["modules_md5_at_end"] != emem_installed["modules_md5"]:
        say("warning: emem's Python modules were installed again during this run: figures may mix two versions")
    elif emem_installed["script_md5_at_end"] != script_md5:
        say(
            "note: emem's install script changed during this run (this database keeps the one it was built"
            " with; the next run builds the corpus again)"
        )
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "database": args.dbname,
        "records": records,
        "seed": args.seed,
        "page_size": args.page_size,
        "repetitions": args.repetitions,
        "machine": info,
        "emem_installed": emem_installed,
        "git_head_at_start": head,
        "load": load,
        "corpus_reused": reused,
        "edge_lane_added": added,
        "archive_lane_added": archive_added,
        "beside": beside_figures,
        "questions": [vars(q) | {"vector": "(near a cluster centre)"} for q in questions],
        "latency": timings["summaries"],
        "lanes": lanes,
        "other_lane_records": other_lane,
        "round_trip_select_1": timings["round_trip_select_1"],
        "fresh_connection": fresh,
        "throughput": concurrency,
        "memory": {"after_warm_runs": timings["memory_after_warm_runs"], **fresh["code_only"]["memory"]},
        "profile": profile,
        "duration_seconds": round(time.perf_counter() - started, 1),
    }
    path = write_result(result)
    say("")
    say(tables(timings["summaries"]))
    say("")
    say(lane_lines(lanes))
    say("")
    say(archive_lines(other_lane))
    say("")
    if beside_figures is not None:
        say(beside_lines(beside_figures, load))
        say("")
    say(f"round trip of `select 1`: p50 {timings['round_trip_select_1']['p50']:.2f} ms")
    for kind, figures in fresh.items():
        say(fresh_line(kind, figures))
    say(
        f"throughput: {concurrency['finds_per_second_1_client']} finds/s with 1 client, "
        f"{concurrency['finds_per_second_2_clients']} with 2 ({concurrency['speedup']}x)"
    )
    say(f"backend memory: {json.dumps(result['memory'])}")
    if profile:
        say(profile_lines(profile))
    say(f"\nmachine: {machine_line(info)}; load average {info['load_average_1m']} -> {info['load_average_1m_end']}")
    say(
        f"reproduce: {command}   (corpus {'reused' if reused else 'built'};"
        f" run took {result['duration_seconds']:.0f} s)"
    )
    say(f"figures: {path}")
    return 0


def git_head() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=RESULTS.parent, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def write_result(result: dict[str, Any], suffix: str = "") -> Path:
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{stamp}-{result['records']}{suffix}.json"
    path.write_text(json.dumps(result, indent=1, default=str))
    return path


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
