"""The SQL write API: each function, and each of its errors (a clear error, nothing written)."""

import functools
import json
from collections.abc import Callable

import psycopg
import pytest
import writes
from databases import MakeRole
from psycopg import errors
from queries import scalar
from writes import put_one


def sales_lane_and_space(db: psycopg.Connection, make_role: MakeRole) -> int:
    """Lane sales and an active space of 3 dimensions (its id)."""
    db.execute("select emem.create_lane('sales')")
    space_id: int = scalar(db, "select emem.create_embedding_space('test-model', 3, null, true)")
    return space_id


# The tests of the writes into a lane write into a clone of the lane and its space.
SPACE = pytest.mark.corpus(sales_lane_and_space, read_only=False)


@pytest.fixture
def space(built: int) -> int:
    return built


def count(db: psycopg.Connection, table: str) -> int:
    rows: int = scalar(db, f"select count(*) from emem.{table}")
    return rows


put = functools.partial(put_one, lane="sales")


def test_create_lane_is_idempotent_and_checks_the_name(db: psycopg.Connection) -> None:
    assert scalar(db, "select emem.create_lane('sales')") == "sales"
    db.execute("select emem.create_lane('sales')")
    assert count(db, "lanes") == 1
    with pytest.raises(errors.InvalidParameterValue, match="invalid lane name"):
        db.execute("select emem.create_lane('Sales Team')")


def test_agent_profile_needs_known_lanes(db: psycopg.Connection) -> None:
    db.execute("select emem.create_lane('sales')")
    with pytest.raises(errors.InvalidParameterValue, match=r"unknown lane\(s\) \{hr\}"):
        db.execute("select emem.create_agent_profile('clerk', array['sales', 'hr'])")
    assert count(db, "agent_profiles") == 0
    db.execute("select emem.create_agent_profile('clerk', array['sales'])")
    assert db.execute("select lane_name from emem.profile_lanes").fetchall() == [("sales",)]


def test_bind_role_checks_role_and_profile(db: psycopg.Connection, make_role: MakeRole) -> None:
    role = make_role()
    with pytest.raises(errors.InvalidParameterValue, match="unknown agent profile"):
        db.execute("select emem.bind_role(%s, 'nobody')", (role,))
    with pytest.raises(errors.InvalidParameterValue, match="unknown database role"):
        db.execute("select emem.bind_role('no_such_role_x', 'nobody')")


def test_embedding_space_gets_hnsw_indexes_and_one_is_active(db: psycopg.Connection) -> None:
    first = scalar(db, "select emem.create_embedding_space('m1', 3, null, true)")
    second = scalar(db, "select emem.create_embedding_space('m2', 5, null, true)")
    assert db.execute("select space_id from emem.embedding_spaces where is_active").fetchall() == [(second,)]
    indexes = {row[0] for row in db.execute("select indexdef from pg_indexes where schemaname = 'emem'")}
    for space_id, dimension in ((first, 3), (second, 5)):
        assert any(
            f"hnsw (((embedding)::vector({dimension})) vector_cosine_ops) WHERE (space_id = {space_id})" in d
            and "record_vectors" in d
            for d in indexes
        )
        assert any(f"WHERE (space_id = {space_id})" in d and "windows" in d for d in indexes)
    with pytest.raises(errors.InvalidParameterValue, match="dimension 0 is out of range"):
        db.execute("select emem.create_embedding_space('m3', 0)")
    with pytest.raises(errors.InvalidParameterValue, match="unknown embedding space 99"):
        db.execute("select emem.activate_embedding_space(99)")


@SPACE
def test_put_record_returns_its_id_with_tags(db: psycopg.Connection, space: int) -> None:
    record_id = scalar(
        db, "select emem.put_record('note', 'Kowalski billed INV-2031', 'sales', array['Invoice', ' Project  Apollo '])"
    )
    assert scalar(db, "select tags from emem.record_summaries where record_id = %s", (record_id,)) == [
        "invoice",
        "project apollo",
    ]


