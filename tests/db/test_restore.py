"""Parallel restore: `pg_dump -Fd` of a database holding every kind of emem data, then
`pg_restore -j 1, 2 and 4` into fresh databases, give the same rows, the same derived tables, the
per-space HNSW indexes and the same find answers. pg_restore -j loads the tables' data in
parallel, in any order: nothing in emem may depend on one table being loaded before another.

The server's own pg_dump and pg_restore (its BINDIR) are used, so their version is the server's.
"""

import random
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from clusters import throwaway_cluster
from databases import MakeRole
from queries import scalar
from writes import put

LANES = ("sales", "ops", "hr")
RECORDS_PER_LANE = 400
# Questions with a vector (the active space has 3 dimensions) and without one (degraded).
QUESTIONS = [
    ("apollo INV-2031", "[1,0,0]"),
    ("apollo INV-2031", None),
    ("billed kowalski", "[0,1,0]"),
    ("vacuum replica turn", "[0.2,0.3,0.9]"),
    ("handbook wal", None),
    ("hr salary review", "[0.5,0.5,0.1]"),
]


def server_binary(db: psycopg.Connection, name: str) -> str:
    """pg_dump or pg_restore of the server's own installation."""
    bindir = scalar(db, "select setting from pg_catalog.pg_config where name = 'BINDIR'")
    path = Path(bindir) / name
    if not path.is_file():
        pytest.skip(f"{name} is not installed beside the server ({bindir})")
    return str(path)


# Vectors drawn at random (every one distinct, in the database too): the answers then hold no
# tied distances, whose order an HNSW graph (built again by the restore) may break either way.
RANDOM_VECTOR = "('[' || random() || ',' || random() || ',' || random() || '%s]')::vector"


