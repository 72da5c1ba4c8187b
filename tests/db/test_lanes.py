"""Lanes: row-level security keeps every role bound to a profile inside its lanes; a role
bound to no profile reads nothing; the profile comes from the role, never from a claim."""

import json
from collections.abc import Callable

import psycopg
import pytest
from databases import MakeRole
from psycopg import errors
from queries import scalar
from writes import put

TABLES = (
    "records",
    "record_tags",
    "record_vectors",
    "edges",
    "edge_labels",
    "windows",
    "window_members",
    "record_summaries",
)


def lanes(db: psycopg.Connection, make_role: MakeRole) -> dict[str, str]:
    """Records, tags, vectors, an edge and a window in lanes sales and hr; roles for each."""
    for lane in ("sales", "hr"):
        db.execute("select emem.create_lane(%s)", (lane,))
        db.execute("select emem.create_agent_profile(%s, array[%s])", (f"{lane}_agent", lane))
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    ids = {}
    for lane in ("sales", "hr"):
        items = [
            {
                "kind": "note",
                "content": f"{lane} invoice INV-{lane}",
                "lane": lane,
                "tags": ["invoice", lane],
                "vector": [1, 0, 0],
            }
        ] + [
            {
                "kind": "conversation",
                "content": f"{lane} turn {i}",
                "lane": lane,
                "thread_id": f"{lane}-c",
                "thread_position": i,
                "vector": [0, 1, 0],
            }
            for i in range(2)
        ]
        ids[lane] = put(db, items)
        db.execute("select emem.put_window(%s, '[0,1,1]')", (ids[lane][1:],))
        db.execute(
            "select emem.link_records(%s, %s, 'about', '{\"topic\": \"billing\"}')", (ids[lane][0], ids[lane][1])
        )
    db.execute("select emem.link_records(%s, %s, 'crosses', '{}')", (ids["sales"][0], ids["hr"][0]))
    return {"sales": make_role("sales", "sales_agent"), "hr": make_role("hr", "hr_agent"), "none": make_role("none")}


pytestmark = pytest.mark.corpus(lanes, read_only=True)


@pytest.fixture
def two_lanes(built: dict[str, str]) -> dict[str, str]:
    """The roles of the lanes sales and hr, and one bound to no profile (none)."""
    return built


def connect_as(dsn: Callable[..., str], role: str) -> psycopg.Connection:
    return psycopg.connect(dsn(role), autocommit=True)


@pytest.mark.parametrize("table", TABLES)
def test_direct_select_stays_inside_the_lanes(two_lanes: dict[str, str], dsn: Callable[..., str], table: str) -> None:
    with connect_as(dsn, two_lanes["sales"]) as sales, connect_as(dsn, two_lanes["hr"]) as hr:
        for conn, own, other in ((sales, "sales", "hr"), (hr, "hr", "sales")):
            rows = conn.execute(f"select * from emem.{table}").fetchall()
            assert rows, f"{own} sees nothing in {table}"
            assert other not in json.dumps([list(map(str, r)) for r in rows])


def test_edge_across_lanes_is_visible_to_neither_agent(two_lanes: dict[str, str], dsn: Callable[..., str]) -> None:
    for lane in ("sales", "hr"):
        with connect_as(dsn, two_lanes[lane]) as conn:
            assert conn.execute("select relation from emem.edges").fetchall() == [("about",)]


@pytest.mark.parametrize("table", TABLES)
def test_role_with_no_profile_reads_nothing(two_lanes: dict[str, str], dsn: Callable[..., str], table: str) -> None:
    with connect_as(dsn, two_lanes["none"]) as conn:
        assert scalar(conn, f"select count(*) from emem.{table}") == 0


READ_PATHS = [
    "select emem.e_gather_find_envelope('invoice', '[1,0,0]')",
    "select * from emem.e_gather_find('invoice', null)",
    "select emem.e_gather_explain('invoice', '[1,0,0]')",
    "select * from emem.e_timeline('-infinity', 'infinity')",
    "select * from emem.records_with_all_tags(array['invoice'])",
]


@pytest.mark.parametrize("read", READ_PATHS)
def test_role_with_no_profile_is_refused_by_every_read_path(
    two_lanes: dict[str, str], dsn: Callable[..., str], read: str
) -> None:
    """Fail closed: no rows and no totals, but a clear refusal."""
    with (
        connect_as(dsn, two_lanes["none"]) as conn,
        pytest.raises(errors.InsufficientPrivilege, match="bound to no agent profile"),
    ):
        conn.execute(read)


def test_owner_reads_every_lane(two_lanes: dict[str, str], db: psycopg.Connection) -> None:
    assert scalar(db, "select count(distinct lane_name) from emem.records") == 2


def test_label_intersection_stays_inside_the_lanes(two_lanes: dict[str, str], dsn: Callable[..., str]) -> None:
    with connect_as(dsn, two_lanes["sales"]) as conn:
        rows = conn.execute("select lane from emem.records_with_all_tags(array['invoice'])").fetchall()
        assert rows == [("sales",)]


def test_timeline_and_find_stay_inside_the_lanes(two_lanes: dict[str, str], dsn: Callable[..., str]) -> None:
    with connect_as(dsn, two_lanes["hr"]) as conn:
        lanes = {r[0] for r in conn.execute("select lane from emem.e_timeline('-infinity', 'infinity')")}
        assert lanes == {"hr"}
        found = {
            r[0] for r in conn.execute("select lane from emem.e_gather_find('invoice billing INV-sales', '[1,0,0]')")
        }
        assert found == {"hr"}


@pytest.mark.corpus(lanes, read_only=False)
def test_agent_cannot_write_into_another_lane(two_lanes: dict[str, str], dsn: Callable[..., str]) -> None:
    with connect_as(dsn, two_lanes["sales"]) as conn:
        conn.execute("select emem.put_record('note', 'mine', 'sales')")
        with pytest.raises(errors.InsufficientPrivilege, match="lane 'hr' is not a lane this role may write"):
            conn.execute("select emem.put_record('note', 'theirs', 'hr')")
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("insert into emem.records (kind, content, lane_name) values ('note', 'x', 'hr')")
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("select emem.create_lane('mine')")
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("select emem.bind_role(current_user, 'hr_agent')")


def test_profile_cannot_be_claimed(two_lanes: dict[str, str], dsn: Callable[..., str]) -> None:
    with connect_as(dsn, two_lanes["sales"]) as conn:
        with pytest.raises(errors.InsufficientPrivilege, match="permission denied for function _gather"):
            conn.execute("select emem._gather('invoice', null, 1, 30, false, null, null)")
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(f"set role {two_lanes['hr']}")
        conn.execute("set emem.profile = 'hr_agent'")
        conn.execute("set emem.lanes = 'hr'")
        assert {r[0] for r in conn.execute("select lane from emem.e_gather_find('invoice', null)")} == {"sales"}


def test_pool_that_sets_role_reads_that_roles_lanes(two_lanes: dict[str, str], db: psycopg.Connection) -> None:
    db.execute(f"set role {two_lanes['hr']}")
    try:
        assert {r[0] for r in db.execute("select lane from emem.e_gather_find('invoice', null)")} == {"hr"}
        assert {r[0] for r in db.execute("select lane_name from emem.records")} == {"hr"}
    finally:
        db.execute("reset role")
