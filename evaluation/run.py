"""make eval: recall at 10 and 30, per corpus and question type, of pipeline profiles on generated corpora.

Compares the seed's profile (control/emem.conf), the recommended exact_first profile
(control/exact_first.conf) and dense-only retrieval, with the embedded model's real vectors and
degraded (no question vector), on each corpus in a database of its own (so that one corpus never
crowds another's pages): `own`, the project's own corpus (corpus.py, labels.py, dialogue.py), and
corpora shaped like real ones: `sessions` (sessions.py), `records` (records.py) and
`relations` (relations.py). `--grid` also tries the candidate weightings the recommended profile
was chosen from, `--profile NAME=PROFILE` another profile; `--markdown` prints the recall tables
of docs/evaluation.md; `--dump FILE` writes every question's page with e_gather_explain's ranks
(JSON lines); `--misses` analyses what page 1 missed (misses.py).
"""

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, cast

import psycopg
from corpus import Corpus, build_corpus
from pages import PAGE_SIZE, Answer, Loaded, explain, recall
from psycopg import sql
from records import build_records_corpus
from relations import build_relations_corpus
from sessions import build_sessions_corpus

from emem_client.gateways import EmbeddedGateway

CONTROL = Path(__file__).resolve().parent.parent / "control"
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


@dataclass(frozen=True)
class CorpusKind:
    """A corpus of the evaluation: how it is built, and its question types in the tables' order
    (None: those of 0.2.0's label matching after the earlier ones, as kinds_of orders them)."""

    build: Callable[[int], Corpus]
    kinds: tuple[str, ...] | None = None


CORPORA: dict[str, CorpusKind] = {
    "own": CorpusKind(build_corpus),
    "sessions": CorpusKind(build_sessions_corpus, ("single_hop", "multi_hop", "temporal", "open_domain")),
    "records": CorpusKind(build_records_corpus, ("xref_code", "xref_figure", "xref_name")),
    "relations": CorpusKind(build_relations_corpus, ("stopword_incidental", "stopword_point")),
}


def profile_of(path: Path) -> str:
    line = next(ln for ln in path.read_text().splitlines() if ln.startswith("emem.pipeline_profile"))
    return line.split("=", 1)[1].strip().strip("'")


def server_dsn(dbname: str) -> str:
    return (
        f"host={os.environ.get('EMEM_PGHOST', '127.0.0.1')} port={os.environ.get('EMEM_PGPORT', '5433')}"
        f" user={os.environ.get('EMEM_PGUSER', 'postgres')} dbname={dbname}"
    )


def fresh_database(name: str, version: str | None) -> psycopg.Connection:
    """A new database with the extension at `version` (None: the server's default version)."""
    with psycopg.connect(server_dsn("postgres"), autocommit=True) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')
        admin.execute(f'create database "{name}"')
    conn = psycopg.connect(server_dsn(name), autocommit=True)
    conn.execute("set client_min_messages = warning")
    if version is None:
        conn.execute("create extension emem cascade")
    else:
        conn.execute(sql.SQL("create extension emem version {} cascade").format(sql.Literal(version)))
    return conn


def load(conn: psycopg.Connection, corpus: Corpus, gateway: EmbeddedGateway) -> Loaded:
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
            **{k: r[k] for k in ("thread_id", "thread_position", "occurred_at") if k in r},
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
    return Loaded(ids, {r["key"]: vector for r, vector in zip(corpus.records, vectors, strict=True)})


Recalls = dict[str, dict[int, float]]  # question type (and "all") -> {k: recall at k}


def use_tuning(conn: psycopg.Connection, changes: dict[str, int]) -> None:
    """This session's lookups run with these Tuning fields changed (the defaults when empty)."""
    conn.execute("select emem.analyse_question('x')")  # the backend's state exists from here on
    conn.execute(
        # The defaults of the running release's Tuning (its module is emem_db_<version>).
        "do $$ import dataclasses, json; state = GD['emem_db'];"
        f" state.tuning = dataclasses.replace(type(state.tuning)(), **json.loads({json.dumps(changes)!r}))"
        " $$ language plpython3u"
    )


