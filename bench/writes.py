"""What the load writes beside put_records, as each release of emem wants it written.

From 0.3.0 on emem has no triggers: edges go in through `emem.put_edges`, which writes their label
rows, a bulk-loaded window's members carry its lane, and `emem.check_derived()` lists any derived
row a load got wrong. Release 0.2.1, measured beside the running one (`--beside 0.2.1`), had
triggers on emem.edges that wrote the labels and their ends, so its bulk path was a plain INSERT
(as superuser), and its window members had no lane.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg

EDGE_BATCH = 5_000  # edges per call (put_edges takes at most 50,000)
SHOWN_PROBLEMS = 5


@dataclass(frozen=True)
class EdgeRow:
    from_id: int
    to_id: int
    relation: str
    properties: dict[str, str]


class Writes:
    """emem 0.3.0 and later: every derived row is written by the API."""

    release = "0.3.0"
    edges_by = "put_edges"
    member_lane = True  # window_members.lane_name

    def edges(self, conn: psycopg.Connection, rows: list[EdgeRow]) -> None:
        for start in range(0, len(rows), EDGE_BATCH):
            self.edge_batch(conn, rows[start : start + EDGE_BATCH])

    def edge_batch(self, conn: psycopg.Connection, rows: list[EdgeRow]) -> None:
        items = [
            {"from_record_id": r.from_id, "to_record_id": r.to_id, "relation": r.relation, "properties": r.properties}
            for r in rows
        ]
        conn.execute("select count(*) from emem.put_edges(%s::jsonb)", (json.dumps(items),))

    def derived_problems(self, conn: psycopg.Connection) -> tuple[int, list[tuple[Any, ...]]] | None:
        """How many rows emem.check_derived() lists, and the first of them."""
        rows = conn.execute(
            "select count(*) over (), derived, problem, detail from emem.check_derived() limit %s", (SHOWN_PROBLEMS,)
        ).fetchall()
        return (int(rows[0][0]) if rows else 0), [row[1:] for row in rows]


class Writes021(Writes):
    """Release 0.2.1: its triggers on emem.edges wrote the labels; no check_derived."""

    release = "0.2.1"
    edges_by = "bulk INSERT"
    member_lane = False

    def edge_batch(self, conn: psycopg.Connection, rows: list[EdgeRow]) -> None:
        conn.execute(
            """insert into emem.edges (from_record_id, to_record_id, relation, properties)
               select * from unnest(%s::bigint[], %s::bigint[], %s::text[], %s::jsonb[])""",
            (
                [r.from_id for r in rows],
                [r.to_id for r in rows],
                [r.relation for r in rows],
                [json.dumps(r.properties) for r in rows],
            ),
        )

    def derived_problems(self, conn: psycopg.Connection) -> tuple[int, list[tuple[Any, ...]]] | None:
        return None


class CitusWrites(Writes):
    """The installed release on a Citus cluster: the same writes, through the coordinator. emem.check_derived()
    refuses a cluster (it runs on one node only): the cluster's corpus is compared with one node's instead."""

    def derived_problems(self, conn: psycopg.Connection) -> tuple[int, list[tuple[Any, ...]]] | None:
        return None


CITUS_WRITES = CitusWrites()
# The releases a run can measure beside the installed one (their modules install beside its own).
PREVIOUS = {writes.release: writes for writes in (Writes021(),)}


def writes_for(release: str | None) -> Writes:
    """How to load `release` (None: the release installed by default)."""
    return PREVIOUS[release] if release is not None else Writes()


def require_derived_rows(conn: psycopg.Connection, writes: Writes) -> int | None:
    """0 when check_derived lists nothing (None when the release has no check); else fails,
    naming the first problems: a corpus loaded wrong is not worth timing."""
    found = writes.derived_problems(conn)
    if found is None:
        return None
    count, first = found
    if count:
        raise RuntimeError(f"emem.check_derived() lists {count} problems after the load, first: {first}")
    return 0
