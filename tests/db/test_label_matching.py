"""Tags and edge labels match as people write them, in the database: the terms the
tag vocabulary and the edge labels store, what the tag lookups find, and the upgrade that
recomputes the terms stored by an earlier release."""

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from databases import MakeRole
from finds import envelope, record_ids, with_tuning
from psycopg import sql
from queries import scalar
from releases import emulate_modules_of, require_legacy_modules, scratch_database
from writes import put

TAGS = [
    "customer:north-wind",
    "customer:blue-harbor",
    "sensor-offline",
    "sensor-online",
    "q3-2024",
    "q3-2023",
    "purchase order",
    "sales-order",
    "runbooks",
    "won",
    "lost",
    "to do",
    "done",
    "inv-2031",
]


def labels(db: psycopg.Connection, make_role: MakeRole) -> dict[str, int]:
    """One record per tag (its content says nothing of the tag), an edge whose relation and
    property are compound words, and a call note linked `about` a client."""
    db.execute("select emem.create_lane('l')")
    items = [{"content": f"record {n}", "tags": [tag]} for n, tag in enumerate(TAGS)]
    items += [{"kind": "entity", "content": name} for name in ("Ola", "Apollo")]
    items += [{"kind": "entity", "content": "Kestrel Ltd", "tags": ["client:kestrel"]}]
    items += [{"content": "Call with them: they want a second site."}]
    ids = put(db, items, lane="l")
    by_label = dict(zip([*TAGS, "person", "project", "client", "call"], ids, strict=True))
    db.execute(
        "select emem.link_records(%s, %s, 'release_captain', %s)",
        (by_label["person"], by_label["project"], json.dumps({"since": "w12-2024", "team": "red-pine"})),
    )
    db.execute("select emem.link_records(%s, %s, 'about')", (by_label["call"], by_label["client"]))
    return by_label


@pytest.fixture
def tagged(built: dict[str, int]) -> dict[str, int]:
    """The record of each tag, and the edge's ends (person, project)."""
    return built


LABELS = pytest.mark.corpus(labels, read_only=True)


def found(db: psycopg.Connection, question: str, profile: str = "tags") -> set[int]:
    db.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
    return set(record_ids(envelope(db, question, None, 1, 100)))


@LABELS
@pytest.mark.parametrize(
    ("question", "tags"),
    [
        ("What did we ship for North Wind?", ["customer:north-wind"]),
        ("blue-harbor orders", ["customer:blue-harbor"]),
        ("Which sensors went offline?", ["sensor-offline"]),
        ("Revenue in Q3 2024", ["q3-2024"]),
        ("Who approved the purchase-order?", ["purchase order"]),
        ("Any sales order today?", ["sales-order"]),
        ("Where is the runbook?", ["runbooks"]),
        ("Which deals have we won?", ["won"]),
        ("What is left to do?", ["to do"]),
        ("Which tasks are done?", ["done"]),
        ("What about INV-2031?", ["inv-2031"]),
    ],
)
@pytest.mark.parametrize("profile", ["tags", "tags_by_terms"])
def test_tags_match_as_people_write_them(
    tagged: dict[str, int], db: psycopg.Connection, question: str, tags: list[str], profile: str
) -> None:
    if profile == "tags" and any(":" in tag for tag in tags):  # the default profile's lookup asks for the namespace
        tags = []
    assert found(db, question, profile) == {tagged[tag] for tag in tags}


@LABELS
@pytest.mark.parametrize("profile", ["tags", "tags_by_terms"])
def test_the_seeds_tags_lookup_asks_for_a_namespace_the_opt_in_one_does_not(
    tagged: dict[str, int], db: psycopg.Connection, profile: str
) -> None:
    """`customer:north-wind`: its namespace's words must be in the question for the default profile's tags
    lookup (its list is ordered by distance alone: a namespace it ignored would bring every record
    of a name into it), not for tags_by_terms."""
    assert found(db, "the customer North Wind", profile) == {tagged["customer:north-wind"]}
    assert (tagged["customer:north-wind"] in found(db, "What did we ship for North Wind?", profile)) == (
        profile == "tags_by_terms"
    )
    namespaces: dict[str, list[str]] = dict(
        db.execute(
            "select tag, namespace_terms from emem.tag_vocabulary"
            " where tag in ('customer:north-wind', 'sensor-offline')"
        ).fetchall()
    )
    assert namespaces == {"customer:north-wind": ["customer"], "sensor-offline": []}


