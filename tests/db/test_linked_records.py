"""linked_records (opt-in): the records linked by an edge, either direction, to a record that holds
a rare question term; an edge counts only when the caller reads both its ends, under strict
isolation and under the page filter."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from databases import MakeRole
from finds import envelope, explain, record_ids
from writes import put

from emem_db.registry import BY_NAME, SEED_WEIGHTS

NEAR, MIDDLE, FAR = [1, 0, 0], [1, 1, 0], [0, 0, 1]
QUESTION = "What did the 18,450.00 EUR invoice INV-7781 pay for?"


@dataclass(frozen=True)
class Ledger:
    """The invoice (the exact hit), the order it settles, the approval that points at it, a sales
    memo linked only to the other lane's copy of the code, and that copy; the agents' roles."""

    invoice: int
    order: int
    approval: int
    memo: int
    hr_file: int
    roles: dict[str, str]


def ledger(db: psycopg.Connection, make_role: MakeRole) -> Ledger:
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    for lane in ("sales", "hr"):
        db.execute("select emem.create_lane(%s)", (lane,))
    invoice, order, approval, memo, *_unlinked = put(
        db,
        [
            {"content": "Invoice INV-7781 from Kestrel Supply: 18,450.00 EUR", "vector": FAR},
            {"content": "Purchase order for forty standing desks", "vector": MIDDLE},
            {"content": "Approved by Marek, finance", "vector": NEAR},
            {"content": "Sales memo on the dispute", "vector": NEAR},
            # Kestrel: on more records than a rare term (Tuning.link_anchor_frequency, 5)
            *({"content": f"Kestrel Supply delivery note {n}", "vector": NEAR} for n in range(21)),
        ],
        lane="sales",
    )
    [hr_file] = put(db, [{"content": "HR file: the INV-7781 dispute", "vector": NEAR}], lane="hr")
    links = ((invoice, order, "settles"), (approval, invoice, "approves"), (hr_file, memo, "about"))
    for start, end, relation in links:
        db.execute("select emem.link_records(%s, %s, %s, '{}')", (start, end, relation))
    roles = {}
    for isolation in ("strict", "page_filter"):
        profile = f"sales_{isolation}"
        db.execute("select emem.create_agent_profile(%s, array['sales'])", (profile,))
        db.execute("select emem.set_agent_setting(%s, 'emem.lane_isolation', %s)", (profile, isolation))
        db.execute("select emem.set_agent_setting(%s, 'emem.pipeline_profile', 'linked_records')", (profile,))
        roles[isolation] = make_role(f"agent_{isolation}", profile)
    return Ledger(invoice, order, approval, memo, hr_file, roles)


pytestmark = pytest.mark.corpus(ledger, read_only=True)


@pytest.fixture
def books(built: Ledger) -> Ledger:
    return built


@pytest.fixture
def agents(books: Ledger, dsn: Callable[..., str]) -> Iterator[dict[str, psycopg.Connection]]:
    """A session of the sales agent under each lane isolation."""
    conns = {isolation: psycopg.connect(dsn(role), autocommit=True) for isolation, role in books.roles.items()}
    yield conns
    for conn in conns.values():
        conn.close()


def ranked(db: psycopg.Connection, question: str, vector: list[int] | None) -> list[int]:
    db.execute("set emem.pipeline_profile = 'linked_records'")
    return record_ids(envelope(db, question, vector, 1, 100))


def test_linked_records_is_an_opt_in_lookup() -> None:
    assert "linked_records" not in SEED_WEIGHTS
    assert BY_NAME["linked_records"].visible_members is not None  # it reaches records through edges


def test_linked_records_brings_the_far_ends_of_an_exact_hits_edges(books: Ledger, db: psycopg.Connection) -> None:
    """Either direction: the order the invoice settles, the approval that points at it, and the
    memo linked to the other lane's record of the code (the owner reads every lane); never the
    exact hits themselves."""
    assert set(ranked(db, QUESTION, NEAR)) == {books.order, books.approval, books.memo}
    assert set(ranked(db, "What did Marek approve?", NEAR)) == {books.invoice}


def test_linked_records_orders_by_the_anchors_rarity_then_distance(books: Ledger, db: psycopg.Connection) -> None:
    """The invoice holds the figure and the code, the hr file the code alone: the invoice's links
    come first, however near the memo is; then nearest first (degraded: by record id)."""
    assert ranked(db, QUESTION, NEAR) == [books.approval, books.order, books.memo]
    assert ranked(db, QUESTION, MIDDLE) == [books.order, books.approval, books.memo]
    assert ranked(db, QUESTION, None) == [books.order, books.approval, books.memo]


def test_linked_records_needs_a_rare_term(books: Ledger, db: psycopg.Connection) -> None:
    assert ranked(db, "What did Kestrel deliver?", NEAR) == []  # on 22 records
    assert ranked(db, "Which invoice?", NEAR) == []


@pytest.mark.parametrize("isolation", ["strict", "page_filter"])
@pytest.mark.parametrize("vector", [NEAR, None])
def test_an_edge_from_a_lane_the_caller_cannot_read_brings_nothing(
    books: Ledger, agents: dict[str, psycopg.Connection], isolation: str, vector: list[int] | None
) -> None:
    """The sales memo is linked only to the hr file: the sales agent never gets it, nor the hr
    file, and explain does not name it either."""
    found = envelope(agents[isolation], QUESTION, vector, 1, 100)
    assert sorted(record_ids(found)) == sorted([books.order, books.approval])
    assert {row["lane"] for row in found["rows"]} == {"sales"}
    assert all(row["found_by"] == ["linked_records"] for row in found["rows"])
    explained = explain(agents[isolation], QUESTION, vector, 1, 100)
    assert books.memo not in {row["record_id"] for row in explained["rows"]}
    if isolation == "strict":  # within lanes the list holds only what the agent may read
        assert found["total_candidates"] == 2


def test_explain_names_linked_records(books: Ledger, db: psycopg.Connection) -> None:
    db.execute("set emem.pipeline_profile = 'record_vectors:1, linked_records:1'")
    explained = explain(db, QUESTION, FAR, 1, 100)
    assert explained["lookups"]["linked_records"]["label"] == "linked"
    assert explained["lookups"]["linked_records"]["plan"] is not None
    [order] = [row for row in explained["rows"] if row["record_id"] == books.order]
    assert "linked_records" in order["found_by"]
    assert order["list_ranks"]["linked_records"] == 1
