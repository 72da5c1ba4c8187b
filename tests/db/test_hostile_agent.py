"""Lanes against a hostile agent: an agent with an ordinary role, bound to a profile
that reads lanes `own` and `shared` and writes `own`, attacks what lies in lane `secret`.

It cannot choose its own ranking, an edge into a lane it cannot read surfaces nothing, strict
isolation leaks no count, rank or content, its writes stay in its write lanes and never stall
another lane's, a binding does not outlive its role, a vector of another model is not used, and
NFC and NFD spellings find the same records. Every probe is counted in the figures.
"""

import contextlib
import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import figures
import finds
import psycopg
import pytest
from clusters import throwaway_cluster
from databases import MakeRole
from psycopg import errors, sql
from queries import scalar
from vectors import unit
from writes import put

pytest_plugins = ["figures"]

QUESTIONS = [
    "termination planned",
    "salary 98,765 EUR",
    "Kowalski invoice INV-7001",
    "apollo project meeting",
    "shared handbook",
]
VECTOR = "[1,0,0,0]"


def probe(path: str, count: int = 1) -> None:
    figures.add("lanes probed", count, detail=f"hostile agent: {path}")


def four_lanes(db: psycopg.Connection, make_role: MakeRole) -> dict[str, Any]:
    """Lanes own and shared (the agent reads both, writes own), secret and other; the agent's role;
    records with vectors in the first three and a hidden edge from a secret record to a shared one."""
    for lane in ("own", "shared", "secret", "other"):
        db.execute("select emem.create_lane(%s)", (lane,))
    db.execute("select emem.create_agent_profile('agent', array['own', 'shared'], array['own'])")
    db.execute("select emem.create_agent_profile('neighbour', array['other'])")
    db.execute("select emem.create_embedding_space('m', 4, 'fp', true)")
    ids = {
        "own": put(
            db,
            lane="own",
            items=[
                {"content": "Kowalski sent invoice INV-7001", "tags": ["invoice"], "vector": unit(1, 0.1, 0, 0)},
                {"content": "apollo project meeting notes", "tags": ["project apollo"], "vector": unit(1, 0.2, 0, 0)},
            ],
        ),
        "shared": put(
            db,
            lane="shared",
            items=[
                {"content": "the shared handbook", "tags": ["handbook"], "vector": unit(1, 0, 0.3, 0)},
                {"content": "Dana, team lead", "kind": "entity", "vector": unit(0, 1, 0, 0)},
            ],
        ),
        "secret": put(
            db,
            lane="secret",
            items=[
                {"content": "salary of Dana: 98,765 EUR", "tags": ["salary"], "vector": unit(1, 0.05, 0, 0)},
                {"content": "termination planned for Dana", "tags": ["hr"], "vector": unit(1, 0, 0, 0.1)},
            ],
        ),
    }
    # A hidden edge: from a secret record to a shared one, naming what the agent must not learn.
    db.execute(
        "select emem.link_records(%s, %s, 'concerns', '{\"plan\": \"termination planned\"}')",
        (ids["secret"][1], ids["shared"][1]),
    )
    return {"ids": ids, "agent": make_role("hostile", "agent")}


# Most tests change the agent's profile or write: each gets a clone; those that only read share the lanes.
pytestmark = pytest.mark.corpus(four_lanes, read_only=False)
READS = pytest.mark.corpus(four_lanes, read_only=True)


@pytest.fixture
def lanes(built: dict[str, Any]) -> dict[str, list[int]]:
    """The records of each lane."""
    ids: dict[str, list[int]] = built["ids"]
    return ids


@pytest.fixture
def agent(built: dict[str, Any], dsn: Callable[..., str]) -> Iterator[psycopg.Connection]:
    """A session of the agent's role."""
    with psycopg.connect(dsn(built["agent"]), autocommit=True) as conn:
        yield conn


