"""Reaching from exact hits (opt-in): linked_records, the records linked by an edge, either
direction, to a record that holds a rare question term (an edge counts only when the caller reads
both its ends), and neighbours_of_hits, the turns nearest by meaning to such a record in no thread
(only through an anchor the caller reads); under strict isolation and under the page filter."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from databases import MakeRole
from finds import envelope, explain, record_ids, with_tuning
from writes import put

from emem_db.registry import BY_NAME, SEED_WEIGHTS

NEAR, MIDDLE, FAR = [1, 0, 0], [1, 1, 0], [0, 0, 1]
LOOKUPS = ("linked_records", "neighbours_of_hits")
QUESTION = "What did the 18,450.00 EUR invoice INV-7781 pay for?"


@dataclass(frozen=True)
class Ledger:
    """The invoice (the exact hit), the order it settles, the approval that points at it, a sales
    memo linked only to the other lane's copy of the code, and that copy; the site chat's turns
    nearest the invoice by meaning (nearest first) and a sales turn nearest the hr file; the agents'
    roles, per lane isolation and lookup."""

    invoice: int
    order: int
    approval: int
    memo: int
    hr_file: int
    site_turns: list[int]
    near_hr_file: int
    roles: dict[tuple[str, str], str]


def turn(content: str, thread: str, position: int, vector: list[float]) -> dict[str, object]:
    return {
        "kind": "conversation",
        "content": content,
        "thread_id": thread,
        "thread_position": position,
        "vector": vector,
    }


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
    turns = [turn(f"Site: the desks, part {n}", "site", n, [0, 0.1 * n, 1]) for n in range(10)]
    *site_turns, near_hr_file = put(
        db, [*turns, turn("Sales: about the dispute", "sales", 0, [1, 0.05, 0])], lane="sales"
    )
    [hr_file] = put(db, [{"content": "HR file: the INV-7781 dispute", "vector": NEAR}], lane="hr")
    links = ((invoice, order, "settles"), (approval, invoice, "approves"), (hr_file, memo, "about"))
    for start, end, relation in links:
        db.execute("select emem.link_records(%s, %s, %s, '{}')", (start, end, relation))
    roles = {}
    for isolation in ("strict", "page_filter"):
        for n, lookup in enumerate(LOOKUPS):
            profile = f"sales_{isolation}_{n}"
            db.execute("select emem.create_agent_profile(%s, array['sales'])", (profile,))
            db.execute("select emem.set_agent_setting(%s, 'emem.lane_isolation', %s)", (profile, isolation))
            db.execute("select emem.set_agent_setting(%s, 'emem.pipeline_profile', %s)", (profile, lookup))
            roles[isolation, lookup] = make_role(f"agent_{isolation}_{n}", profile)
    return Ledger(invoice, order, approval, memo, hr_file, site_turns, near_hr_file, roles)


pytestmark = pytest.mark.corpus(ledger, read_only=True)


@pytest.fixture
def books(built: Ledger) -> Ledger:
    return built


@pytest.fixture
def agents(books: Ledger, dsn: Callable[..., str]) -> Iterator[dict[tuple[str, str], psycopg.Connection]]:
    """A session of the sales agent under each lane isolation and lookup."""
    conns = {key: psycopg.connect(dsn(role), autocommit=True) for key, role in books.roles.items()}
    yield conns
    for conn in conns.values():
        conn.close()


def ranked(
    db: psycopg.Connection, question: str, vector: list[int] | None, lookup: str = "linked_records"
) -> list[int]:
    db.execute("select set_config('emem.pipeline_profile', %s, false)", (lookup,))
    return record_ids(envelope(db, question, vector, 1, 100))


@pytest.mark.parametrize("lookup", LOOKUPS)
def test_reaching_from_exact_hits_is_opt_in(lookup: str) -> None:
    assert lookup not in SEED_WEIGHTS
    assert BY_NAME[lookup].visible_members is not None  # it reaches records through other records


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


def test_linked_records_measures_a_hubs_first_links_only(books: Ledger, db: psycopg.Connection) -> None:
    """Of an anchor on more than Tuning.max_anchor_links edges, its first links by record id are
    measured (each costs a distance): here one, the invoice's order (its approval comes later)."""
    with_tuning(db, max_anchor_links=1)
    assert set(ranked(db, QUESTION, NEAR)) == {books.order, books.memo}