@SPACE
@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"content": "  "}, "content must be a non-empty text"),
        ({"kind": "memo"}, "kind must be one of note, conversation, file, entity"),
        ({"lane": "nowhere"}, "lane 'nowhere' is not a lane this role may write"),
        ({"kind": "conversation"}, "need a thread_id"),
        ({"thread_id": "c1"}, "only conversation and file records have a thread_id"),
        ({"tags": ["ok", " \t"]}, "tags must be an array of at most 1000 texts of 1 to 200 characters"),
        ({"authority": 2}, "authority must be a number from 0 to 1"),
        ({"metadata": [1]}, "metadata must be a JSON object"),
        ({"vector": [1, 2]}, "vector has 2 dimensions but embedding space"),
        ({"vector": "[1,2,3,4]"}, "vector has 4 dimensions but embedding space"),
        ({"vector": {"x": 1}}, "vector must be an array of numbers, or pgvector.s text"),
        ({"vector": [0, 0, 0]}, "zero vector"),
        ({"colour": "red"}, "has an unknown key"),
    ],
)
def test_bad_record_is_refused_and_nothing_is_written(
    db: psycopg.Connection, space: int, item: dict[str, object], message: str
) -> None:
    good = {"kind": "note", "content": "fine", "lane": "sales"}
    with pytest.raises((errors.InvalidParameterValue, errors.InsufficientPrivilege), match=message):
        db.execute("select * from emem.put_records(%s)", (json.dumps([good, {**good, **item}]),))
    assert count(db, "records") == 0


@SPACE
def test_bulk_path_is_all_or_nothing_and_names_the_bad_item(db: psycopg.Connection, space: int) -> None:
    items = [
        {"kind": "note", "content": f"note {i}", "lane": "sales", "tags": ["t"], "vector": [1, i, 0]} for i in range(5)
    ]
    items[3]["content"] = ""
    with pytest.raises(errors.InvalidParameterValue, match="item 4: content"):
        db.execute("select * from emem.put_records(%s)", (json.dumps(items),))
    assert (count(db, "records"), count(db, "record_tags"), count(db, "record_vectors")) == (0, 0, 0)
    items[3]["content"] = "fixed"
    rows = db.execute("select item_number, record_id from emem.put_records(%s)", (json.dumps(items),)).fetchall()
    assert [n for n, _ in rows] == [1, 2, 3, 4, 5]
    assert (count(db, "records"), count(db, "record_tags"), count(db, "record_vectors")) == (5, 5, 5)


@SPACE
def test_same_source_key_is_written_once(db: psycopg.Connection, space: int) -> None:
    first = put(db, "chunk", source_key="file:a#1")
    again = db.execute(
        "select record_id, created from emem.put_records(%s)",
        (json.dumps([{"kind": "note", "content": "chunk", "lane": "sales", "source_key": "file:a#1"}]),),
    ).fetchone()
    assert again == (first, False)
    assert count(db, "records") == 1


@SPACE
def test_vector_of_wrong_dimension_names_both(db: psycopg.Connection, space: int) -> None:
    record_id = put(db)
    with pytest.raises(
        errors.InvalidParameterValue, match=r"has 2 dimensions but embedding space \d+ \(test-model\) has 3"
    ):
        db.execute("select emem.put_record_vector(%s, '[1,2]')", (record_id,))


@SPACE
@pytest.mark.parametrize("vector", ["[NaN,1,1]", "[Infinity,1,1]"])
def test_vector_with_nan_or_infinity_is_refused(db: psycopg.Connection, space: int, vector: str) -> None:
    record_id = put(db)
    with pytest.raises(psycopg.errors.DataException):
        db.execute("select emem.put_record_vector(%s, %s)", (record_id, vector))
    assert count(db, "record_vectors") == 0