@LABELS
@pytest.mark.parametrize("question", ["What about INV-2032?", "Anything from 2031?", "INV-2032, dated 2031"])
def test_codes_still_match_whole(tagged: dict[str, int], db: psycopg.Connection, question: str) -> None:
    assert tagged["inv-2031"] not in found(db, question)


@LABELS
def test_a_tag_of_stop_words_is_stored_with_its_words(tagged: dict[str, int], db: psycopg.Connection) -> None:
    terms: dict[str, list[str]] = dict(
        db.execute("select tag, tag_terms from emem.tag_vocabulary where tag in ('won', 'to do')").fetchall()
    )
    assert terms == {"won": ["won"], "to do": ["do", "to"]}


@LABELS
@pytest.mark.parametrize("profile", ["tags", "tags_by_terms"])
def test_a_questions_stop_words_match_a_tag_of_stop_words_never_a_relation(
    tagged: dict[str, int], db: psycopg.Connection, profile: str
) -> None:
    """`won` is a tag made of a stop word, and a question asking for it matches it. `about` is a
    relation: a question's "about" brings its edges only where they end at a record the question
    names by a tag, never alone (every note linked `about` anything would crowd the page)."""
    assert found(db, "Which deals have we won?", profile) == {tagged["won"]}
    assert found(db, "What do we know about them?", profile) == set()
    assert found(db, "Which calls were about a second site?", profile) == set()
    about_the_client = {tagged["client"], tagged["call"]}
    assert found(db, "What do we know about the client Kestrel?", profile) == about_the_client
    # The seed's tags lookup asks for the tag's namespace (`client`); the opt-in one does not.
    by_name_alone = about_the_client if profile == "tags_by_terms" else set()
    assert found(db, "What do we know about Kestrel?", profile) == by_name_alone


def calls_about_clients(db: psycopg.Connection, make_role: MakeRole) -> tuple[dict[str, int], dict[str, str]]:
    """Lane a: clients Kestrel, Wren, Osprey and Heron, a call `about` each of the first two; lane
    h: another Osprey and a note `about` it. An agent's role per profile (tags, tags_by_terms)
    that reads lane a only."""
    for lane in ("a", "h"):
        db.execute("select emem.create_lane(%s)", (lane,))
    names = ["kestrel", "wren", "osprey", "heron"]
    clients: list[dict[str, Any]] = [
        {"kind": "entity", "content": f"{name.title()} Ltd", "tags": [f"client:{name}"]} for name in names
    ]
    calls = [{"content": "Call one: they want a second site."}, {"content": "Call two: pricing."}]
    ids = dict(zip([*names, "call_kestrel", "call_wren"], put(db, clients + calls, lane="a"), strict=True))
    hidden: list[dict[str, Any]] = [{"kind": "entity", "content": "Osprey", "tags": ["client:osprey"]}]
    hidden.append({"content": "a note"})
    ids.update(zip(["hidden_osprey", "hidden_note"], put(db, hidden, lane="h"), strict=True))
    for call, client in (("call_kestrel", "kestrel"), ("call_wren", "wren"), ("hidden_note", "hidden_osprey")):
        db.execute("select emem.link_records(%s, %s, 'about')", (ids[call], ids[client]))
    roles = {}
    for profile in ("tags", "tags_by_terms"):
        db.execute("select emem.create_agent_profile(%s, array['a'])", (f"reads_a_{profile}",))
        db.execute("select emem.set_agent_setting(%s, 'emem.pipeline_profile', %s)", (f"reads_a_{profile}", profile))
        roles[profile] = make_role(f"agent_{profile}", f"reads_a_{profile}")
    return ids, roles


@pytest.mark.corpus(calls_about_clients, read_only=True)
@pytest.mark.parametrize("profile", ["tags", "tags_by_terms"])
def test_a_stop_word_relation_brings_only_its_edges_at_the_named_record(
    built: tuple[dict[str, int], dict[str, str]], db: psycopg.Connection, dsn: Callable[..., str], profile: str
) -> None:
    """A question's "about" brings the `about` edges of the client it names, not every edge of
    that name; and a hidden record's edge does not decide which readable edges an agent gets."""
    ids, roles = built
    question = "What do we know about the client {}?"
    assert found(db, question.format("Kestrel"), profile) == {ids["kestrel"], ids["call_kestrel"]}
    owner_osprey = {ids["osprey"], ids["hidden_osprey"], ids["hidden_note"]}
    assert found(db, question.format("Osprey"), profile) == owner_osprey
    with psycopg.connect(dsn(roles[profile]), autocommit=True) as agent:
        for name in ("osprey", "heron"):
            rows = record_ids(envelope(agent, question.format(name.title()), None, 1, 100))
            assert set(rows) == {ids[name]}


