"""Nothing acknowledged is lost.

- A bulk ingest (batches through emem.put_records, each its own transaction, from a thread) is
  cut by SIGKILL of the postmaster and of its processes; after a restart every batch whose commit
  returned is there whole, and no batch is there in part. The faults are injected into a private,
  throwaway cluster (initdb in a temporary directory, same binaries and extension as the test
  server), so the shared cluster and whoever else uses it are never touched.
- Concurrent writers and finders (agent roles on loopback, bounded: one connection each, a few
  milliseconds between calls) run for EMEM_SOAK_SECONDS (120 by default) with no error, deadlocks
  retried, and counts that add up to what the writers saw acknowledged.

Both are slow: `python3 -m pytest -m slow`. The race on one source_key is quick and runs by default.
"""

import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TypedDict

import figures
import psycopg
import pytest
from clusters import Cluster, throwaway_cluster
from derived import derived_mismatch
from psycopg import errors
from queries import row, scalar

pytest_plugins = ["figures"]

SOAK_SECONDS = float(os.environ.get("EMEM_SOAK_SECONDS", "120"))
FAULTS = int(os.environ.get("EMEM_CRASH_FAULTS", "3"))
BATCH = 150
RETRIED = (errors.DeadlockDetected, errors.SerializationFailure)


# ---- a race that needs no fault -------------------------------------------------------------------------


def test_concurrent_reingest_of_one_source_key_writes_it_once(db: psycopg.Connection, dsn: Callable[..., str]) -> None:
    """Two ingest workers write the same source at once: one creates the record, the other gets
    the stored id back (created = false), as a re-ingest does; neither gets an error."""
    db.execute("select emem.create_lane('sales')")
    item = json.dumps([{"kind": "note", "content": "chunk", "lane": "sales", "source_key": "file:a#1"}])
    with psycopg.connect(dsn()) as first, psycopg.connect(dsn(), autocommit=True) as second:
        created_first = row(first, "select record_id, created from emem.put_records(%s)", (item,))
        outcome: dict[str, object] = {}

        def write_again() -> None:
            try:
                outcome["second"] = second.execute(
                    "select record_id, created from emem.put_records(%s)", (item,)
                ).fetchone()
            except psycopg.Error as error:
                outcome["second"] = f"{error.sqlstate}: {error.diag.message_primary}"

        racer = threading.Thread(target=write_again)
        racer.start()
        time.sleep(0.3)  # the second writer now waits on the first one's uncommitted key
        first.commit()
        racer.join(10)
    assert outcome["second"] == (created_first[0], False)
    assert scalar(db, "select count(*) from emem.records") == 1


# ---- a private cluster to kill ------------------------------------------------------------------------------


@pytest.fixture
def private_cluster(db: psycopg.Connection) -> Iterator[Cluster]:
    """A cluster of its own with emem, a lane and a space; removed afterwards."""
    with throwaway_cluster(db, "crash") as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("select emem.create_lane('ingest')")
            conn.execute("select emem.create_embedding_space('crash-model', 4, null, true)")
        yield cluster


def batch_items(number: int) -> str:
    rng = random.Random(number)
    items = []
    for i in range(BATCH):
        item: dict[str, object] = {
            "kind": "note",
            "content": f"batch {number} item {i} INV-{number}-{i}",
            "lane": "ingest",
            "tags": [f"batch-{number}", "crash test"],
            "source_key": f"b{number}-{i}",
            "vector": [rng.uniform(0.1, 1) for _ in range(4)],
        }
        if i % 3 == 0:
            item |= {"kind": "conversation", "thread_id": f"batch-{number}", "thread_position": i}
        items.append(item)
    return json.dumps(items)


@dataclass
class Ingest:
    """Batches sent in order from a thread; a batch is acknowledged when its commit returned."""

    dsn: str
    next_batch: int
    sent: list[int] = field(default_factory=list)
    acknowledged: list[int] = field(default_factory=list)
    failure: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while True:
                    number = self.next_batch
                    self.next_batch += 1
                    self.sent.append(number)
                    conn.execute("select count(*) from emem.put_records(%s::jsonb)", (batch_items(number),))
                    self.acknowledged.append(number)
        except psycopg.OperationalError:
            pass  # the server died under us: the batch in flight is not acknowledged
        except BaseException as error:  # reported by the test
            self.failure = error


