"""emem on a real Citus cluster: a coordinator and two workers on loopback, built from the test
server's binaries when Citus is installed there (skipped with one line otherwise; Citus is in
neither Debian's archive nor PyPI). The same corpus is written through the API into the cluster
(distributed by emem.distribute()) and into one node; every find of the questions below, under
both profiles, with a vector and degraded, for the owner, an agent under page_filter and one under
strict isolation, must give the same pages and totals on both. The cluster is set to refuse the
silent failures a cluster allows: shards that answer an HNSW scan with pgvector's default settings
(2 shards of 40 rows for the 100 nearest), a LIMIT over rows in whichever order the shards send
them (every find runs twice), and a statement that pulls the vectors to the coordinator (its
intermediate results are capped below their size)."""

import json
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest
from clusters import Cluster, free_port, plpython_modules
from queries import scalar
from tuned import read_lazily

DIMENSION = 128  # 250 such vectors take some 130 kB: more than the cap on intermediate results
INTERMEDIATE_CAP = "64kB"
LANES = ("alpha", "beta", "gamma")  # alpha and beta hash to one of 2 shards, gamma to the other
PROFILES = {
    "default": "record_vectors, tags, window_vectors, fulltext",
    "recommended": "record_vectors:30, tags_by_terms:35, window_vectors:10, thread_context:15,"
    " fulltext_by_rarity:5, fulltext_words:10",
}
QUESTIONS = [
    "Which invoices did Kowalski send for project apollo?",
    "What was audited in Q3?",
    "INV-2031 billed by the north wind team",
    "who reviewed the release plan",
    "common notes about the budget",
]


def citus_available(db: psycopg.Connection) -> bool:
    sharedir = Path(scalar(db, "select setting from pg_config where name = 'SHAREDIR'"))
    return (sharedir / "extension" / "citus.control").exists()


def unit(rng: random.Random) -> list[float]:
    values = [rng.gauss(0, 1) for _ in range(DIMENSION)]
    norm = sum(v * v for v in values) ** 0.5
    return [round(v / norm, 6) for v in values]


def question_vector(question: str) -> str:
    return json.dumps(unit(random.Random(question)))


def write_corpus(conn: psycopg.Connection, roles: dict[str, str]) -> None:
    """The same records, tags, edges, windows and roles, through the API, on the node or cluster."""
    rng = random.Random(7)
    for lane in LANES:
        conn.execute("select emem.create_lane(%s)", (lane,))
    conn.execute("select emem.create_embedding_space('m', %s, null, true)", (DIMENSION,))
    words = ["invoice", "budget", "release", "audit", "plan", "notes", "apollo", "kestrel", "q3", "north wind"]
    items: list[dict[str, object]] = []
    for n in range(240):
        lane = LANES[n % 3]
        tags = ["common"] if n % 2 else []
        tags += rng.sample(["invoice", "project apollo", "release", "audit", "budget", "customer:north-wind"], 2)
        text = " ".join(rng.sample(words, 4))
        extra = " INV-2031 Kowalski" if n % 37 == 0 else (" Q3" if n % 11 == 0 else "")
        items.append(
            {"kind": "note", "lane": lane, "content": f"note {n}: {text}{extra}", "tags": tags, "vector": unit(rng)}
        )
    items += [
        {
            "kind": "conversation",
            "lane": "alpha",
            "thread_id": f"c{t}",
            "thread_position": p,
            "content": f"turn {p} of c{t}: {' '.join(rng.sample(words, 3))}",
            "vector": unit(rng),
        }
        for t in range(3)
        for p in range(6)
    ]
    ids = [r[0] for r in conn.execute("select record_id from emem.put_records(%s)", (json.dumps(items),))]
    edges = [
        {"from_record_id": ids[a], "to_record_id": ids[b], "relation": relation, "properties": properties}
        for a, b, relation, properties in (
            (0, 1, "billed", {"invoice": "INV-2031", "amount": "1200 EUR"}),
            (3, 4, "audited_by", {"team": "north-wind", "quarter": "Q3"}),
            (6, 7, "reviewed", {}),
            (9, 12, "about", {}),
            *((n, n + 3, "audited_by", {"quarter": "Q3"}) for n in range(12, 60, 5)),
        )
    ]
    conn.execute("select emem.put_edges(%s)", (json.dumps(edges),))
    turns = ids[240:]
    for t in range(3):
        for start in range(0, 5):
            members = turns[t * 6 + start : t * 6 + start + 2]
            conn.execute("select emem.put_window(%s, %s)", (members, json.dumps(unit(rng))))
    for mode in ("page_filter", "strict"):
        profile = f"reader_{mode}"
        conn.execute("select emem.create_agent_profile(%s, array['alpha', 'gamma'])", (profile,))
        conn.execute("select emem.set_agent_setting(%s, 'emem.lane_isolation', %s)", (profile, mode))
        conn.execute("select emem.bind_role(%s, %s)", (roles[mode], profile))


