"""Ingest of notes, conversations and files, against the real database.

The embedding gateway is HashGateway: 8-dimension vectors made from a hash of the text (a test
double of the gateway, not of PostgreSQL), so a vector tells which text was embedded.
"""

import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from doubles import CONVERSATIONS, HashGateway, hash_vector
from queries import row, scalar
from vectors import unit

from emem_client import Client
from emem_client.documents import Block, BlockKind, chunk_text, chunks_of, read_document
from emem_client.gateways import GATEWAY_DOWN, GatewayError
from emem_client.ingest import ingest_conversations, ingest_files, ingest_notes
from emem_client.sources import read_notes
from emem_client.units import IngestError, IngestOptions, IngestReport, WindowShape

QUIET = IngestOptions(lane="team", progress=False)


@pytest.fixture
def gateway() -> HashGateway:
    return HashGateway()


@pytest.fixture
def client(db: psycopg.Connection, gateway: HashGateway) -> Client:
    db.execute("select emem.create_lane('team'), emem.create_lane('docs')")
    client = Client(db, gateway)
    client.ensure_space()
    return client


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def thread_rows(db: psycopg.Connection, thread_id: str) -> list[tuple[str, int, str, str, str]]:
    return db.execute(
        "select kind, thread_position, content, lane_name, occurred_at::text from emem.records"
        " where thread_id = %s order by thread_position",
        (thread_id,),
    ).fetchall()


def windows(db: psycopg.Connection) -> list[tuple[str, list[int], str | None, list[str]]]:
    """(thread_id, member positions, embedding) of every window."""
    return db.execute(
        "select w.thread_id, array_agg(r.thread_position order by r.thread_position), w.embedding::text,"
        " array_agg(distinct r.thread_id)"
        " from emem.windows as w join emem.window_members as m using (window_id)"
        " join emem.records as r on r.record_id = m.record_id"
        " group by w.window_id, w.lane_name order by w.thread_id, min(r.thread_position)"
    ).fetchall()


def counts(db: psycopg.Connection) -> tuple[int, ...]:
    return row(
        db,
        "select (select count(*) from emem.records), (select count(*) from emem.record_vectors),"
        " (select count(*) from emem.windows), (select count(*) from emem.window_members),"
        " (select count(*) from emem.edges), (select count(*) from emem.record_tags)",
    )


def parse_vector(text: str) -> list[float]:
    return [float(value) for value in text.strip("[]").split(",")]


def test_conversation_turns_become_records_in_order(db: psycopg.Connection, client: Client, tmp_path: Path) -> None:
    report = ingest_conversations(client, [write_json(tmp_path / "c.json", CONVERSATIONS)], QUIET)
    assert (report.records_created, report.problems) == (6, [])
    rows = thread_rows(db, "standup-1")
    assert [row[:4] for row in rows] == [
        ("conversation", 0, "Maya: The finance export failed again, ticket OPS-1432.", "team"),
        ("conversation", 1, "Tomás: It runs on the replica now.", "team"),
        ("conversation", 2, "Maya: Yes, since two weeks.", "team"),
        ("conversation", 3, "Then let us turn on hot_standby_feedback.", "team"),
    ]
    assert [row[4] for row in rows] == [
        "2024-03-04 09:00:00+00",
        "2024-03-04 09:00:00+00",
        "2024-03-04 09:02:00+00",
        "2024-03-04 09:00:00+00",
    ]
    assert {row[3] for row in thread_rows(db, "review-2")} == {"docs"}
    assert [r.thread_position for r in client.records_with_all_tags(["ops"])] == [0, 1, 2, 3]


def test_every_turn_has_the_vector_of_its_own_text(db: psycopg.Connection, client: Client, tmp_path: Path) -> None:
    ingest_conversations(client, [write_json(tmp_path / "c.json", CONVERSATIONS)], QUIET)
    content, embedding = row(
        db,
        "select r.content, v.embedding::text from emem.records as r join emem.record_vectors as v using (record_id)"
        " where r.thread_id = 'review-2' and r.thread_position = 1",
    )
    assert parse_vector(embedding) == pytest.approx(unit(*hash_vector(content)))


