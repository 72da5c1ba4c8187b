"""The rows that derive from others (tag vocabulary, edge labels with both ends, label
vocabulary, lanes of tags, vectors and window members, the embedding queue) are written by the
write API itself, with no trigger: every API write that adds, moves, relabels or removes a record,
tag or edge leaves them exactly as the base rows imply (emem.check_derived() finds nothing); a
write around the API is found by check_derived() and repaired by rebuild_derived(); agents cannot
read the vocabularies."""

import json
from collections.abc import Callable

import psycopg
import pytest
from databases import MakeRole
from derived import derived_mismatch
from psycopg import errors
from queries import scalar
from tuned import read_lazily


def put_record(db: psycopg.Connection, lane: str, content: str) -> int:
    """A note written with emem.put_record (one record's own path)."""
    record_id: int = scalar(db, "select emem.put_record('note', %s, %s)", (content, lane))
    return record_id


def link(db: psycopg.Connection, a: int, b: int, relation: str, properties: str = "{}") -> int:
    edge_id: int = scalar(db, "select emem.link_records(%s, %s, %s, %s)", (a, b, relation, properties))
    return edge_id


def edges_sharing_labels(db: psycopg.Connection, make_role: MakeRole) -> list[int]:
    """Six records in two lanes and edges sharing labels and ends, one a loop."""
    db.execute("select emem.create_lane('a'), emem.create_lane('b')")
    ids = [put_record(db, "a" if i < 4 else "b", f"record {i}") for i in range(6)]
    link(db, ids[0], ids[1], "audited_by", '{"team": "north-wind", "year": 2024}')
    link(db, ids[1], ids[2], "audited_by", '{"team": "north-wind"}')
    link(db, ids[2], ids[4], "paid", '{"invoice": "INV-7"}')
    link(db, ids[3], ids[3], "reviewed")  # a loop: two ends, one record
    link(db, ids[0], ids[1], "paid", '{"year": 2024}')  # a second edge between the same ends
    assert derived_mismatch(db) == []
    return ids


# Every test writes around the edges: each on a clone.
pytestmark = pytest.mark.corpus(edges_sharing_labels, read_only=False)


@pytest.fixture
def linked(built: list[int]) -> list[int]:
    return built


def ends_of(db: psycopg.Connection, label: str) -> dict[int, int]:
    """Each record that ends an edge with this label, and how many such edges end there."""
    rows = db.execute("select record_id, count(*) from emem.edge_labels where label = %s group by 1", (label,))
    return dict(rows.fetchall())


def edge_of(db: psycopg.Connection, relation: str, to_record_id: int | None = None) -> int:
    edge_id: int = scalar(
        db,
        "select edge_id from emem.edges where relation = %s and (%s::bigint is null or to_record_id = %s)",
        (relation, to_record_id, to_record_id),
    )
    return edge_id


def test_each_label_has_a_row_per_end_and_edge(db: psycopg.Connection, linked: list[int]) -> None:
    ids = linked
    assert ends_of(db, "audited by") == {ids[0]: 1, ids[1]: 2, ids[2]: 1}
    assert ends_of(db, "2024") == {ids[0]: 2, ids[1]: 2}
    assert ends_of(db, "reviewed") == {ids[3]: 1}  # a loop: one row
    terms = scalar(db, "select label_terms from emem.edge_label_vocabulary where label = 'north-wind'")
    assert terms == ["north", "wind"]
    far = db.execute(
        "select far_record_id, far_lane_name from emem.edge_labels where label = 'INV-7' and record_id = %s", (ids[4],)
    ).fetchone()
    assert far == (ids[2], "a")