def use_profile(conn: psycopg.Connection, profile: str, tuning: dict[str, int] | None = None) -> None:
    conn.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
    use_tuning(conn, tuning or {})


def evaluate(
    conn: psycopg.Connection,
    corpus: Corpus,
    loaded: Loaded,
    question_vectors: list[list[float]] | None,
    profile: str,
    tuning: dict[str, int] | None = None,
    explained: bool = False,
) -> list[Answer]:
    """Page 1 of every question; without question vectors, degraded; with `explained`, through
    e_gather_explain (the same page, with each row's list ranks)."""
    use_profile(conn, profile, tuning)
    vectors: Sequence[list[float] | None] = question_vectors or [None] * len(corpus.questions)
    answers = []
    for question, vector in zip(corpus.questions, vectors, strict=True):
        if explained:
            answer = explain(conn, question.text, vector)
        else:
            answer = cast(  # the statement returns one row: psycopg types fetchone() as maybe None
                tuple[Any, ...],
                conn.execute(
                    "select emem.e_gather_find_envelope(%s, %s::vector, 1, %s)",
                    (question.text, None if vector is None else str(vector), PAGE_SIZE),
                ).fetchone(),
            )[0]
        answers.append(
            Answer(
                question,
                frozenset(loaded.ids[key] for key in question.gold),
                [row["record_id"] for row in answer["rows"]],
                vector,
                answer if explained else None,
            )
        )
    return answers


def recalls(answers: Iterable[Answer]) -> Recalls:
    """Recall at 10 and 30 per question type and over all questions."""
    sums: dict[str, dict[int, float]] = defaultdict(lambda: {10: 0.0, 30: 0.0})
    counts: dict[str, int] = defaultdict(int)
    for answer in answers:
        for kind in (answer.question.kind, "all"):
            counts[kind] += 1
            for k in (10, 30):
                sums[kind][k] += recall(answer.page, set(answer.evidence), k)
    return {kind: {k: total / counts[kind] for k, total in by_k.items()} for kind, by_k in sums.items()}


def kinds_of(question_counts: dict[str, int], order: tuple[str, ...] | None = None) -> list[str]:
    """The question types in the given order; else those of the base corpus first, then those
    of 0.2.0's label matching; then all."""
    if order is not None:
        return [*(k for k in order if k in question_counts), "all"]
    old = sorted(k for k in question_counts if k not in NEW_KINDS and k != "all")
    return [*old, *(k for k in NEW_KINDS if k in question_counts), "all"]


def print_table(results: dict[str, Recalls], question_counts: dict[str, int], order: tuple[str, ...] | None) -> None:
    names = list(results)
    width = max(15, *(len(kind) + 1 for kind in question_counts))
    print(f"{'question type':<{width}}{'n':>4}" + "".join(f"{name[:19]:>20}" for name in names))
    print(f"{'':<{width + 4}}" + "".join(f"{'R@10':>10}{'R@30':>10}" for _ in names))
    for kind in kinds_of(question_counts, order):
        print(
            f"{kind:<{width}}{question_counts[kind]:>4}"
            + "".join(f"{results[name][kind][10]:>10.3f}{results[name][kind][30]:>10.3f}" for name in names)
        )


def print_markdown(results: dict[str, Recalls], question_counts: dict[str, int], order: tuple[str, ...] | None) -> None:
    """The recall tables of docs/evaluation.md and docs/profiles.md."""
    names = [name for name in results if not name.startswith("grid")]
    print("| question type | n | " + " | ".join(f"{name} R@10 | {name} R@30" for name in names) + " |")
    print("|---|---|" + "---|---|" * len(names))
    for kind in kinds_of(question_counts, order):
        cells = " | ".join(f"{results[name][kind][10]:.3f} | {results[name][kind][30]:.3f}" for name in names)
        print(f"| {kind} | {question_counts[kind]} | {cells} |")