@SPACE
def test_put_record_vector_replaces_and_checks(db: psycopg.Connection, space: int) -> None:
    record_id = put(db)
    db.execute("select emem.put_record_vector(%s, '[1,0,0]')", (record_id,))
    db.execute("select emem.put_record_vector(%s, '[0,1,0]')", (record_id,))
    assert db.execute("select embedding::text from emem.record_vectors").fetchall() == [("[0,1,0]",)]
    with pytest.raises(errors.InvalidParameterValue, match="unknown record 999"):
        db.execute("select emem.put_record_vector(999, '[1,0,0]')")
    with pytest.raises(errors.InvalidParameterValue, match="zero vector"):
        db.execute("select emem.put_record_vector(%s, '[0,0,0]')", (record_id,))
    with pytest.raises(errors.InvalidParameterValue, match="unknown embedding space 42"):
        db.execute("select emem.put_record_vector(%s, '[1,0,0]', 42)", (record_id,))


def test_no_active_space_is_a_clear_error(db: psycopg.Connection) -> None:
    db.execute("select emem.create_lane('sales')")
    record_id = put(db)
    with pytest.raises(errors.InvalidParameterValue, match="there is no active embedding space"):
        db.execute("select emem.put_record_vector(%s, '[1,0,0]')", (record_id,))


@SPACE
def test_tag_and_untag(db: psycopg.Connection, space: int) -> None:
    record_id = put(db)
    db.execute("select emem.tag_record(%s, array['A', 'b'])", (record_id,))
    db.execute("select emem.tag_record(%s, array['a'])", (record_id,))
    assert scalar(db, "select emem.untag_record(%s, array['B', 'zzz'])", (record_id,)) == 1
    assert db.execute("select tag from emem.record_tags").fetchall() == [("a",)]
    with pytest.raises(errors.InvalidParameterValue, match="tags must be an array of 1 to 1000 texts"):
        db.execute("select emem.tag_record(%s, array[''])", (record_id,))
    with pytest.raises(errors.InvalidParameterValue, match="unknown record 0"):
        db.execute("select emem.tag_record(0, array['a'])")


@SPACE
def test_link_records_keeps_relation_and_property_labels(db: psycopg.Connection, space: int) -> None:
    kowalski, apollo = put(db, "Kowalski"), put(db, "Apollo migration")
    db.execute(
        "select emem.link_records(%s, %s, 'billed', %s)",
        (kowalski, apollo, json.dumps({"invoice": "INV-2031", "amount": {"value": 1200, "unit": "EUR"}})),
    )
    labels = {row[0]: row[1] for row in db.execute("select label, label_terms from emem.edge_labels")}
    assert labels == {"billed": ["bill"], "INV-2031": ["inv-2031"], "1200": ["1200"], "EUR": ["eur"]}
    with pytest.raises(errors.InvalidParameterValue, match="unknown to record 77"):
        db.execute("select emem.link_records(%s, 77, 'billed')", (kowalski,))
    with pytest.raises(errors.InvalidParameterValue, match="properties must be a JSON object"):
        db.execute("select emem.link_records(%s, %s, 'billed', '[1]')", (kowalski, apollo))
    with pytest.raises(errors.InvalidParameterValue, match="relation must be a text of 1 to 200 characters"):
        db.execute("select emem.link_records(%s, %s, ' ')", (kowalski, apollo))


def conversation(db: psycopg.Connection, thread: str, turns: int, lane: str = "sales") -> list[int]:
    items = [
        {"kind": "conversation", "content": f"turn {i}", "thread_id": thread, "thread_position": i}
        for i in range(turns)
    ]
    return writes.put(db, items, lane=lane)


@SPACE
def test_window_over_consecutive_turns(db: psycopg.Connection, space: int) -> None:
    turns = conversation(db, "c1", 4)
    window_id = scalar(db, "select emem.put_window(%s, '[1,1,0]')", (turns[1:4],))
    assert db.execute("select thread_id, first_position, last_position from emem.windows").fetchone() == ("c1", 1, 3)
    assert sorted(r[0] for r in db.execute("select record_id from emem.window_members")) == turns[1:4]
    assert scalar(db, "select emem.put_window(%s, '[0,1,0]')", (turns[1:4],)) == window_id