@pytest.mark.corpus(calls_about_clients, read_only=True)
def test_a_stop_word_relation_follows_only_a_precise_name(
    built: tuple[dict[str, int], dict[str, str]], db: psycopg.Connection
) -> None:
    """Where the tags a question matches hold more records than Tuning.grammar_tag_records (here
    one), its "about" names nothing precise enough to follow: the same for every page."""
    ids, _ = built
    question = "What do we know about the clients Kestrel and Wren?"
    assert found(db, question, "tags_by_terms") == {
        ids[name] for name in ("kestrel", "wren", "call_kestrel", "call_wren")
    }
    with_tuning(db, grammar_tag_records=1)
    assert found(db, question, "tags_by_terms") == {ids["kestrel"], ids["wren"]}


@LABELS
@pytest.mark.parametrize("question", ["Who is the release captain?", "since W12 2024", "the red pine team"])
def test_edge_labels_match_as_people_write_them(tagged: dict[str, int], db: psycopg.Connection, question: str) -> None:
    ends = {tagged["person"], tagged["project"]}
    assert ends <= found(db, question)


def test_the_labels_terms_are_shown_by_analyse_question(db: psycopg.Connection) -> None:
    analysed = scalar(db, "select emem.analyse_question('Would Kowalski have won Q3 2024?')")
    assert analysed == {
        "terms": ["would", "kowalski", "q3", "2024", "q3-2024"],
        "known_words": [],
        "unknown_terms": ["Kowalski", "Q3", "2024"],
        "stop_words": ["have", "won"],
    }


def test_labels_analysed_in_one_call_get_the_terms_of_one_by_one(db: psycopg.Connection) -> None:
    """A batch's new edge labels are analysed in one call; each gets what a label alone gets."""
    batch = db.execute("select * from emem._analysed_labels(%s)", (TAGS,)).fetchall()
    one_by_one = [
        (
            tag,
            scalar(db, "select emem._label_terms(%s)", (tag,)),
            scalar(db, "select emem._label_namespace_terms(%s)", (tag,)),
        )
        for tag in TAGS
    ]
    assert batch == one_by_one
    assert ("customer:north-wind", ["north", "wind"], ["customer"]) in batch


def test_the_update_recomputes_the_terms_an_earlier_release_stored(db: psycopg.Connection) -> None:
    """0.1.1 stored `north-wind` as one term; after ALTER EXTENSION UPDATE the stored edge labels
    and tag vocabulary have the terms of 0.2.0 and later, and the words find them."""
    require_legacy_modules(db)
    with scratch_database(db, "labels") as conn:
        conn.execute(sql.SQL("create extension emem version {} cascade").format("0.1.1"))
        emulate_modules_of(conn, "0.1.1")
        # What 0.1.1's analysis made of these labels: one term each, as typed.
        conn.execute(
            "create or replace function emem.label_terms(label text) returns text[] language sql immutable strict"
            " as $$ select array[pg_catalog.lower(label)] $$"
        )
        conn.execute("select emem.create_lane('l')")
        ids = [
            scalar(conn, "select emem.put_record('note', %s, 'l', %s)", (content, tags))
            for content, tags in (("Ola", ["customer:north-wind"]), ("Apollo", ["project"]))
        ]
        conn.execute("select emem.link_records(%s, %s, 'billed', %s)", (*ids, json.dumps({"team": "north-wind"})))
        stale = "select label_terms from emem.edge_labels where label = 'north-wind'"
        assert scalar(conn, stale) == ["north-wind"]
        emulate_modules_of(conn, "0.2.1")  # the legacy modules also answer for 0.2.0 on the way
        conn.execute("alter extension emem update")
        info = conn.info
        with psycopg.connect(
            host=info.host, port=info.port, user=info.user, dbname=info.dbname, autocommit=True
        ) as after:
            assert scalar(after, stale) == ["north", "wind"]
            vocabulary: dict[str, list[str]] = dict(
                after.execute("select tag, tag_terms from emem.tag_vocabulary").fetchall()
            )
            assert vocabulary["customer:north-wind"] == ["north", "wind"]
            assert set(ids) == found(after, "Who billed the North Wind team?")