def answers(conn: psycopg.Connection, roles: dict[str, str]) -> dict[str, Any]:
    """Every find's page (rank, record, placing lookup, finders, distance) and totals."""
    found: dict[str, Any] = {}
    for reader in ("owner", "page_filter", "strict"):
        for name, profile in PROFILES.items():
            if reader == "owner":
                conn.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
            else:
                conn.execute(
                    "select emem.set_agent_setting(%s, 'emem.pipeline_profile', %s)", (f"reader_{reader}", profile)
                )
                conn.execute(f"set role {roles[reader]}")
            for question in QUESTIONS:
                for vector in (question_vector(question), None):
                    for page in (1, 2):
                        envelope = scalar(
                            conn, "select emem.e_gather_find_envelope(%s, %s::vector, %s, 12)", (question, vector, page)
                        )
                        key = f"{reader} {name} {question!r} {'vector' if vector else 'degraded'} page {page}"
                        found[key] = {
                            "totals": (envelope["total_candidates"], envelope["total_pages"], envelope["totals_exact"]),
                            "rows": [
                                (
                                    r["rank"],
                                    r["record_id"],
                                    r["placed_by"],
                                    sorted(r["found_by"]),
                                    None if r["distance"] is None else round(r["distance"], 5),
                                )
                                for r in envelope["rows"]
                            ],
                        }
            conn.execute("reset role")
    return found


class CitusCluster:
    """A coordinator and two workers of the test server's binaries, Citus preloaded."""

    def __init__(self, db: psycopg.Connection, stack: ExitStack) -> None:
        bindir = Path(scalar(db, "select setting from pg_config where name = 'BINDIR'"))
        modules = plpython_modules(db)
        self.nodes: list[Cluster] = []
        for n in range(3):
            datadir = Path(tempfile.mkdtemp(prefix=f"emem-citus-{n}-"))
            stack.callback(shutil.rmtree, datadir, ignore_errors=True)
            shutil.chown(datadir, "postgres", "postgres")
            node = Cluster(bindir, datadir, free_port(), [], modules)
            node.initdb()
            with (datadir / "postgresql.conf").open("a") as conf:
                conf.write("shared_preload_libraries = 'citus'\nmax_connections = 60\nmax_prepared_transactions = 60\n")
            node.start()
            stack.callback(node.stop)
            self.nodes.append(node)
        for node in self.nodes:
            with psycopg.connect(node.dsn(), autocommit=True) as conn:
                conn.execute("create extension citus")
        coordinator, *workers = self.nodes
        with psycopg.connect(coordinator.dsn(), autocommit=True) as conn:
            conn.execute("select citus_set_coordinator_host('127.0.0.1', %s)", (coordinator.port,))
            for worker in workers:
                conn.execute("select citus_add_node('127.0.0.1', %s)", (worker.port,))
            conn.execute("set client_min_messages = warning")
            conn.execute("create extension emem cascade")
            conn.execute("select emem.distribute(2)")  # 2 shards: 2 x 40 rows would not make the 100 nearest
            conn.execute(f"alter database postgres set citus.max_intermediate_result_size = '{INTERMEDIATE_CAP}'")

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.nodes[0].dsn(), autocommit=True)

    @staticmethod
    def placements(conn: psycopg.Connection) -> int:
        """On how many workers the records' lanes are placed."""
        count: int = scalar(
            conn,
            "select count(distinct p.nodeport) from emem.lanes as l join pg_dist_shard_placement as p"
            " on p.shardid = get_shard_id_for_distribution_column('emem.records', l.lane_name)",
        )
        return count


# The cluster and the roles of its two readers (by lane isolation mode); one node's database and its readers.
Citus = tuple[CitusCluster, dict[str, str]]
OneNode = tuple[psycopg.Connection, dict[str, str]]