def check_batches(conn: psycopg.Connection, ingest: Ingest) -> int:
    """Every acknowledged batch whole; the batch in flight whole or absent; nothing else. Returns
    the number of records checked."""
    stored = {
        row[0]: row[1:]
        for row in conn.execute(
            "select split_part(r.source_key, '-', 1), count(*), count(distinct t.tag), count(v.record_id)"
            " from emem.records r left join emem.record_tags t on t.record_id = r.record_id and t.tag like 'batch-%%'"
            " left join emem.record_vectors v on v.record_id = r.record_id group by 1"
        )
    }
    acknowledged = set(ingest.acknowledged)
    for number in ingest.sent:
        records, tags, vectors = stored.pop(f"b{number}", (0, 0, 0))
        whole = (records, tags, vectors) == (BATCH, 1, BATCH)
        if number in acknowledged:
            assert whole, f"acknowledged batch {number} is not whole after the crash: {records} records"
        else:
            assert whole or records == 0, f"batch {number} (in flight) is there in part: {records} records"
    assert not stored, f"records of batches never sent: {sorted(stored)}"
    total: int = scalar(conn, "select count(*) from emem.records")
    whole_tags = scalar(conn, "select count(*) from emem.record_tags where tag = 'crash test'")
    assert whole_tags == total
    return total


@pytest.mark.slow
def test_every_acknowledged_batch_survives_sigkill_of_the_postmaster(private_cluster: Cluster) -> None:
    cluster, rng = private_cluster, random.Random()
    ingest = Ingest(cluster.dsn(), next_batch=1)
    for _ in range(FAULTS):
        before = len(ingest.acknowledged)
        worker = threading.Thread(target=ingest.run, daemon=True)
        worker.start()
        target, deadline = before + rng.randint(3, 12), time.monotonic() + 300
        while len(ingest.acknowledged) < target:
            assert worker.is_alive() and time.monotonic() < deadline, f"the ingest stopped: {ingest.failure!r}"
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.15))  # land inside the next batch's transaction
        cluster.kill()
        worker.join(60)
        assert not worker.is_alive() and ingest.failure is None, ingest.failure
        cluster.start()
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            figures.add("records checked", check_batches(conn, ingest), detail="after SIGKILL")
            in_flight = ingest.sent[-1] not in ingest.acknowledged and scalar(
                conn, "select count(*) from emem.records where source_key = %s", (f"b{ingest.sent[-1]}-0",)
            )
        figures.add(
            "faults injected",
            detail="SIGKILL mid-batch, batch absent after restart"
            if in_flight == 0
            else "SIGKILL mid-batch, batch committed but not acknowledged"
            if in_flight
            else "SIGKILL between batches",
        )
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        # Indexes survived too: amcheck on every B-tree, and the HNSW and GIN indexes answer.
        conn.execute("create extension if not exists amcheck")
        for (index,) in conn.execute(
            "select c.oid::regclass::text from pg_index i join pg_class c on c.oid = i.indexrelid"
            " join pg_am a on a.oid = c.relam where a.amname = 'btree'"
            " and c.relnamespace = 'emem'::regnamespace"
        ).fetchall():
            conn.execute("select bt_index_check(%s::regclass, true)", (index,))
        last = ingest.acknowledged[-1]
        found = scalar(
            conn, "select emem.e_gather_find_envelope(%s, '[1,1,1,1]', 1, 1000)", (f"INV-{last}-7 batch-{last}",)
        )
        assert f"b{last}-7" in {
            r[0]
            for r in conn.execute(
                "select source_key from emem.records where record_id = any(%s)",
                ([row["record_id"] for row in found["rows"]],),
            )
        }
    assert len(ingest.acknowledged) >= FAULTS


# ---- concurrent writers and finders ------------------------------------------------------------------------

TAG_POOL = ["alpha", "beta", "gamma", "delta", "project apollo", "invoice", "customer:acme"]
QUESTIONS = ["alpha invoice", "project apollo", "INV-7 customer:acme", "turn 2 about gamma", "delta beta", "note"]
DIMENSION = 8


def vector(rng: random.Random) -> str:
    return "[" + ",".join(f"{rng.uniform(-1, 1):.4f}" for _ in range(DIMENSION - 1)) + ",1]"


class Held(TypedDict):
    """A record as the writers saw it acknowledged."""

    lane: str
    tags: set[str]


