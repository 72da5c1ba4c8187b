"""The recommended profile's latency beside the seed's on the evaluation's corpora, interleaved.

    python3 evaluation/latency.py                 # after make eval: its databases emem_eval_<corpus>
    python3 evaluation/latency.py --database emem_eval_main --corpus sessions

For each corpus, every question's page 1 with the seed's default profile and with
control/exact_first.conf's, with its question vector and degraded, one after the other in each
round (two connections, one per profile, so that both run warm under the same load). Prints the
p50 and p90 of the client's wall time per profile and mode, and their ratio. Not a test: nothing
here fails on a slow figure.
"""

import argparse
import statistics
import time
from pathlib import Path

import psycopg
from pages import PAGE_SIZE
from run import CORPORA, profile_of, server_dsn

from emem_client.gateways import EmbeddedGateway

PROFILES = {"default": "", "recommended": profile_of(Path(__file__).parent.parent / "control" / "exact_first.conf")}
MODES = ("vector", "degraded")


def timed_rounds(
    conns: dict[str, psycopg.Connection], questions: list[str], vectors: list[str], rounds: int
) -> dict[tuple[str, str], list[float]]:
    """Milliseconds per (profile, mode), every question in every round (the first one warms up)."""
    times: dict[tuple[str, str], list[float]] = {(p, m): [] for p in conns for m in MODES}
    for round_number in range(rounds + 1):
        for question, vector in zip(questions, vectors, strict=True):
            for mode in MODES:
                for profile, conn in conns.items():
                    started = time.perf_counter()
                    conn.execute(
                        "select emem.e_gather_find_envelope(%s, %s::vector, 1, %s)",
                        (question, vector if mode == "vector" else None, PAGE_SIZE),
                    ).fetchone()
                    if round_number:
                        times[(profile, mode)].append((time.perf_counter() - started) * 1000)
    return times


def report(name: str, questions: int, times: dict[tuple[str, str], list[float]]) -> None:
    print(f"{name}: {questions} questions")
    for mode in MODES:
        default, recommended = times[("default", mode)], times[("recommended", mode)]
        p50 = statistics.median(default), statistics.median(recommended)
        p90 = statistics.quantiles(default, n=10)[8], statistics.quantiles(recommended, n=10)[8]
        print(
            f"  {mode:9s} p50 default {p50[0]:6.2f} ms, recommended {p50[1]:6.2f} ms ({p50[1] / p50[0]:.2f}x);"
            f" p90 {p90[0]:6.2f} / {p90[1]:6.2f} ms ({p90[1] / p90[0]:.2f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="emem_eval", help="make eval's --database (its corpora's prefix)")
    parser.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="default: own and sessions")
    parser.add_argument("--seed", type=int, default=11, help="make eval's --seed (the corpora's questions)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    gateway = EmbeddedGateway()
    for name in args.corpus or ["own", "sessions"]:
        questions = [question.text for question in CORPORA[name].build(args.seed).questions]
        vectors = [str(vector) for vector in gateway.embed(questions)]
        dsn = server_dsn(f"{args.database}_{name}")
        conns = {profile: psycopg.connect(dsn, autocommit=True) for profile in PROFILES}
        for profile, conn in conns.items():
            conn.execute("select set_config('emem.pipeline_profile', %s, false)", (PROFILES[profile],))
        report(name, len(questions), timed_rounds(conns, questions, vectors, args.rounds))
        for conn in conns.values():
            conn.close()


if __name__ == "__main__":
    main()