@pytest.fixture(scope="module")
def citus(server: None, postgresql_noproc: Any) -> Iterator[Citus]:
    info = postgresql_noproc
    probe = f"emem_citus_probe_{free_port()}"
    with psycopg.connect(host=info.host, port=info.port, user=info.user, dbname="postgres", autocommit=True) as admin:
        admin.execute(f"create database {probe}")
        try:
            with psycopg.connect(host=info.host, port=info.port, user=info.user, dbname=probe, autocommit=True) as db:
                db.execute("set client_min_messages = warning")
                db.execute("create extension emem cascade")
                if not citus_available(db):
                    pytest.skip("Citus is not installed with the test server's PostgreSQL: the cluster tests need it")
                roles = {mode: f"citus_{mode}_{free_port()}" for mode in ("page_filter", "strict")}
                with ExitStack() as stack:
                    cluster = CitusCluster(db, stack)
                    with cluster.connect() as conn:
                        for role in roles.values():
                            conn.execute(f"create role {role} login")
                        write_corpus(conn, roles)
                        assert cluster.placements(conn) == 2, "the corpus must span both shards and both workers"
                    yield cluster, roles
        finally:
            admin.execute(f"drop database if exists {probe} with (force)")


@pytest.fixture
def one_node(db: psycopg.Connection, make_role: Callable[..., str], citus: Citus) -> OneNode:
    _, cluster_roles = citus
    roles = {mode: make_role(f"one_{mode}") for mode in cluster_roles}
    write_corpus(db, roles)
    return db, roles


def test_every_find_gives_the_pages_and_totals_of_one_node(citus: Citus, one_node: OneNode) -> None:
    cluster, cluster_roles = citus
    db, roles = one_node
    expected = answers(db, roles)
    with cluster.connect() as conn:
        first, second = answers(conn, cluster_roles), answers(conn, cluster_roles)
    assert first == second, "the cluster answered a find differently the second time"
    differing = [key for key in expected if first[key] != expected[key]]
    assert not differing, (
        f"{len(differing)} of {len(expected)} finds differ, e.g. {differing[0]}:\n"
        f"one node {expected[differing[0]]}\ncluster  {first[differing[0]]}"
    )
    assert any(page["rows"] for page in expected.values())


def plan_kinds(conn: psycopg.Connection) -> set[str]:
    """The kinds of list the owner's finds of the questions plan, with a vector and degraded."""
    explained = (
        scalar(conn, "select emem.e_gather_explain(%s, %s::vector, 1, 12)", (question, vector))
        for question in QUESTIONS
        for vector in (question_vector(question), None)
    )
    return {
        lookup["plan"]["kind"] for explain in explained for lookup in explain["lookups"].values() if "plan" in lookup
    }


def test_a_cluster_reads_every_match_whole_however_tuned(citus: Citus, one_node: OneNode) -> None:
    # A lazy read walks records in id order a few at a time, probing each: a cluster cannot push
    # that down, and a LIMIT over the shards' rows would take whichever shard answered first.
    cluster, cluster_roles = citus
    db, _ = one_node
    read_lazily(db)
    assert plan_kinds(db) & {"broad", "tiered"}, "on one node these tunings read some match lazily"
    with cluster.connect() as conn:
        as_tuned = answers(conn, cluster_roles)
        read_lazily(conn)
        assert plan_kinds(conn) <= {"empty", "whole"}
        assert answers(conn, cluster_roles) == as_tuned


def test_pgvector_settings_reach_every_shard_of_a_scan(citus: Citus) -> None:
    # Each shard reports what it ran with (the cause of 80 rows for the 100 nearest), for emem._scan
    # called from PL/Python as a find calls it.
    cluster, _ = citus
    shard_settings = (
        "select r.record_id, coalesce(pg_catalog.current_setting('hnsw.ef_search', true), '-1')::float8 as distance,"
        " array[(coalesce(pg_catalog.current_setting('hnsw.iterative_scan', true), '') = 'relaxed_order')::int::int8]"
        " as windows from emem.records as r where $1 is not null and $2 > 0"
    )
    with cluster.connect() as conn:
        conn.execute(
            """create function pg_temp.scan_as_a_find(query text, question public.vector, settings jsonb)
               returns table (ef_search float8, iterative bigint[], records bigint) language plpython3u as $py$
                   plan = plpy.prepare("select s.distance, s.windows, count(*) from emem._scan($1, $2, 1, 123, $3) as s"
                                       " group by 1, 2", ["text", "public.vector", "jsonb"])
                   return [tuple(row.values()) for row in plpy.execute(plan, [query, question, settings])]
               $py$"""
        )
        reported = conn.execute(
            "select ef_search, iterative, records from pg_temp.scan_as_a_find(%s, %s::vector, %s)",
            (shard_settings, question_vector("any"), json.dumps({"hnsw.iterative_scan": "relaxed_order"})),
        ).fetchall()
        after = conn.execute("select current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')")
        assert after.fetchone() == ("40", "off"), "the scan's settings outlived it"
    total = sum(n for _, _, n in reported)
    assert reported == [(123.0, [1], total)], reported


