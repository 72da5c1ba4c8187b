"""Bounded totals (emem.exact_totals_up_to): total_candidates and total_pages are exact while the
merged list holds at most the bound, and beyond it an honest lower bound of at least the bound,
flagged totals_exact = false; 0 means always exact. Pages are those of the exact reading, with a
vector and degraded, under page_filter (totals count every lane) and under strict isolation
(only the readable lanes)."""

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from databases import MakeRole
from finds import envelope, record_ids
from psycopg import errors
from queries import scalar
from writes import put, with_random_vectors

VECTOR = "[1,0,0,0]"
OWN, OTHER = 60, 150  # records tagged `common`, with "Q3" in their text, in each lane
QUESTIONS = {
    "tag": "what about the common notes?",
    "term": "anything from Q3?",
    "edge": "what was audited?",
    "mixed": "common Q3 audited rare INV-7",
    # a narrow tag and a broad edge term: the rare records' 'audited' edges give their far ends 'rare'
    "linked": "which rare ones were audited?",
    # two broad tags and a broad edge term: a 'paid' edge gives an end its far end's broad tags
    "far tags": "common ledger paid",
}


def put_in(db: psycopg.Connection, lane: str, items: list[dict[str, Any]]) -> list[int]:
    """Notes in `lane`, each with a random vector (drawn the same for the same count and lane)."""
    return put(db, with_random_vectors(items, seed=len(items) + len(lane)), lane=lane)


def put_edges(db: psycopg.Connection, pairs: list[tuple[int, int]], relation: str) -> None:
    items = [{"from_record_id": a, "to_record_id": b, "relation": relation} for a, b in pairs]
    db.execute("select emem.put_edges(%s)", (json.dumps(items),))


def link(db: psycopg.Connection, ids: list[int], edges: int) -> None:
    """`edges` edges named 'audited' between these records, each pair once."""
    pairs = [(a, b) for a in ids for b in ids if a < b][:edges]
    put_edges(db, pairs, "audited")


def lanes(db: psycopg.Connection, make_role: MakeRole) -> None:
    """Lane `own` (read by the agent) and lane `other`: a common tag and term on many records of
    each, a rare tag and code on a few, and 'audited' edges inside each lane and from three rare
    records (two to own records, one to another lane's)."""
    for lane in ("own", "other"):
        db.execute("select emem.create_lane(%s)", (lane,))
    db.execute("select emem.create_embedding_space('m', 4, null, true)")
    own = put_in(db, "own", [{"content": f"own note {i} in Q3", "tags": ["common"]} for i in range(OWN)])
    rare = put_in(db, "own", [{"content": f"rare {i} INV-7", "tags": ["rare"]} for i in range(5)])
    other = put_in(db, "other", [{"content": f"other note {i} in Q3", "tags": ["common"]} for i in range(OTHER)])
    link(db, own, 40)
    link(db, other, 90)
    for pair in ([rare[0], own[45]], [rare[1], own[2]], [rare[2], other[0]]):
        link(db, pair, 1)
    pay_ledgers(db, own, other)


def pay_ledgers(db: psycopg.Connection, own: list[int], other: list[int]) -> None:
    """Twelve records tagged `ledger` (and one in lane `other`) and six untagged receipts, joined
    by 'paid' edges to records tagged `common`, `ledger` or nothing, within a lane and across."""
    ledgers = put_in(db, "own", [{"content": f"ledger entry {i}", "tags": ["ledger"]} for i in range(12)])
    receipts = put_in(db, "own", [{"content": f"receipt {i}"} for i in range(6)])
    (far_ledger,) = put_in(db, "other", [{"content": "ledger entry abroad", "tags": ["ledger"]}])
    pairs = [(ledgers[i], own[i]) for i in range(6)]  # to a common record
    pairs += [(ledgers[6], ledgers[7]), (ledgers[8], ledgers[9])]  # ledger to ledger
    pairs += [(ledgers[10], receipts[0]), (ledgers[11], receipts[1]), (own[10], receipts[2])]  # to nothing
    pairs += [(own[11], ledgers[3]), (receipts[3], receipts[4]), (other[5], ledgers[4]), (far_ledger, other[6])]
    put_edges(db, pairs, "paid")


def lanes_and_agents(db: psycopg.Connection, make_role: MakeRole) -> dict[str, str]:
    """The lanes, and an agent role per lane rule, each reading lane `own` only."""
    lanes(db, make_role)
    roles = {}
    for isolation in ("page_filter", "strict"):
        profile = f"reader_{isolation}"
        db.execute("select emem.create_agent_profile(%s, array['own'])", (profile,))
        db.execute("select emem.set_agent_setting(%s, 'emem.lane_isolation', %s)", (profile, isolation))
        roles[isolation] = make_role("agent", profile)
    return roles


