"""make eval: recall at 10 and 30, per question type, of pipeline profiles on a generated corpus.

Compares the default profile (control/emem.conf), the recommended exact_first profile
(control/exact_first.conf) and dense-only retrieval, with the embedded model's real vectors and
degraded (no question vector). `--grid` also tries the candidate weightings the recommended
profile was chosen from; `--markdown` prints the recall table of docs/profiles.md.
"""

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import psycopg
from corpus import Corpus, build_corpus

from emem_client.gateways import EmbeddedGateway

CONTROL = Path(__file__).resolve().parent.parent / "control"
DATABASE = "emem_eval"
# The question types added with 0.2.0's label matching, one per ranking failure it fixed
# (labels.py, dialogue.py).
NEW_KINDS = ("label_forms", "stopword_label", "edge_role", "thread", "modal", "speaker")
# Candidate weightings and thread_context settings (Tuning fields) for --grid.
GRID: list[tuple[str, dict[str, int]]] = [
    (
        "record_vectors:30, tags_by_terms:30, window_vectors:10, fulltext_by_rarity:15, fulltext_words:15",
        {},
    ),
    (
        "record_vectors:30, tags_by_terms:30, window_vectors:10, thread_context:10,"
        " fulltext_by_rarity:15, fulltext_words:15",
        {},
    ),
    (
        "record_vectors:30, tags_by_terms:35, window_vectors:10, thread_context:10,"
        " fulltext_by_rarity:10, fulltext_words:15",
        {},
    ),
    (
        "record_vectors:30, tags_by_terms:35, window_vectors:5, thread_context:10,"
        " fulltext_by_rarity:10, fulltext_words:10",
        {},
    ),
    (
        "record_vectors:30, tags_by_terms:30, window_vectors:5, thread_context:10,"
        " fulltext_by_rarity:15, fulltext_words:10",
        {},
    ),
    (
        "record_vectors:30, tags_by_terms:35, window_vectors:10, thread_context:15,"
        " fulltext_by_rarity:5, fulltext_words:10",
        {},
    ),
    (
        "record_vectors:30, tags_by_terms:35, window_vectors:10, thread_context:10,"
        " fulltext_by_rarity:10, fulltext_words:15",
        {"thread_radius": 4},
    ),
    (
        "record_vectors:30, tags_by_terms:35, window_vectors:10, thread_context:10,"
        " fulltext_by_rarity:10, fulltext_words:15",
        {"anchor_frequency": 50},
    ),
    (
        "record_vectors:35, tags_by_terms:30, window_vectors:10, thread_context:10,"
        " fulltext_by_rarity:5, fulltext_words:10",
        {},
    ),
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


Recalls = dict[str, dict[int, float]]  # question type (and "all") -> {k: recall at k}


def use_tuning(conn: psycopg.Connection, changes: dict[str, int]) -> None:
    """This session's lookups run with these Tuning fields changed (the defaults when empty)."""
    conn.execute("select emem.analyse_question('x')")  # the backend's state exists from here on
    conn.execute(
        "do $$ import dataclasses, json; from emem_db.tuning import DEFAULT_TUNING;"
        f" GD['emem_db'].tuning = dataclasses.replace(DEFAULT_TUNING, **json.loads({json.dumps(changes)!r}))"
        " $$ language plpython3u"
    )


def evaluate(
    conn: psycopg.Connection,
    corpus: Corpus,
    ids: dict[str, int],
    question_vectors: list[list[float]] | None,
    profile: str,
    tuning: dict[str, int] | None = None,
) -> Recalls:
    """Recall at 10 and 30 per question type; without question vectors, degraded."""
    conn.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
    use_tuning(conn, tuning or {})
    sums: dict[str, dict[int, float]] = defaultdict(lambda: {10: 0.0, 30: 0.0})
    counts: dict[str, int] = defaultdict(int)
    vectors = question_vectors or [None] * len(corpus.questions)
    for question, vector in zip(corpus.questions, vectors, strict=True):
        envelope = conn.execute(
            "select emem.e_gather_find_envelope(%s, %s::vector, 1, 30)",
            (question.text, None if vector is None else str(vector)),
        ).fetchone()[0]
        found = [row["record_id"] for row in envelope["rows"]]
        gold = {ids[key] for key in question.gold}
        for kind in (question.kind, "all"):
            counts[kind] += 1
            for k in (10, 30):
                sums[kind][k] += recall(found, gold, k)
    return {kind: {k: total / counts[kind] for k, total in by_k.items()} for kind, by_k in sums.items()}


def kinds_of(question_counts: dict[str, int]) -> list[str]:
    """The question types, those of the base corpus first, then the new ones, then all."""
    old = sorted(k for k in question_counts if k not in NEW_KINDS and k != "all")
    return [*old, *(k for k in NEW_KINDS if k in question_counts), "all"]


def print_table(results: dict[str, Recalls], question_counts: dict[str, int]) -> None:
    names = list(results)
    print(f"{'question type':<15}{'n':>4}" + "".join(f"{name[:19]:>20}" for name in names))
    print(f"{'':<19}" + "".join(f"{'R@10':>10}{'R@30':>10}" for _ in names))
    for kind in kinds_of(question_counts):
        print(
            f"{kind:<15}{question_counts[kind]:>4}"
            + "".join(f"{results[name][kind][10]:>10.3f}{results[name][kind][30]:>10.3f}" for name in names)
        )


def print_markdown(results: dict[str, Recalls], question_counts: dict[str, int]) -> None:
    """The recall table of docs/profiles.md."""
    names = [name for name in results if not name.startswith("grid")]
    print("| question type | n | " + " | ".join(f"{name} R@10 | {name} R@30" for name in names) + " |")
    print("|---|---|" + "---|---|" * len(names))
    for kind in kinds_of(question_counts):
        cells = " | ".join(f"{results[name][kind][10]:.3f} | {results[name][kind][30]:.3f}" for name in names)
        print(f"| {kind} | {question_counts[kind]} | {cells} |")


def check_targets(results: dict[str, Recalls], question_counts: dict[str, int]) -> list[str]:
    """The recommended profile's figures against its targets."""
    recommended, degraded = results["exact_first"], results["exact_first degraded"]
    new = [kind for kind in NEW_KINDS if kind in question_counts] or ["all"]
    return [
        f"exact_first R@30 on every new type >= .95: {min(recommended[k][30] for k in new):.3f}",
        f"exact_first R@10 overall >= .90: {recommended['all'][10]:.3f}",
        f"exact_first degraded R@30 overall >= .85: {degraded['all'][30]:.3f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true", help="also try the candidate weightings")
    parser.add_argument("--markdown", action="store_true", help="also print the recall table of docs/profiles.md")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--base", action="store_true", help="the base corpus only: no label and dialogue parts")
    args = parser.parse_args()
    started = time.perf_counter()
    corpus = build_corpus(args.seed, extended=not args.base)
    gateway = EmbeddedGateway()
    with fresh_database() as conn:
        ids = load(conn, corpus, gateway)
        question_vectors = gateway.embed([q.text for q in corpus.questions])
        profiles: dict[str, tuple[str, dict[str, int]]] = {
            "default": (profile_of(CONTROL / "emem.conf"), {}),
            "exact_first": (profile_of(CONTROL / "exact_first.conf"), {}),
            "dense_only": ("record_vectors", {}),
        }
        if args.grid:
            profiles.update({f"grid {n}": entry for n, entry in enumerate(GRID, start=1)})
        results: dict[str, Recalls] = {}
        for name, (profile, tuning) in profiles.items():
            results[name] = evaluate(conn, corpus, ids, question_vectors, profile, tuning)
            if name != "dense_only":  # a dense-only answer without a vector is empty
                results[f"{name} degraded"] = evaluate(conn, corpus, ids, None, profile, tuning)
    question_counts: dict[str, int] = defaultdict(int)
    for question in corpus.questions:
        question_counts[question.kind] += 1
        question_counts["all"] += 1
    print(
        f"emem evaluation: {len(corpus.records)} records, {len(corpus.questions)} questions, seed {args.seed}, "
        f"page 1 of 30, embedded model {gateway.declaration().model_name}"
    )
    for name, (profile, tuning) in profiles.items():
        print(f"  {name}: {profile}" + (f" with {tuning}" if tuning else ""))
    print_table(results, question_counts)
    if args.markdown:
        print_markdown(results, question_counts)
    print("\n".join(check_targets(results, question_counts)))
    reproduce = "make eval" + (f" EVAL_ARGS='{' '.join(sys.argv[1:])}'" if sys.argv[1:] else "")
    print(f"({time.perf_counter() - started:.0f} s; reproduce with: {reproduce})")


if __name__ == "__main__":
    main()
