"""Every malformed item of put_records is refused before anything is written, with SQLSTATE 22023
and its item number; link_records refuses relations and property values it cannot index.
Nothing of a refused call is written."""

import json
from typing import Any

import psycopg
import pytest
from databases import MakeRole
from psycopg import errors
from queries import scalar

GOOD = {"kind": "note", "content": "a good note", "lane": "sales"}
CJK = "".join(chr(0x4E00 + n) for n in range(1000))  # 1000 characters, 3000 bytes
CONVERSATION = {"kind": "conversation", "content": "a turn", "lane": "sales", "thread_position": 0}

MALFORMED: list[tuple[dict[str, Any], str]] = [
    ({"source_key": "k" * 501}, "source_key must be a non-empty text of at most 500 characters"),
    ({"source_key": "\u3000\u2003"}, "source_key must be a non-empty text"),
    ({**CONVERSATION, "thread_id": "t" * 501}, "conversation and file records need a thread_id"),
    ({**CONVERSATION, "thread_id": "\u00a0\u202f"}, "conversation and file records need a thread_id"),
    ({"content": "\u2003\u200b\u3000"}, "content must be a non-empty text"),
    ({"tags": ["t" * 201]}, "tags must be an array of at most 1000 texts of 1 to 200 characters"),
    ({"tags": [f"t{n}" for n in range(1001)]}, "tags must be an array of at most 1000 texts"),
    ({"tags": ["\u1680\u205f"]}, "tags must be an array of at most 1000 texts of 1 to 200 characters, not only"),
    ({"metadata": {"blob": "m" * 70_000}}, "metadata must be at most 64 kB"),
    ({"occurred_at": "soon"}, "occurred_at must be an ISO 8601 date or time"),
    ({"occurred_at": "2024-02-30"}, "occurred_at must be an ISO 8601 date or time"),
    ({"occurred_at": "99999999-01-01"}, "occurred_at must be an ISO 8601 date or time"),
    ({"authority": 1e-50}, "authority must be a number from 0 to 1"),
    ({"authority": 1.5}, "authority must be a number from 0 to 1"),
    ({"authority": "high"}, "authority must be a number from 0 to 1"),
    ({"vector": "[1,NaN,0]"}, "vector is not a vector of numbers"),
    ({"vector": [1, 1e300, 0]}, "vector is not a vector of numbers"),
    ({"vector": [1, "a", 0]}, "vector is not a vector of numbers"),
    ({"vector": [1, 0]}, "vector has 2 dimensions but embedding space"),
    ({"vector": [0, 0, 0]}, "vector is the zero vector"),
]


def sales_lane(db: psycopg.Connection, make_role: MakeRole) -> None:
    db.execute("select emem.create_lane('sales'), emem.create_embedding_space('m', 3, null, true)")


# A refused put_records writes nothing: those tests read the lane; the link tests write records first.
READS = pytest.mark.corpus(sales_lane, read_only=True)
pytestmark = pytest.mark.corpus(sales_lane, read_only=False)


@pytest.fixture
def sales(db: psycopg.Connection) -> psycopg.Connection:
    return db


@READS
@pytest.mark.parametrize(("fields", "message"), MALFORMED)
def test_a_malformed_item_is_refused_with_its_number_and_nothing_is_written(
    sales: psycopg.Connection, fields: dict[str, Any], message: str
) -> None:
    items = [GOOD, {**GOOD, "content": "another good note"}, {**GOOD, **fields}, {**GOOD, "content": "last"}]
    with pytest.raises(errors.InvalidParameterValue) as refused:
        sales.execute("select * from emem.put_records(%s)", (json.dumps(items),))
    primary = refused.value.diag.message_primary
    assert primary is not None and primary.startswith(f"item 3: {message}")
    assert scalar(sales, "select count(*) from emem.records") == 0


@pytest.mark.parametrize(
    ("relation", "properties"),
    [
        ("\t", {}),
        ("\u3000\u2003", {}),
        ("billed\x07by", {}),
        ("r" * 201, {}),
        ("billed", {"note": CJK}),  # 1000 characters that need 3000 bytes
        ("billed", {"amount": int("9" * 1001)}),  # a number is a label too
        ("billed", {"deep": {"deeper": ["x" * 1001]}}),
    ],
)
def test_link_records_refuses_what_it_cannot_store_or_index(
    sales: psycopg.Connection, relation: str, properties: dict[str, Any]
) -> None:
    ids = [scalar(sales, "select emem.put_record('note', %s, 'sales')", (text,)) for text in "ab"]
    with pytest.raises(errors.InvalidParameterValue):
        sales.execute("select emem.link_records(%s, %s, %s, %s)", (*ids, relation, json.dumps(properties)))
    assert scalar(sales, "select count(*) from emem.edges") == 0


def test_link_records_keeps_the_longest_values_it_accepts(sales: psycopg.Connection) -> None:
    ids = [scalar(sales, "select emem.put_record('note', %s, 'sales')", (text,)) for text in "ab"]
    properties = {"note": CJK[:666], "code": "c" * 1000, "amount": int("9" * 1000)}
    sales.execute("select emem.link_records(%s, %s, 'billed', %s)", (*ids, json.dumps(properties)))
    # The relation and 3 values, at each of the edge's two ends.
    assert scalar(sales, "select count(*) from emem.edge_labels") == 8