# Each write is given the database and the records; what it returns is not looked at.
WRITES: dict[str, Callable[[psycopg.Connection, list[int]], object]] = {
    "move an end": lambda db, r: [
        db.execute("select emem.unlink_records(%s)", (edge_of(db, "paid", r[4]),)),
        db.execute("select emem.link_records(%s, %s, 'paid', '{\"invoice\": \"INV-7\"}')", (r[2], r[5])),
    ],
    "relabel": lambda db, r: [
        db.execute("select emem.unlink_records(%s)", (edge_of(db, "audited_by", r[2]),)),
        db.execute("select emem.link_records(%s, %s, 'audited_by', '{\"team\": \"south\"}')", (r[1], r[2])),
    ],
    "delete an edge": lambda db, r: db.execute("select emem.unlink_records(%s)", (edge_of(db, "reviewed"),)),
    "delete an end's record": lambda db, r: db.execute("select emem.delete_records(array[%s]::bigint[])", (r[1],)),
    "move a record's lane": lambda db, r: db.execute("select emem.move_records(array[%s]::bigint[], 'b')", (r[0],)),
    "tag, untag and edit": lambda db, r: [
        db.execute("select emem.tag_record(%s, array['x', 'y'])", (r[0],)),
        db.execute("select emem.untag_record(%s, array['x'])", (r[0],)),
        db.execute("select emem.update_record(%s, content => 'record zero, edited')", (r[0],)),
    ],
    "bulk edges": lambda db, r: db.execute(
        "select emem.put_edges(%s)",
        (json.dumps([{"from_record_id": r[i], "to_record_id": r[5], "relation": "cites"} for i in range(5)]),),
    ),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_every_api_write_keeps_the_derived_rows_exact(db: psycopg.Connection, linked: list[int], write: str) -> None:
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    WRITES[write](db, linked)
    assert derived_mismatch(db) == []


@pytest.mark.parametrize(
    "write",
    [
        "update emem.records set lane_name = 'b' where record_id = {r0}",
        "update emem.edges set relation = 'checked' where relation = 'audited_by'",
        "delete from emem.records where record_id = {r1}",
        "insert into emem.record_tags (record_id, tag, lane_name) values ({r2}, 'stray', 'a')",
    ],
    ids=["move a lane", "rename a relation", "delete a record", "tag without the vocabulary"],
)
def test_a_write_around_the_api_is_found_and_repaired(db: psycopg.Connection, linked: list[int], write: str) -> None:
    db.execute(write.format(**{f"r{i}": record_id for i, record_id in enumerate(linked)}))
    found = derived_mismatch(db)
    assert found
    assert scalar(db, "select emem.rebuild_derived()") == len(found)
    assert derived_mismatch(db) == []


def test_a_label_no_edge_has_any_more_has_no_ends(db: psycopg.Connection, linked: list[int]) -> None:
    """Its vocabulary row stays (a label seen once; removing it could race a concurrent first use)."""
    db.execute("select emem.unlink_records(%s)", (edge_of(db, "reviewed"),))
    assert ends_of(db, "reviewed") == {}
    assert scalar(db, "select count(*) from emem.edge_label_vocabulary where label = 'reviewed'") == 1


@pytest.mark.parametrize("table", ["tag_vocabulary", "edge_label_vocabulary"])
def test_agents_cannot_read_the_derived_tables(
    db: psycopg.Connection, make_role: Callable[..., str], linked: list[int], table: str
) -> None:
    """They hold every lane's tags and labels."""
    role = make_role("agent")
    db.execute(f"set role {role}")
    try:
        with pytest.raises(errors.InsufficientPrivilege):
            db.execute(f"select * from emem.{table}")
    finally:
        db.execute("reset role")


@pytest.mark.parametrize("profile", ["record_vectors, tags, window_vectors, fulltext", "tags_by_terms, fulltext"])
def test_every_lane_and_the_lanes_labels_find_the_same_edges(
    db: psycopg.Connection,
    linked: list[int],
    make_role: Callable[..., str],
    dsn: Callable[..., str],
    profile: str,
) -> None:
    """Over every lane a question's edges come from the label vocabulary and the label rows, within
    lanes from the same rows read lane first: an agent reading every lane under strict isolation
    gets the owner's pages and totals, read lazily or whole, including a term several labels hold."""
    ids = linked
    link(db, ids[4], ids[5], "checked", '{"kind": "audit", "team": "North Wind"}')
    db.execute("select emem.create_agent_profile('everything', array['a', 'b'])")
    db.execute("select emem.set_agent_setting('everything', 'emem.lane_isolation', 'strict')")
    db.execute("select emem.set_agent_setting('everything', 'emem.pipeline_profile', %s)", (profile,))
    questions = ["what was audited?", "who audited it for north wind in 2024?", "paid INV-7 audit reviewed"]
    with (
        psycopg.connect(dsn(), autocommit=True) as agent,
        psycopg.connect(dsn(), autocommit=True) as owner,
        psycopg.connect(dsn(), autocommit=True) as whole,
    ):
        owner.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
        whole.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
        read_lazily(owner)
        read_lazily(agent)
        agent.execute(f"set role {make_role('agent', 'everything')}")  # tuned by the owner, then the agent
        for question in questions:
            pages = {
                name: [
                    scalar(conn, "select emem.e_gather_find_envelope(%s, null, %s, 2)", (question, page))
                    for page in (1, 2, 3)
                ]
                for name, conn in (("owner", owner), ("agent", agent), ("whole", whole))
            }
            rows = {name: [[r["record_id"] for r in p["rows"]] for p in found] for name, found in pages.items()}
            assert rows["owner"] == rows["agent"] == rows["whole"], question
            assert any(rows["owner"]), question
            totals = {name: found[0]["total_candidates"] for name, found in pages.items()}
            assert totals["owner"] == totals["agent"] == totals["whole"], question