@dataclass
class Model:
    """What the writers saw acknowledged: the counts the database must end with."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    records: dict[int, Held] = field(default_factory=dict)
    edges: int = 0
    windows: dict[tuple[int, ...], set[int]] = field(default_factory=dict)
    operations: int = 0
    retries: int = 0
    failures: list[str] = field(default_factory=list)


def retrying(model: Model, call: Callable[[], object]) -> object:
    for _ in range(20):
        try:
            return call()
        except RETRIED:
            with model.lock:
                model.retries += 1
            time.sleep(0.01)
    raise AssertionError("still deadlocked after 20 tries")


class Writer:
    def __init__(self, number: int, role_dsn: str, model: Model, deadline: float) -> None:
        self.number, self.dsn, self.model, self.deadline = number, role_dsn, model, deadline
        self.rng = random.Random(number)
        self.lane = f"writer{number}"
        self.mine: list[int] = []
        self.threads: list[list[int]] = []

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while time.monotonic() < self.deadline and not self.model.failures:
                    step = self.rng.choices(
                        [self.batch, self.tag, self.untag, self.link, self.window, self.revector],
                        weights=[4, 3, 1, 2, 2, 1],
                    )[0]
                    if step != self.batch and not self.mine:
                        step = self.batch
                    retrying(self.model, partial(step, conn))
                    with self.model.lock:
                        self.model.operations += 1
                    time.sleep(self.rng.uniform(0, 0.005))
        except Exception as error:  # reported by the test
            with self.model.lock:
                self.model.failures.append(f"writer {self.number}: {error!r}")

    def batch(self, conn: psycopg.Connection) -> None:
        rng = self.rng
        thread = f"w{self.number}-{len(self.threads)}-{rng.getrandbits(32)}"
        items = [
            {
                "kind": "note",
                "content": f"note {rng.randint(0, 99)} INV-{rng.randint(0, 9)} of {self.lane}",
                "lane": rng.choice([self.lane, self.lane, "commons"]),
                "tags": rng.sample(TAG_POOL, 2),
                "vector": json.loads(vector(rng)),
            }
            for _ in range(rng.randint(3, 12))
        ]
        turns = rng.randint(3, 6)
        items += [
            {
                "kind": "conversation",
                "content": f"turn {i} about {rng.choice(TAG_POOL)}",
                "lane": self.lane,
                "thread_id": thread,
                "thread_position": i,
                "tags": [rng.choice(TAG_POOL)],
                "vector": json.loads(vector(rng)),
            }
            for i in range(turns)
        ]
        ids = [r[0] for r in conn.execute("select record_id from emem.put_records(%s)", (json.dumps(items),))]
        with self.model.lock:
            for record_id, item in zip(ids, items, strict=True):
                self.model.records[record_id] = {"lane": item["lane"], "tags": set(item["tags"])}
        self.mine += ids
        self.threads.append(ids[-turns:])

    def tag(self, conn: psycopg.Connection) -> None:
        record_id, tags = self.rng.choice(self.mine), self.rng.sample(TAG_POOL, 2)
        conn.execute("select emem.tag_record(%s, %s)", (record_id, tags))
        with self.model.lock:
            self.model.records[record_id]["tags"] |= set(tags)

    def untag(self, conn: psycopg.Connection) -> None:
        record_id, tags = self.rng.choice(self.mine), self.rng.sample(TAG_POOL, 3)
        removed = scalar(conn, "select emem.untag_record(%s, %s)", (record_id, tags))
        with self.model.lock:
            had = self.model.records[record_id]["tags"]
            assert removed == len(had & set(tags)), (record_id, had, tags, removed)
            had -= set(tags)

    def link(self, conn: psycopg.Connection) -> None:
        with self.model.lock:  # any record in a lane this writer reads: its own, or commons
            readable = [i for i, r in self.model.records.items() if r["lane"] in (self.lane, "commons")]
        ends = self.rng.sample(readable, 2) if len(readable) > 1 else [readable[0]] * 2
        conn.execute(
            "select emem.link_records(%s, %s, 'mentions', %s)",
            (*ends, json.dumps({"writer": self.number, "code": f"INV-{self.rng.randint(0, 9)}"})),
        )
        with self.model.lock:
            self.model.edges += 1

    def window(self, conn: psycopg.Connection) -> None:
        turns = self.rng.choice(self.threads)
        first = self.rng.randrange(len(turns) - 1)
        members = turns[first : first + self.rng.randint(2, 3)]
        conn.execute("select emem.put_window(%s, %s::vector)", (members, vector(self.rng)))
        with self.model.lock:
            self.model.windows[(tuple(members))] = set(members)

    def revector(self, conn: psycopg.Connection) -> None:
        conn.execute("select emem.put_record_vector(%s, %s::vector)", (self.rng.choice(self.mine), vector(self.rng)))


class Finder:
    def __init__(self, number: int, role_dsn: str, lanes: set[str], model: Model, deadline: float) -> None:
        self.number, self.dsn, self.lanes, self.model, self.deadline = number, role_dsn, lanes, model, deadline
        self.rng = random.Random(1000 + number)
        self.finds = 0

    def run(self) -> None:
        calls = [self.envelope, self.table, self.timeline, self.intersection, self.explain]
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while time.monotonic() < self.deadline and not self.model.failures:
                    call = self.rng.choice(calls)
                    retrying(self.model, partial(call, conn))
                    self.finds += 1
                    time.sleep(self.rng.uniform(0, 0.005))
        except Exception as error:  # reported by the test
            with self.model.lock:
                self.model.failures.append(f"finder {self.number}: {error!r}")

    def question(self) -> tuple[str, str | None]:
        return self.rng.choice(QUESTIONS), self.rng.choice([vector(self.rng), None])

    def envelope(self, conn: psycopg.Connection) -> None:
        page_size = self.rng.choice([5, 30])
        found = scalar(
            conn,
            "select emem.e_gather_find_envelope(%s, %s::vector, %s, %s)",
            (*self.question(), self.rng.randint(1, 3), page_size),
        )
        assert {r["lane"] for r in found["rows"]} <= self.lanes
        assert found["total_pages"] == math.ceil(found["total_candidates"] / page_size)

    def table(self, conn: psycopg.Connection) -> None:
        lanes = {r[0] for r in conn.execute("select lane from emem.e_gather_find(%s, %s::vector)", self.question())}
        assert lanes <= self.lanes

    def timeline(self, conn: psycopg.Connection) -> None:
        lanes = {
            r[0]
            for r in conn.execute(
                "select lane from emem.e_timeline(now() - interval '1 hour', now(), %s, 50)", (self.rng.randint(1, 5),)
            )
        }
        assert lanes <= self.lanes

    def intersection(self, conn: psycopg.Connection) -> None:
        lanes = {
            r[0]
            for r in conn.execute("select lane from emem.records_with_all_tags(%s)", (self.rng.sample(TAG_POOL, 2),))
        }
        assert lanes <= self.lanes

    def explain(self, conn: psycopg.Connection) -> None:
        conn.execute("select emem.e_gather_explain(%s, %s::vector)", self.question()).fetchone()


@pytest.mark.slow
def test_concurrent_writers_and_finders_keep_every_count(
    db: psycopg.Connection, make_role: Callable[..., str], dsn: Callable[..., str]
) -> None:
    writers_count = finders_count = 3
    db.execute("select emem.create_lane('commons')")
    db.execute("select emem.create_embedding_space('soak-model', %s, null, true)", (DIMENSION,))
    model, deadline = Model(), time.monotonic() + SOAK_SECONDS
    writers: list[Writer] = []
    finders: list[Finder] = []
    for n in range(writers_count):
        db.execute("select emem.create_lane(%s)", (f"writer{n}",))
        db.execute("select emem.create_agent_profile(%s, array[%s, 'commons'])", (f"team{n}", f"writer{n}"))
        writers.append(Writer(n, dsn(make_role("writer", f"team{n}")), model, deadline))
    for n in range(finders_count):
        finders.append(Finder(n, dsn(make_role("finder", f"team{n}")), {f"writer{n}", "commons"}, model, deadline))
    runners: list[Writer | Finder] = [*writers, *finders]
    threads = [threading.Thread(target=runner.run, daemon=True) for runner in runners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SOAK_SECONDS + 120)
    assert not any(t.is_alive() for t in threads), "a writer or finder hangs"
    assert not model.failures, "\n".join(model.failures)
    assert model.operations > 0 and sum(f.finds for f in finders) > 0

    # The counts add up to what the writers saw acknowledged.
    stored = {
        row[0]: {"lane": row[1], "tags": set(row[2])}
        for row in db.execute(
            "select r.record_id, r.lane_name, array(select tag from emem.record_tags t where t.record_id = r.record_id)"
            " from emem.records r"
        )
    }
    assert stored == model.records
    assert scalar(db, "select count(*) from emem.record_vectors") == len(model.records)
    assert scalar(db, "select count(*) from emem.edges") == model.edges
    windows = {
        tuple(sorted(row[0]))
        for row in db.execute("select array_agg(record_id) from emem.window_members group by window_id")
    }
    assert windows == {tuple(sorted(members)) for members in model.windows.values()}
    # A derived count kept by triggers must match the tags it counts, per lane (0.2.0).
    counted = db.execute(
        "select tag, lane_name, record_count from emem.tag_vocabulary where record_count > 0"
    ).fetchall()
    tagged = db.execute("select tag, lane_name, count(*) from emem.record_tags group by tag, lane_name").fetchall()
    assert sorted(counted) == sorted(tagged)
    assert derived_mismatch(db) == []  # every derived row, written by the API
    figures.add("records checked", len(stored), detail="soak")
    print(
        f"soak: {model.operations} writes, {sum(f.finds for f in finders)} reads, {model.retries} retries"
        f" (deadlocks or serialization failures), {len(stored)} records in {SOAK_SECONDS:.0f} s"
    )