def test_windows_cover_consecutive_turns_and_never_cross_conversations(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    report = ingest_conversations(client, [write_json(tmp_path / "c.json", CONVERSATIONS)], QUIET)
    found = windows(db)
    assert [(thread, positions) for thread, positions, _, _ in found] == [
        ("review-2", [0, 1]),  # shorter than a window: one window over all of it
        ("standup-1", [0, 1, 2]),
        ("standup-1", [1, 2, 3]),
    ]
    assert all(members == [thread] for thread, _, _, members in found)
    assert report.windows_created == 3
    turns = [row[2] for row in thread_rows(db, "standup-1")]
    embedding = found[2][2]
    assert embedding is not None
    assert parse_vector(embedding) == pytest.approx(unit(*hash_vector("\n".join(turns[1:4]))))


def test_window_size_and_stride_are_configurable(db: psycopg.Connection, client: Client, tmp_path: Path) -> None:
    options = IngestOptions(lane="team", progress=False, conversation_windows=WindowShape(size=2, stride=2))
    ingest_conversations(client, [write_json(tmp_path / "c.json", CONVERSATIONS)], options)
    assert [(thread, positions) for thread, positions, _, _ in windows(db)] == [
        ("review-2", [0, 1]),
        ("standup-1", [0, 1]),
        ("standup-1", [2, 3]),
    ]


def test_window_runs_stop_at_gaps_and_end_at_the_last_record() -> None:
    assert WindowShape(3, 2).runs([0, 1, 2, 3, 4, 5]) == [[0, 1, 2], [2, 3, 4], [3, 4, 5]]
    assert WindowShape(3, 1).runs([0, 1, 3, 4, 5, 7]) == [[0, 1], [3, 4, 5]]
    with pytest.raises(ValueError, match="stride"):
        WindowShape(2, 3)


def test_html_text_drops_tags_scripts_and_navigation() -> None:
    document = read_document(
        "<html><head><title>20.6. Replication</title><style>p {color: red}</style></head><body>"
        '<div class="navheader"><a href="x">Prev</a> Up</div>'
        "<h2>Sending Servers</h2><p>Set <code>max_wal_senders</code> &amp; restart.<br/>Then check.</p>"
        "<script>alert('no')</script><ul><li>one</li><li>two</li></ul><footer>Submit correction</footer>"
        "</body></html>",
        ".html",
    )
    assert document.title == "20.6. Replication"
    assert [block.text for block in document.blocks] == [
        "Sending Servers",
        "Set max_wal_senders & restart. Then check.",
        "one",
        "two",
    ]


def test_chunks_keep_headings_with_the_paragraph_they_introduce() -> None:
    text = "\n\n".join(
        [
            "Sending Servers",
            "These parameters can be set on any server that is to send replication data.",
            "max_wal_senders (integer)",
            "Specifies the maximum number of concurrent connections from standby servers. " * 3,
        ]
    )
    chunks = chunk_text(text, 200)
    assert chunks[0] == (
        "Sending Servers\n\nThese parameters can be set on any server that is to send replication data."
    )
    assert chunks[1].startswith("max_wal_senders (integer)\n\nSpecifies the maximum")
    assert all(len(chunk) <= 200 for chunk in chunks)
    assert " ".join(" ".join(chunks).split()) == " ".join(text.split())


def test_files_are_chunked_into_file_records_with_windows(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text("# Guide\n\n" + "\n\n".join(f"Paragraph {n} about WAL." * 4 for n in range(6)))
    (folder / "page.html").write_text("<title>Page</title><p>Only <b>one</b> chunk here.</p>")
    (folder / "image.png").write_bytes(b"\x89PNG")  # not a text suffix: left out of a folder
    (folder / ".hidden.md").write_text("hidden")
    options = IngestOptions(lane="docs", tags=("handbook",), chunk_chars=120, progress=False)
    report = ingest_files(client, [folder], options)
    guide = str((folder / "guide.md").resolve())
    rows = thread_rows(db, guide)
    assert len(rows) == report.records_created - 1 > 2
    assert [row[1] for row in rows] == list(range(len(rows)))
    assert {row[0] for row in rows} == {"file"}
    assert all(len(row[2]) <= 120 for row in rows)
    assert [row[2] for row in thread_rows(db, str((folder / "page.html").resolve()))] == ["Only one chunk here."]
    metadata = scalar(db, "select metadata from emem.records where thread_id like '%%page.html'")
    assert metadata == {"path": str((folder / "page.html").resolve()), "title": "Page"}
    assert [positions for thread, positions, _, _ in windows(db)] == [
        [n, n + 1] for n in range(len(rows) - 1)
    ]  # the one-chunk page has no window
    assert len(client.records_with_all_tags(["handbook"])) == report.records_created
    assert report.problems == []


def test_bad_items_are_reported_and_skipped(db: psycopg.Connection, client: Client, tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("[{not json")
    conversations = write_json(
        tmp_path / "c.json",
        [
            {
                "id": "gap",
                "turns": ["first turn", "  ", "third turn", "fourth turn", {"content": "x", "occurred_at": "soon"}],
            },
            {"id": "empty", "turns": []},
            "not a conversation",
        ],
    )
    report = ingest_conversations(client, [broken, conversations, tmp_path / "missing.json"], QUIET)
    reasons = {problem.source: problem.reason for problem in report.problems}
    assert reasons[str(broken)].startswith("invalid JSON")
    assert reasons[f"{conversations}[0] turn 1"] == "content must be a non-empty text"
    assert "is not an ISO 8601" in reasons[f"{conversations}[0] turn 4"]
    assert reasons[f"{conversations}[2]"] == "a conversation must be an object with a list of turns"
    assert reasons[str(tmp_path / "missing.json")].startswith("cannot read it")
    assert reasons[f"{conversations}[1]"] == "the conversation has no turns"
    assert len(report.problems) == 6
    assert [row[1] for row in thread_rows(db, "gap")] == [0, 2, 3]
    assert [positions for _, positions, _, _ in windows(db)] == [[2, 3]]  # no window across the skipped turn


def test_bad_files_are_reported_and_the_rest_written(db: psycopg.Connection, client: Client, tmp_path: Path) -> None:
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "blank.md").write_text("   \n\n  ")
    (tmp_path / "good.txt").write_text("A good file.")
    report = ingest_files(
        client, [tmp_path / "binary.txt", tmp_path / "blank.md", tmp_path / "nowhere", tmp_path / "good.txt"], QUIET
    )
    assert sorted((Path(p.source).name, p.reason) for p in report.problems) == [
        ("binary.txt", "not UTF-8 text"),
        ("blank.md", "holds no text"),
        ("nowhere", "no such file or folder"),
    ]
    assert report.records_created == 1


def test_a_unit_the_database_refuses_costs_only_itself(db: psycopg.Connection, client: Client, tmp_path: Path) -> None:
    notes = tmp_path / "notes.jsonl"
    notes.write_text(
        "\n".join(
            json.dumps(note)
            for note in [
                {"content": "Kept before"},
                {"content": "In a lane that does not exist", "lane": "nowhere"},
                {"content": "Too much authority", "authority": 7},
                {"content": "Kept after"},
            ]
        )
        + "\n{broken\n"
    )
    report = ingest_notes(client, [notes], QUIET)
    reasons = [(problem.source, problem.reason) for problem in report.problems]
    assert reasons[0][0] == f"{notes}:5" and reasons[0][1].startswith("invalid JSON")
    assert reasons[1][0] == f"{notes}:2" and "lane 'nowhere' is not a lane this role may write" in reasons[1][1]
    assert reasons[2][0] == f"{notes}:3" and "authority must be a number from 0 to 1" in reasons[2][1]
    assert [row[0] for row in db.execute("select content from emem.records order by record_id")] == [
        "Kept before",
        "Kept after",
    ]


def test_notes_links_become_edges_once(db: psycopg.Connection, client: Client, tmp_path: Path) -> None:
    notes = write_json(
        tmp_path / "notes.json",
        [
            {"id": "kowalski", "kind": "entity", "content": "Jan Kowalski, contractor", "tags": ["person"]},
            {
                "id": "apollo",
                "content": "Apollo migration",
                "occurred_at": "2024-03-01",
                "links": [{"to": "kowalski", "relation": "billed_by", "properties": {"invoice": "INV-2031"}}],
            },
            {"id": "orphan", "content": "Links nowhere", "links": [{"to": "ghost", "relation": "knows"}]},
        ],
    )
    first = ingest_notes(client, [notes], QUIET)
    assert (first.records_created, first.edges_created) == (3, 1)
    assert [p.reason for p in first.problems] == [
        "link to note 'ghost', which is not among the notes written from this input"
    ]
    assert db.execute(
        "select e.relation, e.properties, f.content, t.kind from emem.edges as e"
        " join emem.records as f on f.record_id = e.from_record_id"
        " join emem.records as t on t.record_id = e.to_record_id"
    ).fetchall() == [("billed_by", {"invoice": "INV-2031"}, "Apollo migration", "entity")]
    again = ingest_notes(client, [notes], QUIET)
    assert (again.records_created, again.records_existing, again.edges_created, again.edges_existing) == (0, 3, 0, 1)


def test_reingesting_the_same_input_writes_nothing_new_and_loses_nothing(
    db: psycopg.Connection, client: Client, gateway: HashGateway, tmp_path: Path
) -> None:
    conversations = write_json(tmp_path / "c.json", CONVERSATIONS)
    (tmp_path / "doc.md").write_text("\n\n".join(f"Section {n}. " + "Words about vacuum. " * 8 for n in range(5)))
    options = IngestOptions(lane="team", chunk_chars=200, progress=False, batch_size=3)
    ingest_conversations(client, [conversations], options)
    ingest_files(client, [tmp_path / "doc.md"], options)
    before, embedded = counts(db), len(gateway.embedded)
    conversation_report = ingest_conversations(client, [conversations], options)
    file_report = ingest_files(client, [tmp_path / "doc.md"], options)
    assert counts(db) == before
    assert len(gateway.embedded) == embedded  # nothing embedded again
    assert (conversation_report.records_created, conversation_report.records_existing) == (0, 6)
    assert (conversation_report.windows_created, conversation_report.windows_existing) == (0, 3)
    assert file_report.records_created == file_report.windows_created == 0
    assert file_report.new_versions == conversation_report.new_versions == []


def test_a_conversation_grown_by_new_turns_keeps_its_thread(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    ingest_conversations(client, [write_json(tmp_path / "c.json", CONVERSATIONS)], QUIET)
    grown = [{**CONVERSATIONS[1], "turns": [*CONVERSATIONS[1]["turns"], "Priya: Then vacuum more often."]}]
    report = ingest_conversations(client, [write_json(tmp_path / "grown.json", grown)], QUIET)
    assert (report.records_created, report.records_existing, report.new_versions) == (1, 2, [])
    assert [row[1] for row in thread_rows(db, "review-2")] == [0, 1, 2]


def test_a_changed_file_keeps_its_stored_records_and_becomes_a_new_version(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    path = tmp_path / "doc.txt"
    path.write_text("First version.")
    ingest_files(client, [path], QUIET)
    path.write_text("Second version.")
    report = ingest_files(client, [path], QUIET)
    key = str(path.resolve())
    [version] = report.new_versions
    new_thread = version.rsplit(" ", 1)[1]
    assert new_thread.startswith(f"{key}@")
    assert [row[2] for row in thread_rows(db, key)] == ["First version."]
    assert [row[2] for row in thread_rows(db, new_thread)] == ["Second version."]
    assert ingest_files(client, [path], QUIET).records_created == 0  # the new version, again: nothing new


def test_ingest_refuses_a_gateway_whose_model_is_not_the_active_space(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    other = Client(db, HashGateway(model_name="another-model"))
    with pytest.raises(IngestError, match="model_mismatch"):
        ingest_conversations(other, [write_json(tmp_path / "c.json", CONVERSATIONS)], QUIET)
    assert counts(db)[0] == 0


# ---- lanes, concurrency, hostile input --------------------------------------------------------

NOTES = [
    {"id": f"n{i}", "content": f"Note {i} about invoice INV-{2030 + i}.", "tags": ["shared", f"t{i % 3}"]}
    | ({"links": [{"to": f"n{i + 1}", "relation": "follows", "properties": {"step": i}}]} if i < 7 else {})
    for i in range(8)
]
CHATS = [
    {"id": f"c{i}", "tags": ["chat"], "turns": [f"Chat {i}, turn {turn}: the replica lags." for turn in range(4)]}
    for i in range(4)
]
# What NOTES and CHATS become in one lane (windows of 3 turns, stride 1: 2 per chat).
EXPECTED = {"records": 24, "vectors": 24, "windows": 8, "members": 24, "edges": 7, "tags": 32}


def lane_counts(db: psycopg.Connection, lane: str) -> dict[str, int]:
    counted = row(
        db,
        "select (select count(*) from emem.records where lane_name = %(lane)s),"
        " (select count(*) from emem.record_vectors as v join emem.records as r using (record_id)"
        "  where r.lane_name = %(lane)s),"
        " (select count(*) from emem.windows where lane_name = %(lane)s),"
        " (select count(*) from emem.window_members as m join emem.windows as w using (window_id)"
        "  where w.lane_name = %(lane)s),"
        " (select count(*) from emem.edges as e join emem.records as r on r.record_id = e.from_record_id"
        "  where r.lane_name = %(lane)s),"
        " (select count(*) from emem.record_tags where lane_name = %(lane)s)",
        {"lane": lane},
    )
    return dict(zip(EXPECTED, counted, strict=True))


def test_the_same_input_into_a_second_lane_is_written_whole_with_vectors_and_windows(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    notes, chats = write_json(tmp_path / "notes.json", NOTES), write_json(tmp_path / "chats.json", CHATS)
    (tmp_path / "doc.md").write_text("\n\n".join(f"Section {n}. " + "Words about vacuum. " * 8 for n in range(4)))
    reports = {}
    for lane in ("team", "docs"):
        options = IngestOptions(lane=lane, progress=False, chunk_chars=200)
        reports[lane] = [
            ingest_notes(client, [notes], options),
            ingest_conversations(client, [chats], options),
            ingest_files(client, [tmp_path / "doc.md"], options),
        ]
    team, docs = lane_counts(db, "team"), lane_counts(db, "docs")
    assert docs == team
    assert team["vectors"] == team["records"] > EXPECTED["records"] and team["windows"] > EXPECTED["windows"]
    assert team["edges"] == EXPECTED["edges"]
    for first, second in zip(reports["team"], reports["docs"], strict=True):
        assert (second.records_created, second.windows_created, second.edges_created) == (
            first.records_created,
            first.windows_created,
            first.edges_created,
        )
        assert second.records_existing == second.windows_existing == second.edges_existing == 0
        assert second.problems == [] and second.new_versions == []


def test_concurrent_reingests_of_shuffled_batches_neither_deadlock_nor_duplicate(
    db: psycopg.Connection, client: Client, dsn: Callable[..., str], tmp_path: Path
) -> None:
    writers, tries = 3, 30
    for attempt in range(tries):
        lane = f"round_{attempt}"
        db.execute("select emem.create_lane(%s)", (lane,))
        shuffled = random.Random(attempt)
        inputs = [
            (
                write_json(tmp_path / f"notes-{attempt}-{w}.json", shuffled.sample(NOTES, len(NOTES))),
                write_json(tmp_path / f"chats-{attempt}-{w}.json", shuffled.sample(CHATS, len(CHATS))),
            )
            for w in range(writers)
        ]
        options = IngestOptions(lane=lane, progress=False, batch_size=3)
        start = threading.Barrier(writers)
        running = [
            ingest_in_thread(
                dsn(),
                notes_and_chats(notes, chats, options),
                start,
            )
            for notes, chats in inputs
        ]
        outcomes = [finished(*ingest) for ingest in running]
        errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        assert errors == [], f"try {attempt}"
        assert lane_counts(db, lane) == EXPECTED, f"try {attempt}"
        runs = [report for pair in outcomes for report in pair]
        assert sum(report.records_created for report in runs) == EXPECTED["records"], f"try {attempt}"
        assert sum(report.records_existing for report in runs) == (writers - 1) * EXPECTED["records"]
        assert all(report.problems == [] for report in runs)


def ingest_in_thread(
    conninfo: str, work: Callable[[Client], Any], start: threading.Barrier | None = None
) -> tuple[threading.Thread, list[Any]]:
    """Runs work(client) in a thread, on a connection of its own; its result or error lands in the list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            with psycopg.connect(conninfo, autocommit=True) as connection:
                client = Client(connection, HashGateway())
                if start is not None:
                    start.wait()
                outcome.append(work(client))
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def notes_and_chats(notes: Path, chats: Path, options: IngestOptions) -> Callable[[Client], list[IngestReport]]:
    return lambda writer: [ingest_notes(writer, [notes], options), ingest_conversations(writer, [chats], options)]


def finished(thread: threading.Thread, outcome: list[Any]) -> Any:
    """What a thread of ingest_in_thread came to."""
    thread.join(120)
    assert not thread.is_alive(), "the ingest did not finish"
    return outcome[0]


def note_items(tmp_path: Path, notes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The put_records items an ingest of these notes into lane team sends (without vectors)."""
    parsed = read_notes([write_json(tmp_path / "items.json", notes)], QUIET)
    return [item for unit in parsed.units for item in unit.items()]


def wait_for_a_lock(db: psycopg.Connection, query_part: str) -> None:
    """Until a session other than db's waits on a lock in a statement holding query_part."""
    deadline = time.monotonic() + 20
    while not scalar(
        db,
        "select exists (select from pg_stat_activity where wait_event_type = 'Lock' and query like %s)",
        (f"%{query_part}%",),
    ):
        assert time.monotonic() < deadline, "the ingest never waited on the other writer"
        time.sleep(0.05)


def test_a_deadlock_with_another_writer_is_retried(
    db: psycopg.Connection, client: Client, dsn: Callable[..., str], tmp_path: Path
) -> None:
    notes = [{"id": "a", "content": "Alpha"}, {"id": "b", "content": "Beta"}]
    first, second = note_items(tmp_path, notes)  # the ingest writes them in this order (of their keys)
    write_json(tmp_path / "notes.json", notes)
    with psycopg.connect(dsn()) as other:
        other.execute("set deadlock_timeout = '60s'")  # so that the ingest is the one the server stops
        other.execute("select count(*) from emem.put_records(%s)", (json.dumps([second]),))
        ingest = ingest_in_thread(dsn(), lambda writer: ingest_notes(writer, [tmp_path / "notes.json"], QUIET))
        wait_for_a_lock(db, "put_records")
        other.execute("select count(*) from emem.put_records(%s)", (json.dumps([first]),))  # the cycle
        other.commit()
    report = finished(*ingest)
    assert isinstance(report, IngestReport), report
    assert (report.records_created, report.records_existing, report.problems) == (0, 2, [])
    assert counts(db)[0] == 2


def test_a_serialization_failure_is_retried(
    db: psycopg.Connection, client: Client, dsn: Callable[..., str], tmp_path: Path
) -> None:
    notes = [{"id": "a", "content": "Alpha"}, {"id": "b", "content": "Beta"}]
    [first, _] = note_items(tmp_path, notes)
    write_json(tmp_path / "notes.json", notes)
    serializable = f"{dsn()} options='-c default_transaction_isolation=serializable'"
    with psycopg.connect(dsn()) as other:
        other.execute("select count(*) from emem.put_records(%s)", (json.dumps([first]),))
        ingest = ingest_in_thread(serializable, lambda writer: ingest_notes(writer, [tmp_path / "notes.json"], QUIET))
        wait_for_a_lock(db, "put_records")
        other.commit()  # the ingest's snapshot does not hold this record: 40001
    report = finished(*ingest)
    assert isinstance(report, IngestReport), report
    assert (report.records_created, report.records_existing, report.problems) == (1, 1, [])
    assert counts(db)[0] == 2


DEEP = "[" * 200_000 + "]" * 200_000
CJK_VALUE = "".join(chr(0x4E00 + n) for n in range(1000))  # 1000 characters, 3000 bytes
# Each malformed note (a JSON Lines text) and the start of what the report says about it.
MALFORMED_NOTES = [
    ('{"id": "links5", "content": "x", "links": 5}', "links must be a list of objects"),
    ('{"content": "x", "links": [5]}', "a note with links needs an id"),
    ('{"id": "linkto5", "content": "x", "links": [5]}', "each link must be an object"),
    ('{"content": "x", "authority": NaN}', "the note holds NaN, which is not a JSON number"),
    ('{"content": "x", "metadata": {"v": [Infinity]}}', "the note holds Infinity, which is not a JSON number"),
    ('{"content": "x", "metadata": {"v": -1e999}}', "the note holds -1e999, which is not a JSON number"),
    (DEEP, "invalid JSON: nested too deeply"),
    ('{"content": "x", "metadata": ' + "[" * 70 + "]" * 70 + "}", "the note is nested more than 64 levels deep"),
    ('{"content": "x", "authority": ' + "9" * 5000 + "}", "invalid JSON: Exceeds the limit"),
    (json.dumps({"id": "i" * 3000, "content": "x"}), "id has 3000 characters: at most 400"),
    ('{"id": true, "content": "x"}', "id must be a non-empty text or an integer"),
    ('{"kind": ["note"], "content": "x"}', 'kind must be note or entity, got ["note"]'),
    ('{"content": "x", "lane": 5}', "lane must be the name of a lane, got 5"),
    (json.dumps({"content": "\u3000\u2003\u00a0"}), "content must be a non-empty text"),
    (json.dumps({"content": "\u200b\ufeff"}), "content must be a non-empty text of at most 200000 characters"),
    (json.dumps({"content": "y" * 200_001}), "content must be a non-empty text of at most 200000 characters"),
    (json.dumps({"content": "x", "tags": ["\u2003"]}), "tags must be an array of at most 1000 texts"),
    (json.dumps({"content": "x", "tags": ["t" * 201]}), "tags must be an array of at most 1000 texts"),
    (json.dumps({"content": "x", "tags": [f"t{n}" for n in range(1001)]}), "tags must be an array of at most 1000"),
    (json.dumps({"content": "x", "tags": "apollo"}), "tags must be a list of texts"),
    (json.dumps({"content": "x", "metadata": {"blob": "m" * 70_000}}), "metadata must be at most 64 kB"),
    (json.dumps({"content": "x", "metadata": [1]}), "metadata must be a JSON object"),
    ('{"content": "x", "occurred_at": "soon"}', 'occurred_at "soon" is not an ISO 8601 date or time'),
    ('{"content": "x", "occurred_at": 1709280000}', "occurred_at must be an ISO 8601 text, got 1709280000"),
    ('{"content": "x", "authority": 7}', "authority must be a number from 0 to 1"),
    ('{"content": "x", "authority": 1e-50}', "authority must be a number from 0 to 1"),
    ('{"content": "x", "authority": "high"}', "authority must be a number from 0 to 1"),
    ('{"id": "tab", "content": "x", "links": [{"to": "good1", "relation": "\\t"}]}', "a link's relation must be"),
    ('{"id": "bell", "content": "x", "links": [{"to": "good1", "relation": "a\\u0007b"}]}', "a link's relation must"),
    (
        json.dumps(
            {"id": "wide", "content": "x", "links": [{"to": "good1", "relation": "r", "properties": CJK_VALUE}]}
        ),
        "a link's properties must be a JSON object",
    ),
    (
        json.dumps(
            {"id": "cjk", "content": "x", "links": [{"to": "good1", "relation": "r", "properties": {"v": CJK_VALUE}}]}
        ),
        "a link's property value is longer than 1000 characters or 2000 bytes",
    ),
    ('{"id": "far", "content": "x", "links": [{"to": {"id": 1}, "relation": "r"}]}', "a link's to must be"),
    ('{"id": "bad\\u0000id", "content": "x"}', "the note holds a NUL character"),
    ('{"content": "x", "tags": ["a\\u0000b"]}', "the note holds a NUL character"),
    ('{"content": "x", "metadata": {"k\\u0000": 1}}', "the note holds a NUL character"),
    ("[1, 2]", "a note must be a JSON object"),
    ("{not json", "invalid JSON"),
]
GOOD_NOTES: list[dict[str, Any]] = [
    {"id": "good1", "content": "Kept: the first good note", "tags": ["kept"]},
    {"id": "good2", "content": "Kept: the second good note", "links": [{"to": "good1", "relation": "follows"}]},
    {"content": "Kept: a note without an id", "metadata": {"depth": [[["fine"]]]}, "authority": 1e-30},
]


def test_every_malformed_note_is_reported_with_its_line_and_the_others_are_written(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    lines = (
        [json.dumps(GOOD_NOTES[0])] + [line for line, _ in MALFORMED_NOTES] + [json.dumps(n) for n in GOOD_NOTES[1:]]
    )
    notes = tmp_path / "notes.jsonl"
    notes.write_text("\n".join(lines))
    report = ingest_notes(client, [notes], QUIET)
    reasons = {problem.source: problem.reason for problem in report.problems}
    for number, (_, expected) in enumerate(MALFORMED_NOTES, start=2):
        assert reasons.get(f"{notes}:{number}", "").startswith(expected), (number, reasons.get(f"{notes}:{number}"))
    assert len(report.problems) == len(MALFORMED_NOTES)
    stored = db.execute("select content from emem.records order by record_id").fetchall()
    assert [row[0] for row in stored] == [note["content"] for note in GOOD_NOTES]
    assert counts(db)[:2] == (3, 3)  # every written note has its vector
    assert report.edges_created == 1 and report.records_created == 3


def test_a_bad_note_in_a_json_array_costs_only_itself(db: psycopg.Connection, client: Client, tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text('[{"content": "before"}, {"content": "bad", "authority": NaN}, {"content": "after"}]')
    report = ingest_notes(client, [notes], QUIET)
    assert [(p.source, p.reason) for p in report.problems] == [
        (f"{notes}[1]", "the note holds NaN, which is not a JSON number")
    ]
    assert [row[0] for row in db.execute("select content from emem.records order by record_id")] == ["before", "after"]


def test_a_conversation_is_written_whole_or_not_at_all_and_deep_json_is_reported(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    chats = tmp_path / "chats.json"
    chats.write_text(
        json.dumps(
            [
                {"id": "kept", "turns": ["one", "two", "three"]},
                {"id": "refused", "turns": ["one", "\u200b", "three"]},  # white space the database knows of
                {"id": "x" * 3000, "turns": ["one", "two"]},
                {"id": "nan-turn", "turns": ["one", {"content": "two", "metadata": {"v": "NAN"}}, "three"]},
                {"id": "kept", "turns": ["again"]},
                {"id": "deep", "turns": [{"content": "deep", "metadata": {"v": json.loads("[" * 100 + "]" * 100)}}]},
                {"id": "kept too", "turns": ["four", "five"]},
            ]
        ).replace('"NAN"', "NaN")
    )
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    report = ingest_conversations(client, [deep, chats], QUIET)
    reasons = [(problem.source, problem.reason) for problem in report.problems]
    assert reasons.pop(0) == (str(deep), "invalid JSON: nested too deeply")
    assert reasons[0] == (f"{chats}[2]", "id has 3000 characters: at most 400")
    assert reasons[1] == (f"{chats}[3] turn 1", "the turn holds NaN, which is not a JSON number")
    assert reasons[2] == (f"{chats}[4]", 'conversation id "kept" is used twice in this input (lane team)')
    assert reasons[3] == (f"{chats}[5] turn 0", "the turn is nested more than 64 levels deep")
    assert reasons[4][0] == f"{chats}[1]" and reasons[4][1].startswith("turn 1: content must be a non-empty text")
    assert len(reasons) == 5
    threads = db.execute("select thread_id, count(*) from emem.records group by 1 order by 1").fetchall()
    assert threads == [("kept", 3), ("kept too", 2), ("nan-turn", 2)]
    assert scalar(db, "select count(*) from emem.windows where thread_id = 'refused'") == 0


def test_folders_are_walked_without_leaving_them_and_special_files_are_reported(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("A secret outside the folder.")
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "guide.md").write_text("The guide inside the folder.")
    (folder / "sub" / "inner.txt").write_text("An inner page.")
    (folder / "link-out.md").symlink_to(outside / "secret.md")
    (folder / "link-system.txt").symlink_to("/etc/hostname")
    (folder / "relative-out.md").symlink_to("../outside/secret.md")
    (folder / "folder-out").symlink_to(outside, target_is_directory=True)
    (folder / "link-in.md").symlink_to(folder / "sub" / "inner.txt")  # read as inner.txt, once
    (folder / "folder-in").symlink_to(folder / "sub", target_is_directory=True)  # not walked twice
    (folder / "broken.md").symlink_to(folder / "nowhere.md")
    (folder / "loop.md").symlink_to(folder / "loop.md")
    os.mkfifo(folder / "pipe.md")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(folder / "socket.txt"))
    try:
        report = ingest_files(client, [folder], QUIET)
    finally:
        listener.close()
    reasons = sorted((Path(p.source).name, p.reason) for p in report.problems)
    assert reasons == [
        ("broken.md", "cannot read it: a symbolic link to nothing, or gone"),
        ("folder-out", "a symbolic link out of the folder: not followed"),
        ("link-out.md", "a symbolic link out of the folder: not followed"),
        ("link-system.txt", "a symbolic link out of the folder: not followed"),
        ("loop.md", "cannot read it: a symbolic link to nothing, or gone"),
        ("pipe.md", "not a regular file but a FIFO: skipped"),
        ("relative-out.md", "a symbolic link out of the folder: not followed"),
        ("socket.txt", "not a regular file but a socket: skipped"),
    ]
    contents = [row[0] for row in db.execute("select content from emem.records order by content")]
    assert contents == ["An inner page.", "The guide inside the folder."]


def test_special_files_given_by_name_are_reported_not_read(client: Client, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.jsonl")
    outcome: list[IngestReport] = []
    reader = threading.Thread(
        target=lambda: outcome.append(ingest_notes(client, [tmp_path / "pipe.jsonl", Path("/dev/null")], QUIET)),
        daemon=True,  # the code before this change blocked on the FIFO forever
    )
    reader.start()
    reader.join(30)
    assert not reader.is_alive(), "reading a FIFO blocked"
    [report] = outcome
    assert [(p.source, p.reason) for p in report.problems] == [
        (str(tmp_path / "pipe.jsonl"), "not a regular file but a FIFO: skipped"),
        ("/dev/null", "not a regular file but a device: skipped"),
    ]
    files = ingest_files(client, [tmp_path / "pipe.jsonl", tmp_path], QUIET)
    assert [(Path(p.source).name, p.reason) for p in files.problems] == [
        ("pipe.jsonl", "not a regular file but a FIFO: skipped")
    ]


class WindowlessGateway(HashGateway):
    """Embeds single turns, and fails on the joined texts of windows (as a gateway going down midway)."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        if any("\n" in text for text in texts):
            raise GatewayError(GATEWAY_DOWN, "the embeddings service went down")
        return super().embed(texts)


def test_a_gateway_failing_midway_leaves_no_records_without_their_windows(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    """The turns are embedded, then the gateway goes down: every record and every window is still
    written, the windows without a vector and queued for `emem embed`, and the run says so."""
    failing = Client(db, WindowlessGateway())
    report = ingest_conversations(failing, [write_json(tmp_path / "c.json", CONVERSATIONS)], QUIET)
    assert report.gateway_problem == "the embeddings service went down" and report.queued_for_embedding > 0
    records, vectors, windows, *_ = counts(db)
    assert records > 0 and vectors == records and windows > 0
    without_vector = scalar(db, "select count(*) from emem.windows where embedding is null")
    queued = scalar(db, "select count(*) from emem.embedding_queue where record_id is null")
    assert without_vector == queued == windows


# ---- documents read by real parsers -------------------------------------------------------------------

GUIDE_MDX = """import { Tabs } from '@site/components'
export const meta = { title: 'Replication' }

# Replication

Set `max_wal_senders` on the primary.

<Tabs defaultValue="conf">

```ini
# postgresql.conf
max_wal_senders = 10
wal_level = replica
```

</Tabs>

Then restart the server.
"""


def test_mdx_is_read_without_its_module_lines_and_jsx_and_code_blocks_stay_whole(
    db: psycopg.Connection, client: Client, tmp_path: Path
) -> None:
    (tmp_path / "guide.mdx").write_text(GUIDE_MDX)
    report = ingest_files(client, [tmp_path], IngestOptions(lane="docs", chunk_chars=80, progress=False))
    assert report.problems == [] and report.skipped_files == []
    chunks = [row[2] for row in thread_rows(db, str((tmp_path / "guide.mdx").resolve()))]
    assert chunks == [
        "Replication\n\nSet max_wal_senders on the primary.",
        "# postgresql.conf\nmax_wal_senders = 10\nwal_level = replica",
        "Then restart the server.",
    ]


def test_html_pre_and_markdown_fences_keep_their_line_breaks_even_past_the_chunk_size() -> None:
    code = "\n".join(f"SELECT {n} AS column_{n};" for n in range(8))
    markdown = read_document(f"## Queries\n\n~~~sql\n{code}\n~~~\n\nDone.", ".md")
    html = read_document(f"<h2>Queries</h2><pre>{code}</pre><p>Done.</p>", ".html")
    for document in (markdown, html):
        assert document.blocks == [
            Block("Queries", BlockKind.HEADING),
            Block(code, BlockKind.CODE),
            Block("Done.", BlockKind.TEXT),
        ]
        assert chunks_of(document.blocks, 60) == [f"Queries\n\n{code}", "Done."]  # whole, though over 60


def test_every_file_of_a_folder_that_is_not_read_is_in_the_report(client: Client, tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text("# Guide\n\nRead me.")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG")
    (tmp_path / "sidebar.json").write_text("{}")
    (tmp_path / ".hidden.md").write_text("left out on purpose")
    report = ingest_files(client, [tmp_path], QUIET)
    assert sorted(Path(skipped.source).name for skipped in report.skipped_files) == ["logo.png", "sidebar.json"]
    assert report.problems == [] and report.records_created == 1