def check_targets(results: dict[str, Recalls], question_counts: dict[str, int]) -> list[str]:
    """The recommended profile's figures against the targets it was chosen for (0.2.0)."""
    recommended, degraded = results["exact_first"], results["exact_first degraded"]
    new = [kind for kind in NEW_KINDS if kind in question_counts] or ["all"]
    return [
        f"exact_first R@30 on every new type >= .95: {min(recommended[k][30] for k in new):.3f}",
        f"exact_first R@10 overall >= .90: {recommended['all'][10]:.3f}",
        f"exact_first degraded R@30 overall >= .85: {degraded['all'][30]:.3f}",
    ]


def configurations(grid: bool, extra: Sequence[str] = ()) -> dict[str, tuple[str, dict[str, int]]]:
    """The profiles (and Tuning changes) each corpus is evaluated under; `extra`: more, each
    NAME=PROFILE (--profile)."""
    profiles: dict[str, tuple[str, dict[str, int]]] = {
        "default": (profile_of(CONTROL / "emem.conf"), {}),
        "exact_first": (profile_of(CONTROL / "exact_first.conf"), {}),
        "dense_only": ("record_vectors", {}),
    }
    if grid:
        profiles.update({f"grid {n}": entry for n, entry in enumerate(GRID, start=1)})
    for entry in extra:
        name, _, profile = entry.partition("=")
        profiles[name.strip()] = (profile.strip(), {})
    return profiles


def dump(out: TextIO, corpus_name: str, configuration: str, answers: list[Answer], loaded: Loaded) -> None:
    """One JSON line per question: its evidence, its page, and explain's rows and list sizes."""
    keys = {record_id: key for key, record_id in loaded.ids.items()}
    for answer in answers:
        explained = answer.explained or {}
        line = {
            "corpus": corpus_name,
            "configuration": configuration,
            "degraded": explained.get("degraded", answer.vector is None),
            "kind": answer.question.kind,
            "question": answer.question.text,
            "evidence": sorted(answer.evidence),
            "evidence_keys": {str(i): keys[i] for i in sorted(answer.evidence)},
            "roles": {str(loaded.ids[k]): role for k, role in sorted(answer.question.roles.items())},
            "page": answer.page,
            "rows": [
                {k: row.get(k) for k in ("rank", "record_id", "placed_by", "found_by", "list_ranks")}
                for row in explained.get("rows", [])
            ],
            "lookups": {name: info["candidates"] for name, info in explained.get("lookups", {}).items()},
        }
        out.write(json.dumps(line, separators=(",", ":")) + "\n")


def evaluate_corpus(
    name: str, corpus: Corpus, args: argparse.Namespace, gateway: EmbeddedGateway, out: TextIO | None
) -> None:
    """Loads the corpus into its database, runs every configuration with a vector and degraded,
    prints its table (and its miss analysis)."""
    profiles = configurations(args.grid, args.profile)
    analyse = args.misses and name != "own"
    results: dict[str, Recalls] = {}
    analysed: dict[str, list[Answer]] = {}
    started = time.perf_counter()
    with fresh_database(f"{args.database}_{name}", args.extension_version) as conn:
        loaded = load(conn, corpus, gateway)
        question_vectors = gateway.embed([q.text for q in corpus.questions])
        for configuration, (profile, tuning) in profiles.items():
            runs: dict[str, list[list[float]] | None] = {configuration: question_vectors}
            if configuration != "dense_only":  # a dense-only answer without a vector is empty
                runs[f"{configuration} degraded"] = None
            for run_name, vectors in runs.items():
                answers = evaluate(conn, corpus, loaded, vectors, profile, tuning, out is not None or analyse)
                results[run_name] = recalls(answers)
                if out is not None and not configuration.startswith("grid"):
                    dump(out, name, run_name, answers, loaded)
                if configuration in ("default", "exact_first"):
                    analysed[run_name] = answers
        report(name, corpus, results, args.markdown, time.perf_counter() - started)
        if analyse:
            from misses import analyse_misses  # the analysis needs numpy, the recall alone does not

            for run_name, answers in analysed.items():
                use_profile(conn, *profiles[run_name.removesuffix(" degraded")])
                analyse_misses(conn, name, run_name, corpus, loaded, answers, question_vectors)


