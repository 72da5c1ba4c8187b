"""How fast `emem embed` fills a space with the embedded model (all-MiniLM-L6-v2): records per
second through the whole worker (claim, embed, store, commit per batch), beside the model alone,
run by each engine: numpy (the default) and, where the `embedded-torch` extra is installed,
sentence-transformers on torch.

    python3 bench/embed_throughput.py                    # 2000 records, batches of 64
    make bench-embed BENCH_EMBED_ARGS="--records 5000 --batch-size 128"
    make bench-embed BENCH_EMBED_ARGS="--engines numpy"  # the model alone without torch's run

It builds a scratch database (emem_bench_embed, dropped first) on the server of EMEM_PGHOST,
EMEM_PGPORT and EMEM_PGUSER (default 127.0.0.1:5433 as postgres), writes the records without
vectors (so they are queued), and drains the queue once. Not a test: nothing here fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import shlex
import sys
import time

from db import Server, connection

from emem_client import Client, EmbeddedGateway
from emem_client.embed import EmbedOptions, embed_queue

DATABASE = "emem_bench_embed"
SUBJECTS = ["The finance export", "Our replica", "The quarterly budget", "Maya's ticket", "The invoice INV-2031"]
VERBS = ["failed again after", "was approved before", "needs a review of", "ran out of space during", "waits for"]
OBJECTS = ["the nightly vacuum", "the board meeting", "the migration to Postgres 16", "the audit in Q3", "lunch"]


def sentences(count: int, seed: int) -> list[str]:
    """Distinct sentences of the length of a conversation turn or a short note."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} (record {n}, "
        f"{rng.randint(1, 9999)} EUR, ticket OPS-{rng.randint(1000, 9999)})."
        for n in range(count)
    ]


def model_speed(engine: str, texts: list[str], batch_size: int) -> dict[str, float] | None:
    """Records per second and CPU milliseconds per record of the model alone; None where the engine
    is not installed (torch without the embedded-torch extra)."""
    if engine == "torch" and not all(importlib.util.find_spec(name) for name in ("torch", "sentence_transformers")):
        return None
    gateway = EmbeddedGateway(batch_size=batch_size, engine=engine)
    gateway.embed(texts[:8])  # the model loads once, outside the timings
    started, cpu_started = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), batch_size):
        gateway.embed(texts[start : start + batch_size])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return {
        "records_per_second": round(len(texts) / seconds, 1),
        "cpu_ms_per_record": round(1000 * cpu / len(texts), 1),
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2000, help="records to embed (default 2000)")
    parser.add_argument("--batch-size", type=int, default=64, help="texts per batch (default 64)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--engines",
        type=lambda text: text.split(","),
        default=["numpy", "torch"],
        help="engines whose model alone is timed, comma-separated (default numpy,torch; torch where installed)",
    )
    args = parser.parse_args(argv)
    server = Server()
    with connection(server, "postgres") as admin:
        admin.execute(f"drop database if exists {DATABASE} with (force)")
        admin.execute(f"create database {DATABASE}")
    texts = sentences(args.records, args.seed)
    model_alone = {engine: model_speed(engine, texts, args.batch_size) for engine in args.engines}
    gateway = EmbeddedGateway(batch_size=args.batch_size)  # the default engine, as `emem embed` runs it
    with connection(server, DATABASE) as conn:
        conn.execute("create extension emem cascade")
        conn.execute("select emem.create_lane('bench')")
        client = Client(conn, gateway)
        client.ensure_space()
        items = [{"kind": "note", "content": text, "lane": "bench"} for text in texts]
        client.put_records(items)
        cpu_started = time.process_time()
        report = embed_queue(client, EmbedOptions(batch_size=args.batch_size, progress=sys.stderr.isatty()))
        worker_cpu = time.process_time() - cpu_started
    with connection(server, "postgres") as admin:
        admin.execute(f"drop database {DATABASE} with (force)")
    figures = {
        "records": report.records_embedded,
        "batch_size": args.batch_size,
        "worker_records_per_second": round(report.records_embedded / report.seconds, 1),
        "model_alone": model_alone,
        # CPU time of this process (the model's threads included) per record: what a busy machine
        # does not change; a free core embeds about 1 / that records a second.
        "worker_cpu_ms_per_record": round(1000 * worker_cpu / report.records_embedded, 1),
        "cpus": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 1),  # other work on the machine slows the model
        "machine": platform.processor() or platform.machine(),
        "command": shlex.join(["python3", "bench/embed_throughput.py", *argv]),
    }
    print(
        f"emem embed, all-MiniLM-L6-v2 (numpy): {figures['worker_records_per_second']} records/s "
        f"({report.records_embedded} records, batches of {args.batch_size}), CPU time per record "
        f"{figures['worker_cpu_ms_per_record']} ms; {figures['cpus']} CPUs, load average {figures['load_average']}"
    )
    for engine, speed in model_alone.items():
        print(
            f"  the model alone, {engine}: "
            + (
                f"{speed['records_per_second']} records/s, CPU time per record {speed['cpu_ms_per_record']} ms"
                if speed
                else "not installed (the embedded-torch extra)"
            )
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main(sys.argv[1:])