def test_linked_records_needs_a_rare_term(books: Ledger, db: psycopg.Connection) -> None:
    assert ranked(db, "What did Kestrel deliver?", NEAR) == []  # on 22 records
    assert ranked(db, "Which invoice?", NEAR) == []


@pytest.mark.parametrize("isolation", ["strict", "page_filter"])
@pytest.mark.parametrize("vector", [NEAR, None])
def test_an_edge_from_a_lane_the_caller_cannot_read_brings_nothing(
    books: Ledger, agents: dict[tuple[str, str], psycopg.Connection], isolation: str, vector: list[int] | None
) -> None:
    """The sales memo is linked only to the hr file: the sales agent never gets it, nor the hr
    file, and explain does not name it either."""
    agent = agents[isolation, "linked_records"]
    found = envelope(agent, QUESTION, vector, 1, 100)
    assert sorted(record_ids(found)) == sorted([books.order, books.approval])
    assert {row["lane"] for row in found["rows"]} == {"sales"}
    assert all(row["found_by"] == ["linked_records"] for row in found["rows"])
    explained = explain(agent, QUESTION, vector, 1, 100)
    assert books.memo not in {row["record_id"] for row in explained["rows"]}
    if isolation == "strict":  # within lanes the list holds only what the agent may read
        assert found["total_candidates"] == 2


@pytest.mark.parametrize("lookup", LOOKUPS)
def test_explain_names_the_lookup(books: Ledger, db: psycopg.Connection, lookup: str) -> None:
    db.execute("select set_config('emem.pipeline_profile', %s, false)", (f"record_vectors:1, {lookup}:1",))
    explained = explain(db, QUESTION, FAR, 1, 100)
    assert explained["lookups"][lookup]["label"] == BY_NAME[lookup].label
    assert explained["lookups"][lookup]["plan"] is not None
    first = books.order if lookup == "linked_records" else books.site_turns[0]
    [row] = [row for row in explained["rows"] if row["record_id"] == first]
    assert lookup in row["found_by"]
    assert row["list_ranks"][lookup] == 1


# ---- neighbours_of_hits ------------------------------------------------------------------------------


def test_neighbours_of_hits_brings_the_turns_nearest_an_exact_hit(books: Ledger, db: psycopg.Connection) -> None:
    """The invoice's ten nearest turns (never a note), nearest the invoice first, then the turn
    nearest the hr file (its code alone: less telling); the same without a question vector."""
    expected = [*books.site_turns, books.near_hr_file]
    assert ranked(db, QUESTION, NEAR, "neighbours_of_hits") == expected
    assert ranked(db, QUESTION, None, "neighbours_of_hits") == expected


def test_neighbours_of_hits_needs_a_rare_term(books: Ledger, db: psycopg.Connection) -> None:
    assert ranked(db, "What did Kestrel deliver?", NEAR, "neighbours_of_hits") == []
    assert ranked(db, "the desks", NEAR, "neighbours_of_hits") == []


@pytest.mark.parametrize("isolation", ["strict", "page_filter"])
@pytest.mark.parametrize("vector", [NEAR, None])
def test_an_anchor_in_a_lane_the_caller_cannot_read_brings_nothing(
    books: Ledger, agents: dict[tuple[str, str], psycopg.Connection], isolation: str, vector: list[int] | None
) -> None:
    """The sales turn nearest the hr file is no neighbour of the invoice: the sales agent never
    gets it through the hr file."""
    found = envelope(agents[isolation, "neighbours_of_hits"], QUESTION, vector, 1, 100)
    assert record_ids(found) == books.site_turns
    assert all(row["found_by"] == ["neighbours_of_hits"] for row in found["rows"])