# Most tests only read the lanes; those that set the agents' bound or analyse write on a clone.
pytestmark = pytest.mark.corpus(lanes, read_only=True)
WITH_AGENTS = pytest.mark.corpus(lanes_and_agents, read_only=False)


@pytest.fixture
def agents(
    db: psycopg.Connection, built: dict[str, str], dsn: Callable[..., str]
) -> Iterator[dict[str, psycopg.Connection]]:
    """A session of each agent."""
    connections = {isolation: psycopg.connect(dsn(role), autocommit=True) for isolation, role in built.items()}
    yield connections
    for conn in connections.values():
        conn.close()


def set_bound(db: psycopg.Connection, bound: int | None) -> None:
    """The bound for the owner's session and for both agents' profiles (None: the default)."""
    if bound is None:
        db.execute("reset emem.exact_totals_up_to")
    else:
        db.execute("select set_config('emem.exact_totals_up_to', %s, false)", (str(bound),))
    profiles = db.execute("select profile_name from emem.agent_profiles").fetchall()
    for (profile,) in profiles:
        value = None if bound is None else str(bound)
        db.execute("select emem.set_agent_setting(%s, 'emem.exact_totals_up_to', %s)", (profile, value))


def pages(conn: psycopg.Connection, question: str, vector: str | None) -> list[list[int]]:
    return [record_ids(envelope(conn, question, vector, page, 25)) for page in (1, 2, 3)]


def assert_bounded(found: dict[str, Any], exact_total: int, bound: int) -> None:
    """Exact up to the bound; beyond it a lower bound of at least the bound, never above the total."""
    if exact_total <= bound:
        assert found["totals_exact"] and found["total_candidates"] == exact_total
    if found["totals_exact"]:
        assert found["total_candidates"] == exact_total
    else:
        assert exact_total > bound and bound <= found["total_candidates"] <= exact_total
    assert found["total_pages"] == math.ceil(found["total_candidates"] / found["page_size"])


def exact_totals(conn: psycopg.Connection, db: psycopg.Connection, question: str, vector: str | None) -> int:
    set_bound(db, 0)
    found = envelope(conn, question, vector)
    assert found["totals_exact"], "a bound of 0 means always exact"
    total: int = found["total_candidates"]
    return total


@pytest.mark.parametrize("vector", [VECTOR, None], ids=["vector", "degraded"])
@pytest.mark.parametrize("kind", list(QUESTIONS))
def test_totals_are_exact_up_to_the_bound_and_an_honest_lower_bound_beyond(
    db: psycopg.Connection, kind: str, vector: str | None
) -> None:
    question = QUESTIONS[kind]
    total = exact_totals(db, db, question, vector)
    reading = pages(db, question, vector)
    assert total > 100, "the question must pass the smaller bounds"
    for bound in (1, 50, 100, total - 1, total, total + 1, 10_000):
        set_bound(db, bound)
        found = envelope(db, question, vector)
        assert_bounded(found, total, bound)
        assert pages(db, question, vector) == reading, f"bound {bound} changed the pages"


def test_the_default_bound_is_10000_and_0_means_always_exact(db: psycopg.Connection) -> None:
    set_bound(db, None)
    found = envelope(db, QUESTIONS["tag"], VECTOR)
    assert found["totals_exact"] and found["total_candidates"] == exact_totals(db, db, QUESTIONS["tag"], VECTOR)
    explained = scalar(db, "select emem.e_gather_explain(%s, null)", (QUESTIONS["tag"],))
    assert explained["exact_totals_up_to"] == 0  # set by exact_totals
    set_bound(db, None)
    explained = scalar(db, "select emem.e_gather_explain(%s, null)", (QUESTIONS["tag"],))
    assert explained["exact_totals_up_to"] == 10_000


@pytest.mark.parametrize("vector", [VECTOR, None], ids=["vector", "degraded"])
@WITH_AGENTS
def test_seed_rule_counts_every_lane_and_strict_isolation_only_the_readable(
    db: psycopg.Connection, agents: dict[str, psycopg.Connection], vector: str | None
) -> None:
    """The agents read lane `own` (60 records tagged common among its records); lane `other` holds
    150 more."""
    question = QUESTIONS["tag"]
    seed_total = exact_totals(agents["page_filter"], db, question, vector)
    strict_total = exact_totals(agents["strict"], db, question, vector)
    readable = scalar(db, "select count(*) from emem.records where lane_name = 'own'")
    assert seed_total >= OWN + OTHER and OWN <= strict_total <= readable < OWN + OTHER
    readings = {isolation: pages(conn, question, vector) for isolation, conn in agents.items()}
    for bound in (50, 100, 250):
        set_bound(db, bound)
        for isolation, total in (("page_filter", seed_total), ("strict", strict_total)):
            found = envelope(agents[isolation], question, vector)
            assert_bounded(found, total, bound)
            assert found["lane_isolation"] == isolation
            assert pages(agents[isolation], question, vector) == readings[isolation]
    set_bound(db, 100)  # between the readable lane's candidates and every lane's
    assert not envelope(agents["page_filter"], question, vector)["totals_exact"]
    assert envelope(agents["strict"], question, vector)["totals_exact"]


