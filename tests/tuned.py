"""A session whose lookups run with other Tuning figures, to reach the broad-list paths on a small corpus."""

import psycopg

LAZY = {"exact_candidates": 2, "filtered_scan_cost_ratio": 1e-9, "degraded_probe_cost_ratio": 1e-9}


def read_lazily(conn: psycopg.Connection) -> None:
    """This backend reads any match of more than 2 records as broad (counted, walked, probed in
    record-id order) instead of whole. Needs a superuser's session (a DO block in plpython3u)."""
    conn.execute("select emem.analyse_question('warm')")  # the backend's state exists from here on
    changes = ", ".join(f"{name}={value!r}" for name, value in LAZY.items())
    conn.execute(
        "do $$ import dataclasses; state = GD['emem_db'];"
        f" state.tuning = dataclasses.replace(state.tuning, {changes}) $$ language plpython3u"
    )
