"""Ranking fixes of 0.2.0, in the database: words that are never full-text terms, edges above
tags that match the same words, the thread around an exact hit, and degraded orders by relevance
instead of record id."""

from typing import Any

import psycopg
import pytest
import writes
from databases import MakeRole
from finds import envelope, record_ids
from vectors import unit

NEAR = unit(1, 0, 0)  # the question vector's direction
FAR = unit(0, 0, 1)


def one_lane(db: psycopg.Connection, make_role: MakeRole) -> None:
    """Lane l and a space of 3 dimensions."""
    db.execute("select emem.create_lane('l')")
    db.execute("select emem.create_embedding_space('m', 3, null, true)")


# Each test writes into a clone of the lane, but for those reading the captains or the meeting.
pytestmark = pytest.mark.corpus(one_lane, read_only=False)


@pytest.fixture
def lane(db: psycopg.Connection) -> psycopg.Connection:
    return db


def put(db: psycopg.Connection, items: list[dict[str, Any]]) -> list[int]:
    return writes.put(db, items, lane="l")


def ranked(db: psycopg.Connection, profile: str, question: str, vector: list[float] | None = None) -> list[int]:
    db.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
    return record_ids(envelope(db, question, vector, 1, 200))


# ---- words never searched --------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["fulltext", "fulltext_by_rarity", "fulltext_words"])
def test_modal_verbs_and_question_words_are_not_searched_as_rare_names(lane: psycopg.Connection, profile: str) -> None:
    [kowalski, *_modal_turns] = put(
        lane,
        [
            {"content": "Kowalski loves sailing on the lake"},
            {"content": "He would be fine with it"},
            {"content": "We could ask finance"},
            {"content": "Whose laptop is this?"},
        ],
    )
    assert ranked(lane, profile, "Would Kowalski enjoy sailing? Whose boat could he take?") == [kowalski]


# ---- edges above tags --------------------------------------------------------------------------------


def release_captains(lane: psycopg.Connection, make_role: MakeRole) -> dict[str, int]:
    """Twenty records tagged with the words of a `release captain` edge, nearer the question than
    the person the edge names; a second captain of another project."""
    one_lane(lane, make_role)
    put(lane, [{"content": f"release note {i}", "tags": ["release captain"], "vector": NEAR} for i in range(20)])
    put(lane, [{"content": f"kestrel note {i}", "tags": ["project kestrel"], "vector": NEAR} for i in range(20)])
    ola, kestrel, eva, lynx = put(
        lane,
        [
            {"kind": "entity", "content": "Ola", "vector": FAR},
            {"kind": "entity", "content": "Kestrel", "tags": ["project kestrel"], "vector": FAR},
            {"kind": "entity", "content": "Eva", "vector": FAR},
            {"kind": "entity", "content": "Lynx", "tags": ["project lynx"], "vector": FAR},
        ],
    )
    lane.execute("select emem.link_records(%s, %s, 'release captain')", (ola, kestrel))
    lane.execute("select emem.link_records(%s, %s, 'release captain')", (eva, lynx))
    return {"ola": ola, "kestrel": kestrel, "eva": eva, "lynx": lynx}


CAPTAINS = pytest.mark.corpus(release_captains, read_only=True)


@pytest.fixture
def captains(built: dict[str, int]) -> dict[str, int]:
    return built


@CAPTAINS
@pytest.mark.parametrize("vector", [NEAR, None], ids=["vector", "degraded"])
def test_an_edge_outranks_tags_that_match_the_same_words(
    captains: dict[str, int], lane: psycopg.Connection, vector: list[float] | None
) -> None:
    rows = ranked(lane, "tags_by_terms", "Who is a release captain?", vector)
    assert set(rows[:4]) == set(captains.values())  # the edge's ends first, the tagged records after
    assert len(rows) == 24


@CAPTAINS
@pytest.mark.parametrize("vector", [NEAR, None], ids=["vector", "degraded"])
def test_an_edge_end_counts_the_terms_of_its_other_end(
    captains: dict[str, int], lane: psycopg.Connection, vector: list[float] | None
) -> None:
    """The release captain of project Kestrel is at the other end of a `release captain` edge from
    the record tagged `project kestrel`: it matches every word, as Kestrel does."""
    rows = ranked(lane, "tags_by_terms", "Who is the release captain of project Kestrel?", vector)
    assert set(rows[:2]) == {captains["ola"], captains["kestrel"]}
    assert rows.index(captains["eva"]) < rows.index(min(set(rows) - set(captains.values())))


@CAPTAINS
def test_the_seed_tags_lookup_with_a_vector_stays_by_distance(
    captains: dict[str, int], lane: psycopg.Connection
) -> None:
    rows = ranked(lane, "tags", "Who is a release captain?", NEAR)
    assert set(rows[-4:]) == set(captains.values())


# ---- the thread around an exact hit -----------------------------------------------------------------