def report(name: str, corpus: Corpus, results: dict[str, Recalls], markdown: bool, seconds: float) -> None:
    """A corpus's recall table (and its Markdown; the own corpus's targets)."""
    counts: dict[str, int] = defaultdict(int)
    for question in corpus.questions:
        counts[question.kind] += 1
        counts["all"] += 1
    order = CORPORA[name].kinds
    print(
        f"\n{name}: {len(corpus.records)} records, {len(corpus.edges)} edges, {len(corpus.windows)} windows,"
        f" {len(corpus.questions)} questions ({seconds:.0f} s)"
    )
    print_table(results, counts, order)
    if markdown:
        print_markdown(results, counts, order)
    if name == "own":
        print("\n".join(check_targets(results, counts)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true", help="also try the candidate weightings")
    parser.add_argument("--markdown", action="store_true", help="also print the recall tables of docs/evaluation.md")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="NAME=PROFILE",
        help="also evaluate this pipeline profile under this name (repeatable)",
    )
    parser.add_argument(
        "--base", action="store_true", help="the own corpus as before 0.2.0 (no label or dialogue question types)"
    )
    parser.add_argument(
        "--corpora", default=",".join(CORPORA), help=f"which corpora, comma-separated (default: {','.join(CORPORA)})"
    )
    parser.add_argument("--dump", type=Path, metavar="FILE", help="write every question's page as JSON lines")
    parser.add_argument(
        "--misses", action="store_true", help="analyse the evidence missed at 10 (the corpora shaped like real ones)"
    )
    parser.add_argument(
        "--database",
        default=os.environ.get("EMEM_EVAL_DATABASE", "emem_eval"),
        help="prefix of the databases made (and dropped first) for the corpora: PREFIX_own, ... (default emem_eval)",
    )
    parser.add_argument(
        "--extension-version",
        metavar="VERSION",
        help="create the extension at this release (e.g. 0.2.1, the previous one: its modules come with "
        "make install-legacy-modules) instead of the server's default, to compare releases",
    )
    args = parser.parse_args()
    malformed = [entry for entry in args.profile if not all(part.strip() for part in entry.partition("=")[::2])]
    if malformed:
        parser.error(f"--profile takes NAME=PROFILE, not {malformed[0]!r}")
    chosen = [name.strip() for name in args.corpora.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in CORPORA]
    if unknown or not chosen:
        parser.error(f"unknown corpora {unknown or args.corpora!r}: choose from {', '.join(CORPORA)}")
    started = time.perf_counter()
    gateway = EmbeddedGateway()
    print(
        f"emem evaluation: seed {args.seed}, page 1 of {PAGE_SIZE}, embedded model {gateway.declaration().model_name}"
    )
    for name, (profile, tuning) in configurations(args.grid, args.profile).items():
        print(f"  {name}: {profile}" + (f" with {tuning}" if tuning else ""))
    out = args.dump.open("w") if args.dump else None
    try:
        for name in chosen:
            corpus = (
                build_corpus(args.seed, extended=not args.base) if name == "own" else CORPORA[name].build(args.seed)
            )
            evaluate_corpus(name, corpus, args, gateway, out)
    finally:
        if out is not None:
            out.close()
    reproduce = "make eval" + (f" EVAL_ARGS='{' '.join(sys.argv[1:])}'" if sys.argv[1:] else "")
    print(f"({time.perf_counter() - started:.0f} s; reproduce with: {reproduce})")


if __name__ == "__main__":
    main()