def records_of_lane(lane: str, randomly: random.Random) -> list[dict[str, Any]]:
    """Notes, entities, conversations and files of one lane, with tags, metadata and vectors."""
    items: list[dict[str, Any]] = []
    for n in range(RECORDS_PER_LANE):
        kind = ("note", "entity", "conversation", "file")[n % 4]
        item: dict[str, Any] = {
            "kind": kind,
            "content": f"{lane} {kind} {n}: apollo INV-{2000 + n % 50} billed kowalski vacuum replica wal",
            "lane": lane,
            "tags": [f"{lane}-tag-{n % 7}", "apollo" if n % 3 else "handbook"],
            "authority": round((n % 10) / 10, 1),
            "occurred_at": f"2024-0{1 + n % 9}-1{n % 10}T0{n % 10}:00:00Z",
            "metadata": {"n": n, "lane": lane},
            "source_key": f"{lane}:{n}",
            "vector": [randomly.random() for _ in range(3)],
        }
        if kind in ("conversation", "file"):
            item |= {"thread_id": f"{lane}-{kind}-{n // 40}", "thread_position": n // 4 % 10}
        items.append(item)
    return items


def every_kind_of_data(db: psycopg.Connection, make_role: MakeRole) -> list[str]:
    """Every kind of emem data; returns the roles bound to agent profiles."""
    for lane in LANES:
        db.execute("select emem.create_lane(%s)", (lane,))
    db.execute("select emem.create_agent_profile('clerk', array['sales', 'ops'], array['sales'])")
    db.execute("select emem.create_agent_profile('auditor', array['hr'])")
    db.execute("select emem.set_agent_setting('clerk', 'emem.lane_isolation', 'strict')")
    db.execute("select emem.set_agent_setting('auditor', 'emem.pipeline_profile', 'tags:3, fulltext:1')")
    db.execute("select emem.set_agent_setting('auditor', 'emem.record_vector_candidates', '50')")
    roles = [make_role("clerk", "clerk"), make_role("auditor", "auditor")]
    db.execute("select emem.create_embedding_space('model-four', 4, 'fp4', false)")
    db.execute("select emem.create_embedding_space('model-three', 3, 'fp3', true)")
    randomly = random.Random(15)
    for lane in LANES:
        put(db, records_of_lane(lane, randomly))
    # The inactive space holds vectors too.
    db.execute(
        f"select count(emem.put_record_vector(record_id, {RANDOM_VECTOR % ',1'}, s.space_id))"
        " from emem.records, emem.embedding_spaces as s where s.model_name = 'model-four' and record_id % 3 = 0"
    )
    put_windows(db)
    db.execute(
        "select count(emem.link_records(a.record_id, b.record_id, 'billed_by',"
        " jsonb_build_object('invoice', 'INV-' || a.record_id, 'amount', a.record_id * 10)))"
        " from emem.records as a join emem.records as b on b.record_id = a.record_id + 1"
        " where a.record_id % 5 = 0"
    )
    db.execute("select emem.tag_record(record_id, array['reviewed']) from emem.records where record_id % 11 = 0")
    db.execute("select emem.untag_record(record_id, array['handbook']) from emem.records where record_id % 13 = 0")
    return roles


def put_windows(db: psycopg.Connection) -> None:
    """Windows of two consecutive records over every thread, in both spaces."""
    db.execute(
        "select count(emem.put_window(array[a.record_id, b.record_id],"
        f" case s.dimension when 3 then {RANDOM_VECTOR % ''} else {RANDOM_VECTOR % ',1'} end, s.space_id))"
        " from emem.records as a"
        " join emem.records as b on (b.lane_name, b.kind, b.thread_id, b.thread_position)"
        "   = (a.lane_name, a.kind, a.thread_id, a.thread_position + 1)"
        " cross join emem.embedding_spaces as s"
    )


def dumped_tables(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """(name, kind) of every table and sequence the extension registered for pg_dump."""
    return conn.execute(
        "select c.relname::text, c.relkind::text from pg_catalog.pg_extension as x"
        " cross join lateral unnest(x.extconfig) as t(oid) join pg_catalog.pg_class as c on c.oid = t.oid"
        " where x.extname = 'emem' order by 1"
    ).fetchall()


def table_rows(conn: psycopg.Connection, table: str) -> list[str]:
    return [row[0] for row in conn.execute(f"select t::text from emem.{table} as t order by 1")]


def snapshot(conn: psycopg.Connection, roles: list[str]) -> dict[str, Any]:
    """Every dumped table's rows, the derived tables, the indexes and the find answers."""
    rows: dict[str, Any] = {}
    for name, kind in dumped_tables(conn):
        if kind == "S":
            rows[name] = conn.execute(f"select last_value, is_called from emem.{name}").fetchone()
        else:
            rows[name] = table_rows(conn, name)
    for derived in ("tag_vocabulary", "edge_labels"):
        rows[derived] = table_rows(conn, derived)
    indexes = conn.execute(
        "select indexname::text, indexdef from pg_catalog.pg_indexes where schemaname = 'emem' order by 1"
    ).fetchall()
    return {"rows": rows, "indexes": indexes, "answers": answers(conn, roles)}


def answers(conn: psycopg.Connection, roles: list[str]) -> dict[str, Any]:
    """The find envelopes of every question, for the owner and for each bound role."""
    found: dict[str, Any] = {}
    for role in [None, *roles]:
        if role is not None:
            conn.execute(f"set role {role}")
        for question, vector in QUESTIONS:
            for page in (1, 2):
                envelope = scalar(
                    conn, "select emem.e_gather_find_envelope(%s, %s::vector, %s, 20)", (question, vector, page)
                )
                found[f"{role} {question} {vector} page {page}"] = envelope
        conn.execute("reset role")
    return found


@pytest.fixture
def target_database(db: psycopg.Connection) -> Iterator[str]:
    name = f"emem_restore_{uuid.uuid4().hex[:8]}"
    db.execute(f"create database {name} template template0")
    yield name
    db.execute(f"drop database {name} with (force)")


@pytest.mark.corpus(every_kind_of_data, read_only=True)  # dumped, never changed: the restores change their copies
@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_parallel_restore_gives_equal_rows_indexes_and_answers(
    db: psycopg.Connection, built: list[str], target_database: str, tmp_path: Path, jobs: int
) -> None:
    roles = built
    before = snapshot(db, roles)
    info = db.info
    connection = ["-h", info.host, "-p", str(info.port), "-U", info.user]
    folder = tmp_path / "dump"
    subprocess.run(
        [server_binary(db, "pg_dump"), *connection, "-Fd", "-j", "2", "-f", str(folder), info.dbname],
        check=True,
        capture_output=True,
    )
    restore = subprocess.run(
        [server_binary(db, "pg_restore"), *connection, "-j", str(jobs), "-d", target_database, str(folder)],
        capture_output=True,
        text=True,
    )
    assert (restore.returncode, restore.stderr) == (0, "")
    with psycopg.connect(
        host=info.host, port=info.port, user=info.user, dbname=target_database, autocommit=True
    ) as copy:
        assert scalar(copy, "select emem.rebuild_derived()") == 2  # the HNSW indexes of the two spaces
        after = snapshot(copy, roles)
        assert after["rows"].keys() == before["rows"].keys()
        for table, rows in before["rows"].items():
            assert after["rows"][table] == rows, f"table {table} differs after pg_restore -j {jobs}"
        assert after["indexes"] == before["indexes"]
        assert after["answers"] == before["answers"]
        hnsw = [name for name, definition in after["indexes"] if " USING hnsw " in definition]
        # record and window vectors of each of the two spaces, and of each lane the strict clerk reads
        assert len(hnsw) == 2 * 2 + 2 * 2 * 2
        assert len(before["rows"]["records"]) == len(LANES) * RECORDS_PER_LANE
        owner_first_pages = [e for key, e in before["answers"].items() if key.startswith("None") and "page 1" in key]
        assert all(envelope["rows"] for envelope in owner_first_pages)
        new_id = scalar(copy, "select emem.put_record('note', 'after restore', 'sales')")
        assert new_id == int(before["rows"]["records_record_id_seq"][0]) + 1


def test_a_restore_into_another_cluster_binds_roles_by_name(db: psycopg.Connection, tmp_path: Path) -> None:
    """Restored into another cluster, whose roles were created in another order (so every OID
    differs), a binding holds for the role of the same name; a role that was never bound, even one
    holding a bound role's old OID, reads nothing; the binding of a role dropped before the dump is
    dangling there and goes with role_bindings(remove_dangling => true)."""
    suffix = uuid.uuid4().hex[:6]
    reader, clerk, gone, newcomer = (f"{name}_{suffix}" for name in ("reader", "clerk", "gone", "newcomer"))
    for lane in ("hr", "sales"):
        db.execute("select emem.create_lane(%s)", (lane,))
        db.execute("select emem.create_agent_profile(%s, array[%s])", (f"{lane}_profile", lane))
        db.execute("select emem.put_record('note', %s, %s)", (f"a {lane} note", lane))
    for role, profile in ((reader, "hr_profile"), (clerk, "sales_profile"), (gone, "hr_profile")):
        db.execute(f"create role {role} login")
        db.execute("select emem.bind_role(%s, %s)", (role, profile))
    db.execute(f"drop role {gone}")  # its binding stays behind in the dump
    dump = tmp_path / "emem.dump"
    info = db.info
    connection = ["-h", info.host, "-p", str(info.port), "-U", info.user]
    subprocess.run([server_binary(db, "pg_dump"), *connection, "-Fc", "-f", str(dump), info.dbname], check=True)
    try:
        with throwaway_cluster(db, "bindings") as other:
            with psycopg.connect(other.dsn(), autocommit=True) as admin:
                for role in (newcomer, clerk, reader):  # another order than the source's
                    admin.execute(f"create role {role} login")
                admin.execute("create database restored")
            restore = subprocess.run(
                [
                    server_binary(db, "pg_restore"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(other.port),
                    "-U",
                    "postgres",
                    "-d",
                    "restored",
                    str(dump),
                ],
                capture_output=True,
                text=True,
            )
            assert (restore.returncode, restore.stderr) == (0, "")
            with psycopg.connect(other.dsn("restored"), autocommit=True) as copy:
                stored: dict[str, int] = dict(
                    copy.execute("select role_name, role_id from emem.role_profiles").fetchall()
                )
                oids: dict[str, int] = dict(
                    copy.execute("select rolname, oid from pg_roles where rolname like %s", (f"%_{suffix}",))
                )
                assert stored[reader] != oids[reader] and stored[clerk] != oids[clerk]
                # the dropped role's old OID now names the newcomer, as a restore may make it
                copy.execute("update emem.role_profiles set role_id = %s where role_name = %s", (oids[newcomer], gone))
                assert lanes_read(copy, reader) == ["hr"] and lanes_read(copy, clerk) == ["sales"]
                assert lanes_read(copy, newcomer) == []
                copy.execute(f"set role {newcomer}")
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="bound to no agent profile"):
                    copy.execute("select * from emem.e_gather_find('note')")
                copy.execute("reset role")
                bindings = copy.execute("select role_name, holds from emem.role_bindings(remove_dangling => true)")
                assert sorted(bindings.fetchall()) == [(clerk, True), (reader, True)]
    finally:
        for role in (reader, clerk):
            db.execute(f"drop owned by {role}")
            db.execute(f"drop role {role}")


def lanes_read(conn: psycopg.Connection, role: str) -> list[str]:
    """The lanes of the records a role reads directly (row-level security)."""
    conn.execute(f"set role {role}")
    try:
        return [row[0] for row in conn.execute("select distinct lane_name from emem.records order by 1")]
    finally:
        conn.execute("reset role")