TURNS = [
    "Ola: good morning",
    "Eva: morning, coffee?",
    "Ola: later, first the invoices",
    "Eva: fine, go ahead",
    "Ola: invoice INV-2031 from Brightline came in at 4,311.60",
    "Eva: that is more than we planned",
    "Ola: we agreed to split it between two teams",
    "Eva: then half goes on this quarter",
    "Ola: done, next topic",
    "Eva: the offsite",
    "Ola: the venue is booked",
]


def two_meetings(lane: psycopg.Connection, make_role: MakeRole) -> list[int]:
    """A meeting whose fifth turn names an invoice, and another meeting that does not."""
    one_lane(lane, make_role)
    ids = put(
        lane,
        [
            {"kind": "conversation", "content": text, "thread_id": "m1", "thread_position": n, "vector": unit(1, n, 0)}
            for n, text in enumerate(TURNS)
        ],
    )
    put(
        lane,
        [
            {"kind": "conversation", "content": text, "thread_id": "m2", "thread_position": n, "vector": NEAR}
            for n, text in enumerate(TURNS[:4] + TURNS[5:])
        ],
    )
    return ids


@pytest.fixture
def meeting(built: list[int]) -> list[int]:
    return built


@pytest.mark.corpus(two_meetings, read_only=True)
def test_thread_context_brings_the_turns_around_an_exact_hit(meeting: list[int], lane: psycopg.Connection) -> None:
    """The anchor (the turn naming the code) first, then its neighbours by steps away, within
    three positions, nearest the question first; nothing of the other meeting."""
    rows = ranked(lane, "thread_context", "What did we decide about INV-2031?", NEAR)
    assert rows == [meeting[4], meeting[3], meeting[5], meeting[2], meeting[6], meeting[1], meeting[7]]
    degraded = ranked(lane, "thread_context", "What did we decide about INV-2031?")
    assert degraded == rows  # by position within a step, without a vector


@pytest.mark.corpus(two_meetings, read_only=True)
def test_thread_context_needs_a_rare_term(meeting: list[int], lane: psycopg.Connection) -> None:
    assert ranked(lane, "thread_context", "What did Ola say about the venue?", NEAR) == []  # Ola: on every other turn
    assert ranked(lane, "thread_context", "Which quarter?", NEAR) == []


@pytest.mark.corpus(two_meetings, read_only=False)
def test_thread_context_keeps_to_the_anchors_thread_and_lane(lane: psycopg.Connection, meeting: list[int]) -> None:
    """Another lane's conversation with the same thread id names the code at position 9: each
    anchor brings the turns of its own lane's thread only."""
    lane.execute("select emem.create_lane('other')")
    other = put(
        lane,
        [
            {
                "kind": "conversation",
                "lane": "other",
                "content": "Eva: INV-2031 again" if n == 9 else f"Eva: other turn {n}",
                "thread_id": "m1",
                "thread_position": n,
            }
            for n in range(11)
        ],
    )
    assert set(ranked(lane, "thread_context", "INV-2031", NEAR)) == {*meeting[1:8], *other[6:11]}


CONVERSATIONS = ["c0", "c1", "c2", "c3"]
CELLO = 12  # the position in c0 where Brygida names the cello lessons
LESSONS = [0, 6, 20, 26]  # her other turns in c0 that name lessons


def chat_turn(thread: str, n: int) -> str:
    """Brygida speaks on every turn of c0 but every fifth (24 of 30: more than anchor_frequency)
    and once in c1; Ottilie speaks on every third turn of the others (32 turns)."""
    if thread == "c0" and n == CELLO:
        return "Brygida: I started cello lessons this week"
    if thread == "c0" and n in LESSONS:
        return f"Brygida: piano lessons again {n}"
    if thread == "c0" and n % 5 != 3:
        return f"Brygida: small talk {n}"
    if thread == "c1" and n == 4:
        return "Brygida: cello lessons here too"
    return f"Ottilie: chat about lessons {n}" if n % 3 == 0 else f"Mateusz: chat {n}"


def four_conversations(lane: psycopg.Connection, make_role: MakeRole) -> dict[str, list[int]]:
    """Four conversations of 30 turns; in c0 the later turns are nearer the question vector."""
    one_lane(lane, make_role)
    return {
        thread: put(
            lane,
            [
                {
                    "kind": "conversation",
                    "content": chat_turn(thread, n),
                    "thread_id": thread,
                    "thread_position": n,
                    "vector": unit(1, 30 - n, 0) if thread == "c0" else FAR,
                }
                for n in range(30)
            ],
        )
        for thread in CONVERSATIONS
    }


@pytest.fixture
def chats(built: dict[str, list[int]]) -> dict[str, list[int]]:
    return built


