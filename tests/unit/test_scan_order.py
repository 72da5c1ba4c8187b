"""An HNSW scan's candidates: nearest first, equal distances by record id (the graph returns ties
in an order that differs between builds and runs, and a page's ranks must not follow it)."""

from collections.abc import Sequence
from typing import Any

from fake_plpy import FakePlpy, Rows, reader

SCAN = "select record_id, distance from the scan"


def answer(sql: str, args: Sequence[Any]) -> Rows:
    if "current_setting('hnsw.ef_search')" in sql and "set_config" not in sql:
        return [{"n": 40}]
    if "set_config" in sql:
        return [{"name": name, "was": "40"} for name in args[0]]
    if "pg_dist_partition" in sql:  # one node, not a Citus cluster
        return [{"c": False}]
    assert sql == SCAN
    # As a graph may give them: a tie in the order of its walk, the record without a vector first.
    return [
        {"record_id": 9, "distance": 0.2},
        {"record_id": 4, "distance": None},
        {"record_id": 7, "distance": 0.1},
        {"record_id": 3, "distance": 0.1},
    ]


def test_a_scans_equal_distances_go_by_record_id() -> None:
    found = reader(FakePlpy(answer), vector="[1,0,0,0]").scan("lookup.scan", SCAN, 4, 40, {})
    assert [(c.record_id, c.distance) for c in found] == [(3, 0.1), (7, 0.1), (9, 0.2), (4, None)]