def envelope(
    conn: psycopg.Connection,
    question: str,
    vector: str | None = VECTOR,
    model: str | None = None,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    return finds.envelope(conn, question, vector, model=model, fingerprint=fingerprint)


def explain(conn: psycopg.Connection, question: str, vector: str | None) -> dict[str, Any]:
    found: dict[str, Any] = scalar(conn, "select emem.e_gather_explain(%s, %s::vector)", (question, vector))
    # No time, plan or statement reaches an agent: under strict isolation they could follow other
    # lanes' volume.
    assert "merge_milliseconds" not in found and "statements" not in found
    for lookup in found.get("lookups", {}).values():
        assert not {"milliseconds", "plan", "statements"} & set(lookup), lookup
    return found


def answers(conn: psycopg.Connection) -> list[tuple[dict[str, Any], dict[str, Any], list[tuple[Any, ...]]]]:
    """Everything the agent learns from find and explain over the questions, with and without a vector."""
    return [
        (envelope(conn, q, v), explain(conn, q, v), sorted(conn.execute("select * from emem.records").fetchall()))
        for q in QUESTIONS
        for v in (VECTOR, None)
    ]


# ---- the agent does not choose its ranking ---------------------------------------------------------


AGENT_SETTINGS = [
    ("emem.pipeline_profile", "fulltext"),
    ("emem.pipeline_profile", "tags"),
    ("emem.pipeline_profile", "fulltext_words"),
    ("emem.pipeline_profile", "record_vectors:1, tags:1000"),
    ("emem.record_vector_candidates", "1"),
    ("emem.window_vector_candidates", "1000"),
    ("emem.lane_isolation", "strict"),
]


@READS
def test_an_agents_session_settings_do_not_change_its_finds(agent: psycopg.Connection, dsn: Callable[..., str]) -> None:
    """Totals under a self-chosen single-lookup profile would be an oracle over other lanes: an
    agent's settings are ignored, in the session, as connection options, and as its role's defaults."""
    baseline = answers(agent)
    role = agent.info.user
    for setting, value in AGENT_SETTINGS:
        agent.execute("select set_config(%s, %s, false)", (setting, value))
        assert answers(agent) == baseline, f"set {setting} = {value} changed the agent's finds"
        agent.execute(sql.SQL("reset {}").format(sql.Identifier(*setting.split("."))))
        with psycopg.connect(dsn(role), autocommit=True, options=f"-c {setting}={value.replace(' ', '')}") as opts:
            assert answers(opts) == baseline, f"-c {setting} changed the agent's finds"
        with contextlib.suppress(errors.InsufficientPrivilege):  # PostgreSQL may refuse it already
            agent.execute(
                sql.SQL("alter role current_user set {} = {}").format(
                    sql.Identifier(*setting.split(".")), sql.Literal(value)
                )
            )
        with psycopg.connect(dsn(role), autocommit=True) as defaults:
            assert answers(defaults) == baseline, f"alter role set {setting} changed the agent's finds"
        agent.execute("alter role current_user reset all")
        probe("own settings", 3)


def test_the_owner_sets_what_an_agent_profile_runs_under(
    db: psycopg.Connection, agent: psycopg.Connection, dsn: Callable[..., str]
) -> None:
    assert envelope(agent, "invoice")["pipeline_profile"] == {
        "record_vectors": 40,
        "tags": 35,
        "window_vectors": 20,
        "fulltext": 5,
    }
    db.execute(f"alter database {db.info.dbname} set emem.pipeline_profile = 'tags, fulltext'")
    with psycopg.connect(dsn(agent.info.user), autocommit=True) as fresh:
        assert envelope(fresh, "invoice")["pipeline_profile"] == {"tags": 35, "fulltext": 5}
    settings = scalar(db, "select emem.set_agent_setting('agent', 'emem.pipeline_profile', 'fulltext')")
    assert settings == {"emem.pipeline_profile": "fulltext"}
    assert envelope(agent, "invoice")["pipeline_profile"] == {"fulltext": 5}
    db.execute("select emem.set_agent_setting('agent', 'emem.pipeline_profile', null)")
    db.execute(f"alter database {db.info.dbname} reset emem.pipeline_profile")
    for setting, value, message in [
        ("emem.pipeline_profile", "colours", "unknown lookup 'colours'"),
        ("emem.record_vector_candidates", "0", "out of range"),
        ("emem.lane_isolation", "loose", "accepted: page_filter, strict"),
        ("emem.nothing", "1", "unknown setting"),
    ]:
        with pytest.raises(errors.InvalidParameterValue, match=message):
            db.execute("select emem.set_agent_setting('agent', %s, %s)", (setting, value))
    with pytest.raises(errors.InvalidParameterValue, match="unknown agent profile"):
        db.execute("select emem.set_agent_setting('nobody', 'emem.lane_isolation', 'strict')")
    with pytest.raises(errors.InsufficientPrivilege):
        agent.execute("select emem.set_agent_setting('agent', 'emem.pipeline_profile', 'fulltext')")


# ---- hidden edges ------------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", [VECTOR, None], ids=["vector", "degraded"])
@pytest.mark.parametrize("profile", ["record_vectors, tags, window_vectors, fulltext", "tags_by_terms"])
def test_an_edge_into_an_unreadable_lane_surfaces_nothing(
    db: psycopg.Connection, agent: psycopg.Connection, lanes: dict[str, list[int]], vector: str | None, profile: str
) -> None:
    """The shared record at the end of the hidden edge would answer 'termination planned'."""
    db.execute("select emem.set_agent_setting('agent', 'emem.pipeline_profile', %s)", (profile,))
    shared_end = lanes["shared"][1]
    owner = envelope(db, "termination planned", vector)
    assert any(r["record_id"] == shared_end and "tags" in " ".join(r["found_by"]) for r in owner["rows"])
    for isolation in ("page_filter", "strict"):
        db.execute("select emem.set_agent_setting('agent', 'emem.lane_isolation', %s)", (isolation,))
        found = envelope(agent, "termination planned", vector)
        for row in found["rows"]:
            assert not (row["record_id"] == shared_end and row["placed_by"].startswith("tags")), isolation
            assert not (row["record_id"] == shared_end and any(n.startswith("tags") for n in row["found_by"]))
        probe(f"hidden edge ({isolation})")


def test_an_edge_follows_its_ends_into_and_out_of_readable_lanes(
    db: psycopg.Connection, agent: psycopg.Connection, lanes: dict[str, list[int]]
) -> None:
    """Strict isolation finds edges by the lanes of their ends, kept on the edge's label rows: the
    hidden edge surfaces when its secret end moves into a readable lane and hides again when it
    moves back; an edge the owner links gets its ends' lanes, and so does one linked again to
    another end."""
    db.execute("select emem.set_agent_setting('agent', 'emem.lane_isolation', 'strict')")
    secret_end, shared_end = lanes["secret"][1], lanes["shared"][1]

    def reached_by_tags(question: str) -> set[int]:
        rows = envelope(agent, question, None)["rows"]
        return {r["record_id"] for r in rows if "tags" in r["found_by"]}

    def move(record_id: int, lane: str) -> None:
        db.execute("select emem.move_records(array[%s]::bigint[], %s)", (record_id, lane))

    assert shared_end not in reached_by_tags("termination planned")
    move(secret_end, "shared")
    assert {secret_end, shared_end} <= reached_by_tags("termination planned")
    move(secret_end, "secret")
    assert shared_end not in reached_by_tags("termination planned")

    own_end = lanes["own"][0]
    edge = scalar(db, "select emem.link_records(%s, %s, 'reviewed_by')", (own_end, shared_end))
    assert db.execute(
        "select from_lane_name, to_lane_name from emem.edges where relation = 'reviewed_by'"
    ).fetchone() == ("own", "shared")
    assert {own_end, shared_end} <= reached_by_tags("reviewed by")
    # The owner links the edge to another end instead: its labels take the new end's lane.
    db.execute("select emem.unlink_records(%s)", (edge,))
    edge = scalar(db, "select emem.link_records(%s, %s, 'reviewed_by')", (own_end, secret_end))
    assert own_end not in reached_by_tags("reviewed by")
    db.execute("select emem.unlink_records(%s)", (edge,))
    db.execute("select emem.link_records(%s, %s, 'reviewed_by')", (own_end, shared_end))
    assert {own_end, shared_end} <= reached_by_tags("reviewed by")
    probe("hidden edge (strict, moved)", 6)


# ---- strict isolation --------------------------------------------------------------------------------


def flood(db: psycopg.Connection) -> None:
    """What a neighbour lane can throw at the agent's finds: 120 near-duplicates of the question
    vector, the question's words, tags and codes, and 200 edges naming them."""
    items = [
        {
            "content": f"filler {i}: termination planned, salary 98,765 EUR, Kowalski INV-7001, shared handbook",
            "tags": ["invoice", "project apollo", "handbook", "salary", "meeting"],
            "vector": unit(1, 0.001 * i, 0, 0),
        }
        for i in range(120)
    ]
    ids = put(db, lane="other", items=items)
    for a, b in itertools.pairwise(ids[:101]):
        db.execute("select emem.link_records(%s, %s, 'concerns', '{\"plan\": \"termination planned\"}')", (a, b))
        db.execute("select emem.link_records(%s, %s, 'shared', '{\"doc\": \"shared handbook\"}')", (b, a))


def test_strict_isolation_leaks_no_count_rank_or_content(db: psycopg.Connection, agent: psycopg.Connection) -> None:
    """Under strict isolation an agent's answers (rows, ranks, totals, explain's counts and list
    ranks) are those of a database holding its readable lanes only: a flood of another lane
    changes nothing, and pages are full of readable records."""
    db.execute("select emem.set_agent_setting('agent', 'emem.lane_isolation', 'strict')")
    for profile in (
        "record_vectors, tags, window_vectors, fulltext",
        "record_vectors:30, tags_by_terms:30, window_vectors:10, fulltext_by_rarity:15, fulltext_words:15",
    ):
        db.execute("select emem.set_agent_setting('agent', 'emem.pipeline_profile', %s)", (profile,))
        before = answers(agent)
        for found, explained, _ in before:
            assert found["lane_isolation"] == "strict" and "lookups" in explained
            assert {r["lane"] for r in found["rows"]} <= {"own", "shared"}
            assert len(found["rows"]) == min(found["total_candidates"], 30)  # full pages
        flood(db)
        db.execute("analyze emem.records")
        assert answers(agent) == before, f"another lane's data changed what the agent learns under {profile}"
        db.execute("delete from emem.records where lane_name = 'other'")
        probe("strict isolation", len(before) * 3)


def test_under_page_filter_totals_tell_a_guessed_hidden_value_and_strict_does_not(
    db: psycopg.Connection, agent: psycopg.Connection
) -> None:
    """What the documentation says the default reveals: the right guess of a secret lane's figure
    (98,765) counts one more candidate than a wrong one, though neither shows a row of that lane."""

    def totals(guess: str) -> int:
        found = envelope(agent, guess, None)
        assert {row["lane"] for row in found["rows"]} <= {"own", "shared"}
        total: int = found["total_candidates"]
        return total

    assert totals("98,765") == totals("12,345") + 1
    db.execute("select emem.set_agent_setting('agent', 'emem.lane_isolation', 'strict')")
    assert totals("98,765") == totals("12,345")
    probe("totals channel", 4)


def test_in_strict_isolation_a_flood_does_not_push_readable_records_off_the_page(
    db: psycopg.Connection, agent: psycopg.Connection, lanes: dict[str, list[int]]
) -> None:
    db.execute("select emem.set_agent_setting('agent', 'emem.lane_isolation', 'strict')")
    flood(db)
    found = envelope(agent, "what do we know?")
    assert set(lanes["own"]) | set(lanes["shared"]) <= {r["record_id"] for r in found["rows"]}
    db.execute("select emem.set_agent_setting('agent', 'emem.lane_isolation', null)")
    seed = envelope(agent, "what do we know?")  # page_filter, documented: other lanes take slots
    assert len(seed["rows"]) < len(found["rows"])
    probe("flood", 2)


@contextlib.contextmanager
def crowded_index_scans(db: psycopg.Connection) -> Iterator[None]:
    """The database's new sessions read HNSW indexes (a table this small is otherwise sorted
    whole) within a budget that the flood's near-duplicates fill."""
    settings = {"enable_seqscan": "off", "enable_sort": "off", "hnsw.max_scan_tuples": "50"}
    database = sql.Identifier(db.info.dbname)
    for name, value in settings.items():
        db.execute(sql.SQL("alter database {} set {} = {}").format(database, sql.SQL(name), sql.Literal(value)))
    try:
        yield
    finally:
        for name in settings:
            db.execute(sql.SQL("alter database {} reset {}").format(database, sql.SQL(name)))


@pytest.mark.parametrize("lane_indexes", [True, False], ids=["lane indexes", "space index only"])
def test_in_strict_isolation_a_crowded_neighbourhood_still_gives_the_nearest_readable_vectors(
    db: psycopg.Connection, built: dict[str, Any], dsn: Callable[..., str], lane_indexes: bool
) -> None:
    """Another lane's near-duplicates of the question vector fill the filtered HNSW scan's budget
    (hnsw.max_scan_tuples) before it reaches a readable vector. With the lanes' own indexes that
    budget is never spent on them; without (a restore before emem.rebuild_derived, a strict
    database default) the filtered scan comes back short, and the lookup reads the readable lanes
    exactly instead of answering with nothing (which would tell where other lanes' vectors lie)."""
    db.execute("select emem.set_agent_setting('agent', 'emem.lane_isolation', 'strict')")
    if not lane_indexes:
        for (name,) in db.execute("select index_name from emem._lane_indexes()").fetchall():
            db.execute(sql.SQL("drop index emem.{}").format(sql.Identifier(name)))
    flood(db)
    readable = {
        row[0] for row in db.execute("select record_id from emem.record_vectors where lane_name in ('own', 'shared')")
    }
    with crowded_index_scans(db), psycopg.connect(dsn(built["agent"]), autocommit=True) as agent:
        rows = envelope(agent, "apollo project meeting")["rows"]
    assert {row["record_id"] for row in rows if "record_vectors" in row["found_by"]} == readable
    probe("strict isolation (crowded vectors)")


def vector_index_scans(db: psycopg.Connection) -> dict[str, int]:
    """How often each HNSW index of the vector tables was scanned, as the statistics hold it now."""
    db.execute("select pg_stat_clear_snapshot()")
    rows = db.execute(
        """select indexrelname, idx_scan from pg_stat_user_indexes
           where schemaname = 'emem' and indexrelname ~ '^(record_vectors|windows)_space_'"""
    ).fetchall()
    return dict(rows)


def test_in_strict_isolation_vector_lookups_read_only_the_readable_lanes_own_indexes(
    db: psycopg.Connection, built: dict[str, Any], dsn: Callable[..., str]
) -> None:
    """Strict isolation gives each lane its profile reads HNSW indexes of its own, in every space;
    a strict agent's vector lookups scan those and never the space's index of every lane (whose
    walk past other lanes' vectors would make its time follow them). They go when no strict
    profile reads the lane."""

    def lane_indexes(*tables: str) -> set[str]:
        named = "select emem._lane_index_name(%s, s.space_id, %s) from emem.embedding_spaces as s"
        return {scalar(db, named, (table, lane)) for table in tables for lane in ("own", "shared")}

    wanted = lane_indexes("record_vectors", "windows")
    assert wanted.isdisjoint(vector_index_scans(db))
    db.execute("select emem.set_agent_setting('agent', 'emem.lane_isolation', 'strict')")
    flood(db)
    for lane in ("own", "other"):  # a window in a readable lane and one in another
        turns = [
            {"kind": "conversation", "content": f"apollo {n}", "thread_id": "t", "thread_position": n} for n in (0, 1)
        ]
        window = (put(db, lane=lane, items=turns), unit(1, 0.1, 0, 0))
        db.execute("select emem.put_window(%s::bigint[], %s::vector)", window)
    before = vector_index_scans(db)
    assert wanted <= set(before) and len(before) == 2 + len(wanted)  # the space's two, and the lanes'
    with crowded_index_scans(db), psycopg.connect(dsn(built["agent"]), autocommit=True) as agent:
        envelope(agent, "apollo project meeting")
    # the agent's backend reports its scans when it ends
    for _ in range(50):
        after = vector_index_scans(db)
        if after != before:
            break
        time.sleep(0.1)
    assert {name for name, count in after.items() if count > before[name]} == wanted
    assert scalar(db, "select emem._missing_space_indexes(1)") == 0
    db.execute("select emem.set_agent_setting('agent', 'emem.lane_isolation', 'page_filter')")
    assert set(vector_index_scans(db)) == set(before) - wanted
    probe("strict isolation (lane indexes)", 2)


# ---- writes ------------------------------------------------------------------------------------------


def test_a_read_lane_is_not_a_write_lane(agent: psycopg.Connection, lanes: dict[str, list[int]]) -> None:
    with pytest.raises(errors.InsufficientPrivilege, match="not a lane this role may write"):
        agent.execute("select emem.put_record('note', 'x', 'shared')")
    for call in ("select emem.tag_record(%s, array['mine'])", "select emem.put_record_vector(%s, '[1,0,0,0]')"):
        with pytest.raises(errors.InsufficientPrivilege, match="may read but not write"):
            agent.execute(call, (lanes["shared"][0],))
    # linking from its own record to a shared one it reads is allowed
    agent.execute("select emem.link_records(%s, %s, 'cites')", (lanes["own"][0], lanes["shared"][0]))
    assert scalar(agent, "select emem.put_record('note', 'mine', 'own')") > 0
    probe("write lanes", 3)


# Every kind of write an agent makes, each naming the same tags, labels, source key, thread and
# shared record in whichever lane writes it ({lane}, {record}, {commons}, {thread} filled in).
WRITES_OF_EVERY_KIND = [
    """select emem.put_records('[{{"kind": "conversation", "lane": "{lane}", "content": "turn one",
        "thread_id": "{thread}", "thread_position": 0, "source_key": "mail-1", "tags": ["brand new tag"],
        "vector": [1, 0, 0, 0]}}, {{"kind": "conversation", "lane": "{lane}", "content": "turn two",
        "thread_id": "{thread}", "thread_position": 1}}]'::jsonb)""",
    "select emem.put_record('note', 'more', '{lane}', array['invoice', 'brand new tag'], source_key => 'note-1')",
    "select emem.tag_record({record}, array['invoice', 'another new tag'])",
    "select emem.untag_record({record}, array['another new tag'])",
    "select emem.link_records({record}, {commons}, 'brand_new_link', '{{\"status\": \"open\"}}')",
    """select emem.put_edges('[{{"from_record_id": {record}, "to_record_id": {commons},
        "relation": "another_new_link", "properties": {{"by": "Kowalski"}}}}]'::jsonb)""",
    """select emem.put_window(array(select record_id from emem.records where lane_name = '{lane}'
        and thread_id = '{thread}' order by thread_position), '[0, 1, 0, 0]')""",
    "select emem.put_record_vector({record}, '[0, 0, 1, 0]')",
    "select emem.update_record({record}, content => 'edited while another lane writes')",
    "select count(*) from emem.claim_embeddings(1, 10)",
    "select emem.delete_records(array(select record_id from emem.records where lane_name = '{lane}'"
    " and source_key = 'note-1'))",
]


def test_one_lanes_open_transaction_never_stalls_another_lanes_writes(
    db: psycopg.Connection,
    agent: psycopg.Connection,
    lanes: dict[str, list[int]],
    make_role: Callable[..., str],
    dsn: Callable[..., str],
) -> None:
    """Another lane writes every kind of row (records with a source key and a thread, tags, edges
    to the same shared record, windows, vectors, edits, queue claims, deletes) in a transaction left
    open: the agent writes the same at once (derived counts, vocabularies, label rows and queue
    entries are kept per lane, and claims skip what another lane locked)."""
    db.execute("select emem.create_agent_profile('commons_user', array['other', 'shared'], array['other'])")
    neighbour = put(db, [{"content": "neighbour note"}], lane="other")[0]
    own, commons = lanes["own"][1], lanes["shared"][0]
    with psycopg.connect(dsn(make_role("neighbour", "commons_user"))) as other:  # a transaction left open
        for write in WRITES_OF_EVERY_KIND:
            other.execute(write.format(lane="other", record=neighbour, commons=commons, thread="t-1"))
        agent.execute("set lock_timeout = '1s'")
        for write in WRITES_OF_EVERY_KIND:
            started = time.monotonic()
            agent.execute(write.format(lane="own", record=own, commons=commons, thread="t-1"))
            assert time.monotonic() - started < 1, write
        other.rollback()
    counts: dict[str, int] = dict(
        db.execute("select lane_name, record_count from emem.tag_vocabulary where tag = 'brand new tag'").fetchall()
    )
    assert counts == {"own": 1}  # the thread's first turn; the note went with delete_records
    links = db.execute(
        "select relation from emem.edges where from_record_id = %s and to_record_id = %s order by 1", (own, commons)
    ).fetchall()
    assert links == [("another_new_link",), ("brand_new_link",)]
    assert db.execute("select count(*) from emem.windows where lane_name = 'own'").fetchone() == (1,)
    probe("write stall", len(WRITES_OF_EVERY_KIND))


def test_a_binding_does_not_outlive_its_role(
    db: psycopg.Connection, lanes: dict[str, list[int]], dsn: Callable[..., str]
) -> None:
    db.execute("create role reborn login")
    try:
        db.execute("select emem.bind_role('reborn', 'agent')")
        with psycopg.connect(dsn("reborn"), autocommit=True) as conn:
            assert envelope(conn, "invoice")["rows"]
        db.execute("drop role reborn")
        db.execute("create role reborn login")
        with psycopg.connect(dsn("reborn"), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege, match="bound to no agent profile"):
                envelope(conn, "invoice")
            assert scalar(conn, "select count(*) from emem.records") == 0
    finally:
        db.execute("drop role if exists reborn")
    probe("role identity")


# ---- the question vector's model, Unicode ------------------------------------------------------------


@READS
def test_a_vector_of_another_model_is_not_used(agent: psycopg.Connection) -> None:
    assert envelope(agent, "invoice", model="m", fingerprint="fp")["degraded"] is False
    for declared in ({"model": "another-model"}, {"model": "m", "fingerprint": "another-fp"}):
        found = envelope(agent, "invoice", **declared)
        assert found["degraded"] is True and found["degraded_reason"] == "declaration_mismatch"
        assert all(r["distance_kind"] == "placeholder" for r in found["rows"])


def test_nfc_and_nfd_spellings_find_the_same_records(db: psycopg.Connection, agent: psycopg.Connection) -> None:
    nfd = "Zoe\u0308 Mu\u0308ller, cafe\u0301"  # Zoë Müller, café: letters and combining marks
    [record] = put(db, lane="own", items=[{"content": nfd, "tags": ["cafe\u0301 visits"]}])
    for question in ("Zo\u00eb M\u00fcller", "caf\u00e9 visits", nfd):
        found = envelope(agent, question, None)
        assert record in {r["record_id"] for r in found["rows"]}, question
    assert scalar(db, "select tag from emem.record_tags where record_id = %s", (record,)) == "caf\u00e9 visits"


# ---- one call cannot stall or crash the server --------------------------------------------------------

BIG = "x" * 10_001


@READS
@pytest.mark.parametrize(
    ("call", "args", "message"),
    [
        ("select emem.analyse_question(%s)", (BIG,), "at most 10000 characters"),
        ("select emem.e_gather_find_envelope(%s)", (BIG,), "at most 10000 characters"),
        ("select emem.e_gather_find_envelope('q', null, 1, 30, %s)", (BIG,), "at most 200"),
        ("select emem.e_health(%s, 3)", (BIG,), "at most 200 characters"),
        ("select emem.e_timeline('-infinity', null, tags => %s)", ([str(i) for i in range(1001)],), "1 to 1000"),
        ("select * from emem.records_with_all_tags(%s)", ([str(i) for i in range(1001)],), "1 to 1000"),
        ("select emem.put_record('note', 'x', 'own', metadata => %s)", (json.dumps({"k": BIG * 7}),), "64 kB"),
        ("select emem.put_record('note', 'x', 'own', source_key => %s)", (BIG,), "at most 500"),
        ("select emem.put_window(%s, '[1,0,0,0]')", (list(range(1, 1002)),), "1 to 1000 record ids"),
        ("select emem.e_gather_find_envelope('q', null, 1000, 1000)", (), "at most 100000"),
    ],
)
def test_every_argument_is_capped(agent: psycopg.Connection, call: str, args: tuple[object, ...], message: str) -> None:
    with pytest.raises(errors.InvalidParameterValue, match=message):
        agent.execute(call, args)
    probe("argument caps")


@READS
def test_link_properties_are_capped(agent: psycopg.Connection, lanes: dict[str, list[int]]) -> None:
    own = lanes["own"][0]
    for properties, message in ((json.dumps({"k": BIG * 7}), "64 kB"), (json.dumps({"k": "v" * 1001}), "1000")):
        with pytest.raises(errors.InvalidParameterValue, match=message):
            agent.execute("select emem.link_records(%s, %s, 'r', %s)", (own, own, properties))


def test_a_statement_timeout_stops_a_find_at_once(db: psycopg.Connection, agent: psycopg.Connection) -> None:
    """A deep page of a large degraded find runs for about half a second of list reads and Python
    merging here: statement_timeout stops it within half a second of firing."""
    items = [
        {"content": f"note {i} about the apollo project notes", "tags": ["project apollo", f"t{i % 7}"]}
        for i in range(25_000)
    ]
    for start in range(0, len(items), 5000):
        put(db, lane="own", items=items[start : start + 5000])
    db.execute(
        "select emem.set_agent_setting('agent', 'emem.pipeline_profile', %s)",
        ("tags_by_terms, fulltext_words, fulltext_by_rarity, tags, fulltext",),
    )
    question = "apollo project notes about the notes"
    envelope(agent, question, None)  # warm: the lexicon and plans
    agent.execute("set statement_timeout = '100ms'")
    started = time.monotonic()
    with pytest.raises(errors.QueryCanceled):
        agent.execute("select emem.e_gather_find_envelope(%s, null, 30, 1000)", (question,))
    assert time.monotonic() - started < 0.6
    agent.execute("reset statement_timeout")
    probe("statement timeout")


# Address space per server process of the memory-limited cluster: plenty for emem's work, far
# less than a 50 MB argument blown up 45 times.
SERVER_ADDRESS_SPACE = 1_500_000_000
HUGE = 50_000_000


def huge_calls(own: int) -> list[tuple[str, tuple[object, ...]]]:
    """Every function an agent may call, each with a 50 MB argument."""
    text, tags = "x" * HUGE, ["t" * 100] * (HUGE // 100)
    return [
        ("select emem.e_gather_find_envelope(%s)", (text,)),
        ("select * from emem.e_gather_find(%s)", (text,)),
        ("select emem.e_gather_explain(%s)", (text,)),
        ("select emem.e_gather_find_envelope('q', null, 1, 30, %s, %s)", (text, text)),
        ("select emem.analyse_question(%s)", (text,)),
        ("select emem.e_health(%s, 4, %s)", (text, text)),
        ("select emem.e_timeline('-infinity', null, kinds => %s)", (tags,)),
        ("select emem.e_timeline('-infinity', null, tags => %s)", (tags,)),
        ("select * from emem.records_with_all_tags(%s)", (tags,)),
        ("select emem.put_record('note', %s, 'own')", (text,)),
        ("select emem.put_records(%s)", (json.dumps([{"kind": "note", "content": text, "lane": "own"}]),)),
        ("select emem.put_records(%s)", (json.dumps([{"kind": "note", "content": "x", "lane": "own"}] * 500_000),)),
        ("select emem.tag_record(%s, %s)", (own, tags)),
        ("select emem.untag_record(%s, %s)", (own, tags)),
        ("select emem.link_records(%s, %s, %s)", (own, own, text)),
        ("select emem.link_records(%s, %s, 'r', %s)", (own, own, json.dumps({"k": text}))),
        ("select emem.put_record_vector(%s, %s::vector)", (own, "[" + ",".join(["1"] * (HUGE // 2)) + "]")),
        ("select emem.put_window(%s, '[1,0,0,0]')", (list(range(HUGE // 8)),)),
    ]


@READS
def test_a_50_mb_argument_is_refused_cleanly_by_a_memory_limited_server(db: psycopg.Connection) -> None:
    """Each call gets a clean error (a data or program-limit SQLSTATE); the server never restarts
    and another session goes on; a find's memory stays bounded (measured: printed for docs/lanes-and-security.md)."""
    with (
        throwaway_cluster(db, "memory", ["prlimit", f"--as={SERVER_ADDRESS_SPACE}", "--"]) as cluster,
        psycopg.connect(cluster.dsn(), autocommit=True) as owner,
    ):
        owner.execute("select emem.create_lane('own')")
        owner.execute("select emem.create_agent_profile('agent', array['own'])")
        owner.execute("select emem.create_embedding_space('m', 4, 'fp', true)")
        owner.execute("create role hostile login")
        owner.execute("select emem.bind_role('hostile', 'agent')")
        own = scalar(owner, "select emem.put_record('note', 'Kowalski sent INV-7001', 'own')")
        started = scalar(owner, "select pg_postmaster_start_time()")
        with psycopg.connect(cluster.dsn() + " user=hostile", autocommit=True) as agent:
            for call, args in huge_calls(own):
                with pytest.raises(psycopg.Error) as caught:
                    agent.execute(call, args)
                sqlstate = caught.value.sqlstate
                assert sqlstate is not None and sqlstate[:2] in ("22", "54"), (call, sqlstate, caught.value)
                probe("50 MB arguments")
        assert scalar(owner, "select pg_postmaster_start_time()") == started
        assert scalar(owner, "select count(*) from emem.records") == 1
        with psycopg.connect(cluster.dsn() + " user=hostile", autocommit=True) as agent:
            peak = find_peak_memory(agent)
    print(f"\nmemory of the largest find (10,000-character question, page of 1000): VmHWM {peak // 1024} MB")
    assert peak < 400 * 1024  # kB


def find_peak_memory(agent: psycopg.Connection) -> int:
    """The backend's peak resident memory (kB) after the largest find an agent may ask for."""
    pid = scalar(agent, "select pg_backend_pid()")
    words = " ".join(f"word{i} INV-{i}" for i in range(800))[:10_000]
    agent.execute("select emem.e_gather_find_envelope(%s, '[1,0,0,0]', 1, 1000)", (words,))
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