@SPACE
@pytest.mark.parametrize(
    ("pick", "message"),
    [
        (lambda a, b, note: [a[0], a[2]], "must be consecutive"),
        (lambda a, b, note: [a[0], b[1]], "one conversation or of one file"),
        (lambda a, b, note: [note], "one conversation or of one file"),
        (lambda a, b, note: [a[0], a[0]], "must be consecutive"),
        (lambda a, b, note: [], "an array of 1 to 1000 record ids"),
    ],
)
def test_window_members_must_be_consecutive_records_of_one_thread(
    db: psycopg.Connection, space: int, pick: Callable[[list[int], list[int], int], list[int]], message: str
) -> None:
    a, b, note = conversation(db, "c1", 3), conversation(db, "c2", 3), put(db)
    with pytest.raises(errors.InvalidParameterValue, match=message):
        db.execute("select emem.put_window(%s::bigint[], '[1,1,0]')", (pick(a, b, note),))
    assert count(db, "windows") == 0


@SPACE
def test_label_intersection_is_exact(db: psycopg.Connection, space: int) -> None:
    both = put(db, "both", tags=["invoice", "customer:acme"])
    put(db, "only invoice", tags=["invoice"])
    put(db, "only acme", tags=["customer:acme", "other"])
    extra = put(db, "both and more", tags=["invoice", "customer:acme", "q3"])
    found = db.execute("select record_id from emem.records_with_all_tags(array['Invoice', 'customer:acme'])")
    assert [r[0] for r in found] == [both, extra]
    assert scalar(db, "select count(*) from emem.records_with_all_tags(array['invoices'])") == 0
    with pytest.raises(errors.InvalidParameterValue):
        db.execute("select * from emem.records_with_all_tags(array[]::text[])")


@SPACE
def test_a_batch_may_not_repeat_a_source_key_within_a_lane(db: psycopg.Connection, space: int) -> None:
    db.execute("select emem.create_lane('hr')")
    item = {"kind": "note", "content": "chunk", "lane": "sales", "source_key": "file:a#1"}
    with pytest.raises(errors.InvalidParameterValue, match="item 3: repeats the lane and source_key"):
        db.execute("select * from emem.put_records(%s)", (json.dumps([item, {**item, "lane": "hr"}, item]),))
    rows = db.execute("select created from emem.put_records(%s)", (json.dumps([item, {**item, "lane": "hr"}]),))
    assert [r[0] for r in rows] == [True, True]


@SPACE
def test_a_vector_may_come_as_pgvector_text(db: psycopg.Connection, space: int) -> None:
    as_text, as_array = put(db, "text", vector="[3,4,0]"), put(db, "array", vector=[3, 4, 0])
    stored: dict[int, str] = dict(db.execute("select record_id, embedding::text from emem.record_vectors").fetchall())
    assert stored[as_text] == stored[as_array] == "[0.6,0.8,0]"


@SPACE
def test_a_record_is_queued_in_every_space_but_the_one_its_vector_came_in(db: psycopg.Connection, space: int) -> None:
    other: int = scalar(db, "select emem.create_embedding_space('other-model', 4)")
    stored = put(db, "stored before", source_key="file:a#1")
    items = [
        {"kind": "note", "content": "with a vector", "lane": "sales", "vector": [1, 0, 0]},
        {"kind": "note", "content": "without one", "lane": "sales"},
        {"kind": "note", "content": "stored before", "lane": "sales", "source_key": "file:a#1", "vector": [0, 1, 0]},
    ]
    with_vector, without, again = (
        row[0]
        for row in db.execute("select record_id from emem.put_records(%s) order by item_number", (json.dumps(items),))
    )
    assert again == stored
    queued = set(db.execute("select space_id, record_id from emem.embedding_queue where record_id is not null"))
    assert queued == {(other, stored), (space, stored), (other, with_vector), (space, without), (other, without)}