def test_an_agent_reads_only_its_lanes_directly_on_the_cluster(citus: Citus) -> None:
    """Row-level security on the shards: the policies' functions read the bindings (reference tables)."""
    cluster, roles = citus
    with cluster.connect() as conn:
        conn.execute(f"set role {roles['strict']}")
        lanes = {row[0] for row in conn.execute("select distinct lane_name from emem.records")}
        tags = {row[0] for row in conn.execute("select distinct lane_name from emem.record_tags")}
        edges = conn.execute(
            "select count(*) from emem.edges where 'beta' in (from_lane_name, to_lane_name)"
        ).fetchone()
    assert lanes == tags == {"alpha", "gamma"} and edges == (0,)


def timelines(conn: psycopg.Connection, roles: dict[str, str]) -> dict[str, list[int]]:
    """The timeline's pages (each lane's records merged by time), for the owner and the strict reader."""
    pages: dict[str, list[int]] = {}
    for reader in ("owner", "strict"):
        if reader != "owner":
            conn.execute(f"set role {roles[reader]}")
        for tags in (None, ["common"]):
            for page in (1, 2, 9):
                rows = conn.execute(
                    "select record_id from emem.e_timeline('-infinity', null, %s, 30, null, %s)", (page, tags)
                ).fetchall()
                pages[f"{reader} tags={tags} page {page}"] = [row[0] for row in rows]
        conn.execute("reset role")
    return pages


def test_the_timeline_gives_the_pages_of_one_node(citus: Citus, one_node: OneNode) -> None:
    cluster, cluster_roles = citus
    db, roles = one_node
    expected = timelines(db, roles)
    with cluster.connect() as conn:
        found = timelines(conn, cluster_roles)
    assert found == expected
    assert all(expected[f"{reader} tags=None page 1"] for reader in ("owner", "strict"))


def test_writes_edits_and_the_embedding_queue_work_on_the_cluster(citus: Citus) -> None:
    cluster, _ = citus
    with cluster.connect() as conn:
        record = scalar(conn, "select emem.put_record('note', 'written on the cluster', 'beta', array['fresh'])")
        conn.execute("select emem.tag_record(%s, array['more'])", (record,))
        conn.execute("select emem.update_record(%s, content => 'edited on the cluster')", (record,))
        with conn.transaction():
            claimed = conn.execute("select queue_id, texts from emem.claim_embeddings(1, 10)").fetchall()
            assert ("edited on the cluster",) in {tuple(texts) for _, texts in claimed}
            vectors = [json.dumps(unit(random.Random(queue_id))) for queue_id, _ in claimed]
            stored = scalar(conn, "select emem.store_embeddings(%s, %s::vector[])", ([q for q, _ in claimed], vectors))
        assert stored == len(claimed)
        assert scalar(conn, "select emem.e_health('m', %s)", (DIMENSION,))["status"] == "ok"
        assert conn.execute("select emem.move_records(array[%s]::bigint[], 'alpha')", (record,)).fetchone() == (1,)
        lanes = {
            table: scalar(
                conn, f"select array_agg(distinct lane_name) from emem.{table} where record_id = %s", (record,)
            )
            for table in ("records", "record_tags", "record_vectors")
        }
        assert lanes == {"records": ["alpha"], "record_tags": ["alpha"], "record_vectors": ["alpha"]}
        assert conn.execute("select emem.delete_records(array[%s]::bigint[])", (record,)).fetchone() == (1,)


def test_derived_row_checks_refuse_a_cluster_and_say_where_they_run(citus: Citus) -> None:
    cluster, _ = citus
    with cluster.connect() as conn:
        for function in ("check_derived", "rebuild_derived"):
            with pytest.raises(psycopg.errors.FeatureNotSupported, match=f"emem.{function}.. runs on one node only"):
                conn.execute(f"select * from emem.{function}()")