@WITH_AGENTS
def test_explain_says_whether_the_totals_are_exact(
    db: psycopg.Connection, agents: dict[str, psycopg.Connection]
) -> None:
    set_bound(db, 100)
    question = QUESTIONS["mixed"]
    for conn in (db, agents["page_filter"], agents["strict"]):
        explained = scalar(conn, "select emem.e_gather_explain(%s, %s::vector)", (question, VECTOR))
        found = envelope(conn, question, VECTOR)
        assert explained["totals_exact"] == found["totals_exact"]
        assert explained["total_candidates"] == found["total_candidates"]
        assert explained["exact_totals_up_to"] == 100
    narrow_everything(db)  # lists read lazily: their sizes are counted up to the bound only
    owner = scalar(db, "select emem.e_gather_explain(%s, %s::vector)", (question, VECTOR))
    set_bound(db, 0)
    exact = scalar(db, "select emem.e_gather_explain(%s, %s::vector)", (question, VECTOR))
    assert exact["totals_exact"] and all(lookup["candidates_exact"] for lookup in exact["lookups"].values())
    assert not owner["totals_exact"]
    assert not owner["lookups"]["tags"]["candidates_exact"]  # tag `common`, on 210 records, read lazily
    for name, lookup in owner["lookups"].items():
        size = exact["lookups"][name]["candidates"]
        if lookup["candidates_exact"]:
            assert lookup["candidates"] == size
        else:
            assert 100 <= lookup["candidates"] <= size


@WITH_AGENTS
def test_column_statistics_decide_only_under_the_seeds_rule(
    db: psycopg.Connection, agents: dict[str, psycopg.Connection]
) -> None:
    """After ANALYZE the statistics put "Q3" on 210 records: for a list read lazily (its size not
    counted), beyond the bound for every lane; the totals are then the bound itself (an estimate is
    never reported). Strict isolation counts the readable lane instead."""
    db.execute("analyze emem.records")
    question = QUESTIONS["term"]
    narrow_everything(db)
    seed_total = exact_totals(db, db, question, None)
    strict_total = exact_totals(agents["strict"], db, question, None)
    set_bound(db, 100)
    owner = envelope(db, question, None)
    assert not owner["totals_exact"] and owner["total_candidates"] == 100 and seed_total > 100
    strict = envelope(agents["strict"], question, None)
    assert strict["totals_exact"] and strict["total_candidates"] == strict_total == OWN


def test_a_lower_bound_is_the_largest_size_known_exactly(db: psycopg.Connection) -> None:
    """The tag vocabulary counts `common` on 210 records: beyond a bound of 100, find says at least 210."""
    set_bound(db, 100)
    found = envelope(db, QUESTIONS["tag"], None)
    assert not found["totals_exact"] and found["total_candidates"] == OWN + OTHER


def narrow_everything(conn: psycopg.Connection, max_broad_parts: int = 5) -> None:
    """This backend reads any match of more than 5 records lazily (the broad path, which small
    corpora never take), in tiers of at most `max_broad_parts` broad parts. Its filtered HNSW
    scans visit the whole (tiny) graph first: an iterative scan in strict order drops a vector it
    finds after a farther one, a loss of HNSW's recall (which this corpus of random 4-d vectors
    shows once the planner knows the table's size), not of the lazy reading these tests check."""
    conn.execute("select emem.analyse_question('warm')")
    conn.execute(
        "do $$ import dataclasses; state = GD['emem_db']; state.tuning = dataclasses.replace(state.tuning,"
        " exact_candidates=5, filtered_scan_cost_ratio=1e-9, degraded_probe_cost_ratio=1e-9,"
        f" filtered_scan_ef_search=1000, max_broad_parts={max_broad_parts:d}) $$ language plpython3u"
    )


