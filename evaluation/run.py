"""make eval: recall at 10 and 30, per question type, of pipeline profiles on a generated corpus.

Compares the seed's profile (control/emem.conf), the recommended exact_first profile
(control/exact_first.conf) and dense-only retrieval, with the embedded model's real vectors.
`--grid` also tries the candidate weightings the recommended profile was chosen from.
"""

import argparse
import json
import os
import time
from collections import defaultdict
from pathlib import Path

import psycopg
from corpus import Corpus, build_corpus

from emem_client.gateways import EmbeddedGateway

CONTROL = Path(__file__).resolve().parent.parent / "control"
DATABASE = "emem_eval"
GRID = [
    "record_vectors:30, tags_by_terms:30, window_vectors:10, fulltext_by_rarity:15, fulltext_words:15",
    "record_vectors:40, tags_by_terms:35, window_vectors:20, fulltext_by_rarity:5",
    "record_vectors:30, tags_by_terms:35, window_vectors:15, fulltext_by_rarity:20",
    "record_vectors:25, tags_by_terms:25, window_vectors:10, fulltext_by_rarity:20, fulltext_words:20",
    "record_vectors:40, tags:35, window_vectors:20, fulltext_by_rarity:5",
]


def profile_of(path: Path) -> str:
    line = next(ln for ln in path.read_text().splitlines() if ln.startswith("emem.pipeline_profile"))
    return line.split("=", 1)[1].strip().strip("'")


def server_dsn(dbname: str) -> str:
    return (
        f"host={os.environ.get('EMEM_PGHOST', '127.0.0.1')} port={os.environ.get('EMEM_PGPORT', '5433')}"
        f" user={os.environ.get('EMEM_PGUSER', 'postgres')} dbname={dbname}"
    )


def fresh_database() -> psycopg.Connection:
    with psycopg.connect(server_dsn("postgres"), autocommit=True) as admin:
        admin.execute(f"drop database if exists {DATABASE} with (force)")
        admin.execute(f"create database {DATABASE}")
    conn = psycopg.connect(server_dsn(DATABASE), autocommit=True)
    conn.execute("set client_min_messages = warning")
    conn.execute("create extension emem cascade")
    return conn


def load(conn: psycopg.Connection, corpus: Corpus, gateway: EmbeddedGateway) -> dict[str, int]:
    declaration = gateway.declaration()
    conn.execute("select emem.create_lane('eval')")
    conn.execute(
        "select emem.create_embedding_space(%s, %s, %s, true)",
        (declaration.model_name, declaration.dimension, declaration.fingerprint),
    )
    vectors = gateway.embed([r["content"] for r in corpus.records])
    items = [
        {
            "kind": r["kind"],
            "content": r["content"],
            "lane": "eval",
            "tags": r["tags"],
            "source_key": r["key"],
            "vector": vector,
            **{k: r[k] for k in ("thread_id", "thread_position") if k in r},
        }
        for r, vector in zip(corpus.records, vectors, strict=True)
    ]
    rows = conn.execute("select item_number, record_id from emem.put_records(%s)", (json.dumps(items),)).fetchall()
    ids = {corpus.records[n - 1]["key"]: record_id for n, record_id in rows}
    for source, target, relation, properties in corpus.edges:
        conn.execute(
            "select emem.link_records(%s, %s, %s, %s)", (ids[source], ids[target], relation, json.dumps(properties))
        )
    by_key = {r["key"]: r for r in corpus.records}
    window_vectors = gateway.embed([" ".join(by_key[k]["content"] for k in keys) for keys in corpus.windows])
    for keys, vector in zip(corpus.windows, window_vectors, strict=True):
        conn.execute("select emem.put_window(%s, %s::vector)", ([ids[k] for k in keys], str(vector)))
    conn.execute("analyze")
    return ids


def recall(found: list[int], gold: set[int], k: int) -> float:
    return len(set(found[:k]) & gold) / len(gold)


def evaluate(
    conn: psycopg.Connection, corpus: Corpus, ids: dict[str, int], question_vectors: list[list[float]], profile: str
) -> dict[str, dict[int, float]]:
    conn.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
    sums: dict[str, dict[int, float]] = defaultdict(lambda: {10: 0.0, 30: 0.0})
    counts: dict[str, int] = defaultdict(int)
    for question, vector in zip(corpus.questions, question_vectors, strict=True):
        envelope = conn.execute(
            "select emem.e_gather_find_envelope(%s, %s::vector, 1, 30)", (question.text, str(vector))
        ).fetchone()[0]
        found = [row["record_id"] for row in envelope["rows"]]
        gold = {ids[key] for key in question.gold}
        for kind in (question.kind, "all"):
            counts[kind] += 1
            for k in (10, 30):
                sums[kind][k] += recall(found, gold, k)
    return {kind: {k: total / counts[kind] for k, total in by_k.items()} for kind, by_k in sums.items()}


def print_table(results: dict[str, dict[str, dict[int, float]]], question_counts: dict[str, int]) -> None:
    kinds = [*sorted(k for k in question_counts if k != "all"), "all"]
    names = list(results)
    header = f"{'question type':<14}{'n':>5}" + "".join(f"{name[:22]:>26}" for name in names)
    print(header)
    print(f"{'':<19}" + "".join(f"{'R@10':>13}{'R@30':>13}" for _ in names))
    for kind in kinds:
        print(
            f"{kind:<14}{question_counts[kind]:>5}"
            + "".join(f"{results[name][kind][10]:>13.3f}{results[name][kind][30]:>13.3f}" for name in names)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true", help="also try the candidate weightings")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    started = time.perf_counter()
    corpus = build_corpus(args.seed)
    gateway = EmbeddedGateway()
    with fresh_database() as conn:
        ids = load(conn, corpus, gateway)
        question_vectors = gateway.embed([q.text for q in corpus.questions])
        profiles = {
            "seed": profile_of(CONTROL / "emem.conf"),
            "exact_first": profile_of(CONTROL / "exact_first.conf"),
            "dense_only": "record_vectors",
        }
        if args.grid:
            profiles.update({f"grid {n}": profile for n, profile in enumerate(GRID, start=1)})
        results = {name: evaluate(conn, corpus, ids, question_vectors, profile) for name, profile in profiles.items()}
    question_counts = defaultdict(int)
    for question in corpus.questions:
        question_counts[question.kind] += 1
        question_counts["all"] += 1
    print(
        f"emem evaluation: {len(corpus.records)} records, {len(corpus.questions)} questions, seed {args.seed}, "
        f"page 1 of 30, embedded model {gateway.declaration().model_name}"
    )
    for name, profile in profiles.items():
        print(f"  {name}: {profile}")
    print_table(results, question_counts)
    reproduce = "make eval" + (" EVAL_ARGS=--grid" if args.grid else "")
    print(f"({time.perf_counter() - started:.0f} s; reproduce with: {reproduce})")


if __name__ == "__main__":
    main()
