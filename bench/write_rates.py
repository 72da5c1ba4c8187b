"""Bulk `put_records` of releases side by side, in one run.

Each target is a fresh database `emem_write_rates_<release>` on its own server (a release whose
in-database modules differ from the others', as 0.1.1's do, needs a server of its own: see
bench/README.md). The same batches of the benchmark's corpus (records with tags and vectors, as
the load writes them; the HNSW indexes dropped, as the load does) go to every target in turn,
batch by batch, so that whatever else the machine does falls on all of them alike. Prints each
release's records/s over all batches and its median batch, and the command.

    python3 bench/write_rates.py --target 5444 --target 5463:0.1.1 --records 100000
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field

import psycopg
from corpus import Corpus, Record
from db import Server, connection, emem_version
from load import Target, create_database, hnsw_indexes, space_id


@dataclass
class Rate:
    target: Target
    space: int = 0
    release: str = ""
    batch_seconds: list[float] = field(default_factory=list)
    records: int = 0

    def line(self) -> str:
        total = sum(self.batch_seconds)
        median_ms = statistics.median(self.batch_seconds) * 1000
        return (
            f"{self.release:<8}{self.target.server.port:>6}{self.records:>9,}{self.records / total:>11,.0f}"
            f"{median_ms:>11.1f}"
        )


def parse_target(text: str, records: int, seed: int) -> Target:
    port, _, release = text.partition(":")
    server = Server(port=int(port))
    name = f"emem_write_rates_{(release or 'current').replace('.', '_')}"
    return Target(server, name, records, seed, release or None)


def payloads(corpus: Corpus, batch_size: int) -> list[tuple[str, int]]:
    """The corpus's records in batches of whole units (a thread is never split), as JSON."""
    batches: list[tuple[str, int]] = []
    records: list[Record] = []
    for unit in corpus.units():
        records += unit.records
        if len(records) >= batch_size:
            batches.append(batch_payload(corpus, records))
            records = []
    if records:
        batches.append(batch_payload(corpus, records))
    return batches


def batch_payload(corpus: Corpus, records: list[Record]) -> tuple[str, int]:
    vectors = corpus.vectors([record.cluster for record in records])
    return json.dumps([record.item(vector) for record, vector in zip(records, vectors, strict=True)]), len(records)


def prepare(target: Target) -> Rate:
    create_database(target)
    rate = Rate(target)
    with connection(target.server, target.dbname) as conn:
        rate.space = space_id(conn)
        for name in hnsw_indexes(conn, rate.space):
            conn.execute(psycopg.sql.SQL("drop index emem.{}").format(psycopg.sql.Identifier(name)))
        rate.release = emem_version(conn)
    return rate


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", action="append", required=True, help="PORT or PORT:RELEASE (repeat)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args(argv)
    rates = [prepare(parse_target(text, args.records, args.seed)) for text in args.target]
    batches = payloads(Corpus(args.records, args.seed), args.batch_size)
    connections = [rate.target.server.connect(rate.target.dbname) for rate in rates]
    load_average = [round(os.getloadavg()[0], 2)]
    try:
        for payload, count in batches:
            for rate, conn in zip(rates, connections, strict=True):
                started = time.perf_counter()
                conn.execute("select count(*) from emem.put_records(%s::jsonb, %s)", (payload, rate.space)).fetchone()
                rate.batch_seconds.append(time.perf_counter() - started)
                rate.records += count
    finally:
        for conn in connections:
            conn.close()
    load_average.append(round(os.getloadavg()[0], 2))
    print(f"bulk put_records, {args.records:,} records of the benchmark's corpus in batches of {args.batch_size}")
    print(f"{'release':<8}{'port':>6}{'records':>9}{'records/s':>11}{'batch p50':>11}  (ms)")
    for rate in rates:
        print(rate.line())
    print(f"load average (1 min) at start and end: {load_average[0]} / {load_average[1]}")
    print("command: python3 bench/write_rates.py " + shlex.join(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