@WITH_AGENTS
@pytest.mark.parametrize("vector", [VECTOR, None], ids=["vector", "degraded"])
@pytest.mark.parametrize("reader", ["owner", "page_filter", "strict"])
@pytest.mark.parametrize(
    "profile", ["record_vectors, tags, window_vectors, fulltext", "tags_by_terms, fulltext_by_rarity"]
)
def test_broad_reading_gives_the_pages_and_honest_totals_of_the_exact_reading(
    db: psycopg.Connection,
    agents: dict[str, psycopg.Connection],
    dsn: Callable[..., str],
    vector: str | None,
    reader: str,
    profile: str,
) -> None:
    """Every tag, term and edge term read lazily (filtered HNSW, walks in record-id order, tiers,
    edges probed and their ends counted up to the bound) against one reading whole."""
    db.execute("analyze emem.edge_labels")
    db.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
    for name in ("reader_page_filter", "reader_strict"):
        db.execute("select emem.set_agent_setting(%s, 'emem.pipeline_profile', %s)", (name, profile))
    with psycopg.connect(dsn(), autocommit=True) as lazy, psycopg.connect(dsn(), autocommit=True) as whole:
        narrow_everything(lazy)
        sessions = (lazy, whole)
        for conn in sessions:
            conn.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
            if reader != "owner":
                conn.execute(f"set role {agents[reader].info.user}")

        def bound(value: int) -> None:
            set_bound(db, value)  # the agents' profiles
            for conn in sessions:  # the owner's sessions
                conn.execute("select set_config('emem.exact_totals_up_to', %s, false)", (str(value),))

        for question in QUESTIONS.values():
            bound(0)
            expected = [envelope(whole, question, vector, page, 25) for page in (1, 2, 3)]
            lazily = [envelope(lazy, question, vector, page, 25) for page in (1, 2, 3)]
            assert [[r["record_id"] for r in p["rows"]] for p in lazily] == [
                [r["record_id"] for r in p["rows"]] for p in expected
            ], f"{question}: the lazy reading's pages differ"
            total = expected[0]["total_candidates"]
            assert lazily[0]["total_candidates"] == total and lazily[0]["totals_exact"]
            for value in (20, 100):
                bound(value)
                assert_bounded(envelope(lazy, question, vector), total, value)


@pytest.mark.parametrize("vector", [VECTOR, None], ids=["vector", "degraded"])
def test_too_many_broad_parts_read_the_smallest_broad_tag_whole(
    db: psycopg.Connection, dsn: Callable[..., str], vector: str | None
) -> None:
    """Two broad tags and a broad edge term make five broad parts (each tag, the edge term, the ends
    of edges to each tag). With at most three, `ledger` is scored whole and `common` still read in
    tiers (its candidates counted only up to the bound): the pages of the whole reading."""
    question = QUESTIONS["far tags"]
    db.execute("select set_config('emem.pipeline_profile', 'tags_by_terms, fulltext_by_rarity', false)")
    with psycopg.connect(dsn(), autocommit=True) as lazy, psycopg.connect(dsn(), autocommit=True) as whole:
        narrow_everything(lazy, max_broad_parts=3)
        for conn in (lazy, whole):
            conn.execute("select set_config('emem.pipeline_profile', 'tags_by_terms, fulltext_by_rarity', false)")
            conn.execute("select set_config('emem.exact_totals_up_to', '20', false)")
        for page in (1, 2, 3):
            expected = [row["record_id"] for row in envelope(whole, question, vector, page, 25)["rows"]]
            assert [row["record_id"] for row in envelope(lazy, question, vector, page, 25)["rows"]] == expected
        explained = scalar(lazy, "select emem.e_gather_explain(%s, %s::vector)", (question, vector))
        assert not explained["lookups"]["tags_by_terms"]["candidates_exact"]


@pytest.mark.corpus(lanes_and_agents, read_only=True)
@pytest.mark.parametrize("value", ["-1", "ten", "1.5", "2147483648"])
def test_the_bound_is_checked(db: psycopg.Connection, agents: dict[str, psycopg.Connection], value: str) -> None:
    db.execute("select set_config('emem.exact_totals_up_to', %s, false)", (value,))
    with pytest.raises(errors.InvalidParameterValue, match=r"emem\.exact_totals_up_to .* accepted: an integer from 0"):
        envelope(db, QUESTIONS["tag"], None)
    with pytest.raises(errors.InvalidParameterValue, match="accepted: an integer from 0"):
        db.execute("select emem.set_agent_setting('reader_page_filter', 'emem.exact_totals_up_to', %s)", (value,))


@WITH_AGENTS
def test_an_agent_cannot_choose_its_own_bound(db: psycopg.Connection, agents: dict[str, psycopg.Connection]) -> None:
    """Exact totals on demand would let an agent pay for counting every lane: the owner decides."""
    set_bound(db, 50)
    agent = agents["page_filter"]
    agent.execute("set emem.exact_totals_up_to = 0")
    found = envelope(agent, QUESTIONS["tag"], None)
    assert not found["totals_exact"]
    with pytest.raises(errors.InsufficientPrivilege):
        agent.execute("select emem.set_agent_setting('reader_page_filter', 'emem.exact_totals_up_to', '0')")