@pytest.mark.corpus(four_conversations, read_only=True)
def test_thread_context_anchors_a_name_frequent_in_one_thread_but_rare_overall(
    chats: dict[str, list[int]], lane: psycopg.Connection
) -> None:
    """Brygida is on 25 records, more than anchor_frequency, but 24 of them are in c0, a quarter of
    all records: her turns there that hold another word of the question anchor (not her turn in
    c1, although it names the cello too). The anchors come first, by the other words they hold,
    then by distance (degraded: record id); then the turns one step from them, from the best
    anchor's first; the whole thread but the turn no anchor is within three positions of."""
    c0 = chats["c0"]
    question = "When did Brygida start the cello lessons?"
    rows = ranked(lane, "thread_context", question, NEAR)
    assert rows[:7] == [c0[CELLO], c0[26], c0[20], c0[6], c0[0], c0[CELLO + 1], c0[CELLO - 1]]
    assert set(rows) == set(c0) - {c0[16]}
    degraded = ranked(lane, "thread_context", question)
    assert degraded[:5] == [c0[CELLO], c0[0], c0[6], c0[20], c0[26]]
    assert set(degraded) == set(rows)


@pytest.mark.corpus(four_conversations, read_only=True)
def test_thread_context_needs_a_name_concentrated_in_its_thread(
    chats: dict[str, list[int]], lane: psycopg.Connection
) -> None:
    """Ottilie is on 32 records, ten in each of three conversations: telling of none of them."""
    assert ranked(lane, "thread_context", "What did Ottilie say about the lessons?", NEAR) == []
    assert ranked(lane, "thread_context", "What did Ottilie say about the lessons?") == []


def long_thread(lane: psycopg.Connection, make_role: MakeRole) -> list[int]:
    """Thread t0's 30 turns each hold the 60 words zq0 to zq59 (each on 30 of 120 records, all in
    t0: telling of it); three other threads of 30 turns hold none."""
    one_lane(lane, make_role)
    words = " ".join(f"zq{i}" for i in range(60))
    turns = [
        {
            "kind": "conversation",
            "content": f"{words} turn {n}" if thread == "t0" else f"other chat {n}",
            "thread_id": thread,
            "thread_position": n,
            "vector": NEAR if thread == "t0" else FAR,
        }
        for thread in ("t0", "t1", "t2", "t3")
        for n in range(30)
    ]
    return put(lane, turns)


def cached_plan_bytes(conn: psycopg.Connection) -> int:
    row = conn.execute(
        "select coalesce(sum(total_bytes), 0)::bigint from pg_backend_memory_contexts"
        " where name in ('CachedPlan', 'CachedPlanSource', 'CachedPlanQuery')"
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.corpus(long_thread, read_only=True)
def test_long_questions_keep_no_plan_per_length(built: list[int], lane: psycopg.Connection) -> None:
    """thread_context reads each telling term on its own: a question of k such terms kept a plan
    of about 150 kB a term for the backend's life, one per k, so that a session stepping k up
    could fill the server's memory. Of a long question it weighs the first Tuning.thread_terms,
    and a statement text that grows with the question is planned per call."""

    def question(k: int) -> str:
        return " ".join(f"zq{i}" for i in range(k)) + " turn"

    first = ranked(lane, "thread_context", question(16), NEAR)
    assert first and set(first) <= set(built[:30])
    before = cached_plan_bytes(lane)
    for k in range(20, 61, 4):
        assert ranked(lane, "thread_context", question(k), NEAR) == first
    assert cached_plan_bytes(lane) - before < 4 * 1024 * 1024


# ---- degraded orders by relevance -------------------------------------------------------------------


def test_degraded_full_text_ranks_by_bm25_not_record_id(lane: psycopg.Connection) -> None:
    """Written oldest first: a long text naming Kowalski once, a short one, one naming him three
    times; the last has the most occurrences, the long one is scored down for its length."""
    long_text = "Kowalski " + " ".join(f"word{i}" for i in range(80))
    once_long, once_short, thrice = put(
        lane, [{"content": long_text}, {"content": "Kowalski called"}, {"content": "Kowalski, Kowalski and Kowalski"}]
    )
    put(lane, [{"content": f"note {i} on Brightline"} for i in range(5)])
    for profile in ("fulltext", "fulltext_by_rarity", "fulltext_words"):
        assert ranked(lane, profile, "Kowalski") == [thrice, once_short, once_long], profile
    # the default profile's lookup keeps terms matched first: a note naming both comes before all of them
    [both] = put(lane, [{"content": long_text + " Brightline"}])
    assert ranked(lane, "fulltext", "Kowalski Brightline")[:4] == [both, thrice, once_short, once_long]


@pytest.mark.parametrize("profile", ["tags", "tags_by_terms"])
def test_degraded_tags_rank_by_the_rarest_tag_not_record_id(lane: psycopg.Connection, profile: str) -> None:
    """Ten records tagged `project` and `apollo` written before one tagged `project apollo`: all
    match both words; the one matched through the rarer tag comes first."""
    put(lane, [{"content": f"note {i}", "tags": ["project", "apollo"]} for i in range(10)])
    [rare] = put(lane, [{"content": "the rare one", "tags": ["project apollo"]}])
    assert ranked(lane, profile, "project apollo")[0] == rare
