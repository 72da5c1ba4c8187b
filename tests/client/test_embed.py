"""Embeddings that stay true: the embedding queue the triggers keep, coverage in health
and in find, stale vectors on edits, `emem embed` (several workers at once, killed and started
again), and a model switch without a blind spot.

The workers embed through a real OpenAI-compatible service on 127.0.0.1 (tests/client/embeddings_service.py),
in `emem embed` processes where a process is the point; the switch runs end to end with the
embedded model (all-MiniLM-L6-v2) and that service serving another model: MiniLM's vectors
projected to 256 dimensions by a fixed random matrix, so that finds by meaning work after the
switch too.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import numpy
import psycopg
import pytest
from embeddings_service import FakeService, vector_for
from psycopg import errors
from queries import row, scalar
from releases import emulate_modules_of, require_legacy_modules, scratch_database
from vectors import unit

from emem_client import Client, EmbeddedGateway, OpenAIGateway, cli
from emem_client.calls import window_text
from emem_client.embed import EmbedError, EmbedOptions, embed_queue
from emem_client.gateways import FINGERPRINT_PROBE
from emem_client.ingest import ingest_conversations, ingest_notes
from emem_client.units import IngestOptions

MODEL = "fake-embed-8"
PROJECTED_MODEL = "minilm-projected-256"
QUIET = EmbedOptions(progress=False, backoff=0.05, max_backoff=0.2)
DOWN_URL = "http://127.0.0.1:9/v1"  # nothing listens on port 9


# ---- helpers ---------------------------------------------------------------------------------------


def wait_until(condition: Callable[[], Any], seconds: float = 60, what: str = "the condition") -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if answer := condition():
            return answer
        time.sleep(0.02)
    raise AssertionError(f"{what} did not come within {seconds} s")


def queued(db: psycopg.Connection) -> set[tuple[int, str]]:
    """(space, record id or thread and positions) of every queue entry."""
    return set(
        db.execute(
            "select space_id, coalesce(record_id::text, thread_id || ':' || first_position || '-' || last_position)"
            " from emem.embedding_queue"
        ).fetchall()
    )


def missing(db: psycopg.Connection) -> set[tuple[int, str]]:
    """What every space lacks, worked out from the tables themselves (the queue must say the same)."""
    return set(
        db.execute(
            """select s.space_id, r.record_id::text from emem.embedding_spaces s cross join emem.records r
               where not exists (select from emem.record_vectors v where v.space_id = s.space_id
                                 and v.record_id = r.record_id)
               union
               select s.space_id, w.thread_id || ':' || w.first_position || '-' || w.last_position
               from emem.embedding_spaces s cross join emem.windows w
               where not exists (select from emem.windows f where f.space_id = s.space_id and f.embedding is not null
                                 and (f.lane_name, f.thread_kind, f.thread_id, f.first_position, f.last_position)
                                   = (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position))"""
        ).fetchall()
    )


def coverage(conn: psycopg.Connection, space_id: int | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = scalar(conn, "select emem.embedding_coverage(%s)", (space_id,))
    return answer


def figures_of(answer: dict[str, Any]) -> tuple[int, int, int, int]:
    return (answer["records_with_vector"], answer["records"], answer["windows_with_vector"], answer["windows"])


def health(conn: psycopg.Connection, model: str, dimension: int, fingerprint: str | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = scalar(conn, "select emem.e_health(%s, %s, %s)", (model, dimension, fingerprint))
    return answer


def put(db: psycopg.Connection, items: list[dict[str, Any]]) -> list[int]:
    return [r[0] for r in db.execute("select record_id from emem.put_records(%s::jsonb)", (json.dumps(items),))]


def thread(lane: str, thread_id: str, contents: list[str]) -> list[dict[str, Any]]:
    return [
        {"kind": "conversation", "content": content, "lane": lane, "thread_id": thread_id, "thread_position": n}
        for n, content in enumerate(contents)
    ]


class Session(threading.Thread):
    """One statement in a session of its own, on a thread: for what must wait for another session."""

    def __init__(self, dsn: str, statement: str, params: tuple[Any, ...]) -> None:
        super().__init__(daemon=True)
        self.dsn, self.statement, self.params = dsn, statement, params
        self.rows: list[tuple[Any, ...]] = []

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cursor = conn.execute(self.statement, self.params)
            self.rows = cursor.fetchall() if cursor.description else []


def in_another_session(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> Session:
    session = Session(dsn, statement, params)
    session.start()
    return session


@pytest.fixture
def make_gateway() -> Iterator[Callable[..., OpenAIGateway]]:
    made: list[OpenAIGateway] = []

    def make(base_url: str, model: str = MODEL, **options: Any) -> OpenAIGateway:
        made.append(OpenAIGateway(base_url, model, **({"timeout": 5.0, "retries": 0} | options)))
        return made[-1]

    yield make
    for gateway in made:
        gateway.close()


NOTES = [f"note {n}: the {word} report" for n, word in enumerate(["red", "green", "blue", "amber", "violet", "teal"])]
TURNS = ["turn 0: hello", "turn 1: the export failed", "turn 2: on the replica", "turn 3: fixed"]


class Seeded(TypedDict):
    space: int
    notes: list[int]
    turns: list[int]


@pytest.fixture
def seeded(db: psycopg.Connection, service: FakeService, make_gateway: Callable[..., OpenAIGateway]) -> Seeded:
    """Space 1 of the service's model; notes and a conversation with windows of two turns, in two
    lanes, none with a vector yet: all queued."""
    db.execute("select emem.create_lane('team'), emem.create_lane('other')")
    space = Client(db, make_gateway(service.base_url)).ensure_space()
    notes = put(db, [{"kind": "note", "content": c, "lane": "team" if n % 2 else "other"} for n, c in enumerate(NOTES)])
    turns = put(db, thread("team", "standup", TURNS))
    for first in range(len(turns) - 1):
        db.execute("select emem.put_window(%s, null)", (turns[first : first + 2],))
    return {"space": space, "notes": notes, "turns": turns}


def every_text() -> set[str]:
    return set(NOTES) | set(TURNS) | {window_text(TURNS[n : n + 2]) for n in range(len(TURNS) - 1)}


# ---- the queue the triggers keep --------------------------------------------------------------------


def test_a_record_is_queued_until_its_vector_is_written(db: psycopg.Connection) -> None:
    db.execute("select emem.create_lane('team')")
    space = scalar(db, "select emem.create_embedding_space('m', 3, null, true)")
    [bare] = put(db, [{"kind": "note", "content": "no vector yet", "lane": "team"}])
    [with_vector] = put(db, [{"kind": "note", "content": "with one", "lane": "team", "vector": [1, 0, 0]}])
    assert queued(db) == {(space, str(bare))}  # the vector written with a record takes it off at once
    db.execute("select emem.put_record_vector(%s, '[0,1,0]')", (bare,))
    assert queued(db) == set()
    assert with_vector


def test_a_record_a_concurrent_writer_stored_first_leaves_no_vector_behind(
    db: psycopg.Connection, dsn: Callable[..., str]
) -> None:
    """put_records writes vectors before their records (so they are never queued): the vector of
    an item whose source key another writer stored meanwhile goes again."""
    db.execute("select emem.create_lane('team')")
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    item = [{"kind": "note", "content": "once", "lane": "team", "source_key": "k", "vector": [1, 0, 0]}]
    with psycopg.connect(dsn()) as first:
        first.execute("select emem.put_records(%s::jsonb)", (json.dumps(item),))
        second = in_another_session(dsn(), "select emem.put_records(%s::jsonb)", (json.dumps(item),))
        time.sleep(0.5)
        first.commit()
    second.join(30)
    assert db.execute(
        "select (select count(*) from emem.records), (select count(*) from emem.record_vectors)"
    ).fetchone() == (1, 1)
    assert queued(db) == set()


def test_a_new_space_queues_every_record_and_window_run(db: psycopg.Connection) -> None:
    db.execute("select emem.create_lane('team')")
    first = scalar(db, "select emem.create_embedding_space('m', 3, null, true)")
    turns = put(db, [{**item, "vector": [1, n, 0]} for n, item in enumerate(thread("team", "t", TURNS[:3]))])
    db.execute("select emem.put_window(%s, '[1,1,1]')", (turns[:2],))
    assert queued(db) == set()
    second = scalar(db, "select emem.create_embedding_space('m2', 2)")
    assert queued(db) == {(second, str(t)) for t in turns} | {(second, "t:0-1")} == missing(db)
    db.execute("select emem.put_window(%s, '[1,0]', %s)", (turns[:2], second))
    assert (second, "t:0-1") not in queued(db)
    db.execute("select emem.put_window(%s, '[1,0]', %s)", (turns[1:], second))  # a run new to both spaces
    assert (first, "t:1-2") in queued(db) and queued(db) == missing(db)
    assert first


def test_a_space_created_while_records_are_written_misses_none_of_them(
    db: psycopg.Connection, dsn: Callable[..., str]
) -> None:
    """The space's fill waits for writers under way, and writers wait for it: no record falls between."""
    db.execute("select emem.create_lane('team')")
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    with psycopg.connect(dsn()) as writer:
        [written] = [
            r[0]
            for r in writer.execute(
                'select record_id from emem.put_records(\'[{"kind": "note", "content": "in flight", "lane": "team"}]\')'
            )
        ]
        creator = in_another_session(dsn(), "select emem.create_embedding_space('m2', 2)")
        time.sleep(0.5)
        assert creator.is_alive()  # waiting for the writer
        writer.commit()
    creator.join(30)
    assert (creator.rows[0][0], str(written)) in queued(db)


def test_an_edit_removes_its_vectors_and_stales_the_windows_holding_it_in_every_space(
    db: psycopg.Connection,
) -> None:
    db.execute("select emem.create_lane('team')")
    first = scalar(db, "select emem.create_embedding_space('m', 3, null, true)")
    second = scalar(db, "select emem.create_embedding_space('m2', 2)")
    turns = put(db, [{**item, "vector": [1, n, 0]} for n, item in enumerate(thread("team", "t", TURNS))])
    for space, vector in ((first, "[1,1,1]"), (second, "[1,1]")):
        for turn in turns:
            db.execute("select emem.put_record_vector(%s, %s, %s)", (turn, vector, space))
        for start in range(3):
            db.execute("select emem.put_window(%s, %s, %s)", (turns[start : start + 2], vector, space))
    assert queued(db) == set()

    db.execute("select emem.update_record(%s, authority => 0.9)", (turns[1],))  # not the content
    assert queued(db) == set()
    db.execute("select emem.update_record(%s, content => 'turn 1: it works now')", (turns[1],))
    edited = {(space, entry) for space in (first, second) for entry in (str(turns[1]), "t:0-1", "t:1-2")}
    assert queued(db) == edited == missing(db)
    assert scalar(db, "select count(*) from emem.record_vectors where record_id = %s", (turns[1],)) == 0
    stale = db.execute(
        "select space_id, first_position from emem.windows where embedding is null order by 1, 2"
    ).fetchall()
    assert stale == [(first, 0), (first, 1), (second, 0), (second, 1)]  # the window over turns 2-3 keeps its own
    # A stale window answers nothing: the window lookup reaches only the window over turns 2 and 3.
    page = scalar(db, "select emem.e_gather_find_envelope('turn', '[1,1,1]')")
    assert {row["record_id"] for row in page["rows"] if "window_vectors" in row["found_by"]} == set(turns[2:])
    assert (page["degraded"], page["degraded_reason"]) == (True, "vectors_incomplete")


def test_deletes_and_moves_keep_the_queue_true(db: psycopg.Connection) -> None:
    db.execute("select emem.create_lane('team'), emem.create_lane('other')")
    space = scalar(db, "select emem.create_embedding_space('m', 3, null, true)")
    turns = put(db, [{**item, "vector": [1, n, 0]} for n, item in enumerate(thread("team", "t", TURNS))])
    for start in range(3):
        db.execute("select emem.put_window(%s, null)", (turns[start : start + 2],))
    notes = put(db, [{"kind": "note", "content": c, "lane": "team"} for c in NOTES[:3]])
    db.execute("delete from emem.record_vectors where record_id = %s", (turns[0],))  # by hand, around the API
    assert scalar(db, "select emem.rebuild_derived()") == 1  # found, and queued again
    assert queued(db) == missing(db)
    # A deleted turn takes the windows holding it (what is left is no run) and their queue entries.
    db.execute("select emem.delete_records(array[%s]::bigint[])", (turns[3],))
    assert scalar(db, "select count(*) from emem.windows") == 2
    assert (
        queued(db)
        == missing(db)
        == {(space, str(turns[0])), (space, "t:0-1"), (space, "t:1-2")} | {(space, str(n)) for n in notes}
    )
    # Queued work follows a record to another lane (an agent of that lane sees it as its own).
    db.execute("select emem.move_records(array[%s]::bigint[], 'other')", (notes[0],))
    assert db.execute("select lane_name from emem.embedding_queue where record_id = %s", (notes[0],)).fetchone() == (
        "other",
    )
    db.execute("select emem.drop_embedding_space(%s)", (space,))
    assert queued(db) == set()


# ---- activation: no blind spot ----------------------------------------------------------------------------


def test_activation_refuses_a_space_that_lacks_vectors_unless_forced(db: psycopg.Connection) -> None:
    db.execute("select emem.create_lane('team')")
    [record] = put(db, [{"kind": "note", "content": "written before any space", "lane": "team"}])
    first = scalar(db, "select emem.create_embedding_space('m', 3)")
    db.execute("select emem.activate_embedding_space(%s)", (first,))  # no other answers: nothing to keep
    second = scalar(db, "select emem.create_embedding_space('m2', 2)")
    with pytest.raises(errors.ObjectNotInPrerequisiteState) as refusal:
        db.execute("select emem.activate_embedding_space(%s)", (second,))
    diag = refusal.value.diag
    assert diag.message_primary is not None and diag.message_hint is not None
    assert "has vectors for 0 of 1 records and 0 of 0 windows" in diag.message_primary
    assert f"emem embed --space {second}" in diag.message_hint
    db.execute("select emem.put_record_vector(%s, '[1,0]', %s)", (record, second))
    db.execute("select emem.activate_embedding_space(%s)", (second,))
    third = scalar(db, "select emem.create_embedding_space('m3', 4)")
    db.execute("select emem.activate_embedding_space(%s, force => true)", (third,))
    assert db.execute("select space_id from emem.embedding_spaces where is_active").fetchone() == (third,)
    assert scalar(
        db, "select array_agg(oid::regprocedure::text) from pg_proc where proname = 'activate_embedding_space'"
    ) == ["emem.activate_embedding_space(integer,boolean)"]
    with pytest.raises(errors.InvalidParameterValue):
        db.execute("select emem.activate_embedding_space(%s, null)", (second,))


def test_activation_finds_what_the_queue_missed(db: psycopg.Connection) -> None:
    """Records loaded around the API (as a COPY does) are not queued; activation counts them all
    the same, and emem embed queues them when it starts."""
    db.execute("select emem.create_lane('team')")
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    second = scalar(db, "select emem.create_embedding_space('m2', 2)")
    db.execute("insert into emem.records (kind, content, lane_name) values ('note', 'loaded', 'team')")
    assert queued(db) == set()
    with pytest.raises(errors.ObjectNotInPrerequisiteState, match="0 of 1 records"):
        db.execute("select emem.activate_embedding_space(%s)", (second,))
    assert scalar(db, "select emem.queue_missing_embeddings(%s)", (second,)) == 1
    [(record,)] = db.execute("select record_id from emem.records").fetchall()
    assert queued(db) == {(second, str(record))}


# ---- health and find ------------------------------------------------------------------------------------


def test_health_reports_coverage_and_is_degraded_below_the_threshold(
    db: psycopg.Connection, dsn: Callable[..., str], make_role: Callable[..., str]
) -> None:
    db.execute("select emem.create_lane('team'), emem.create_lane('other')")
    db.execute("select emem.create_agent_profile('teamwork', array['team'])")
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    put(db, [{"kind": "note", "content": f"team {n}", "lane": "team", "vector": [1, n, 0]} for n in range(3)])
    put(db, [{"kind": "note", "content": f"other {n}", "lane": "other"} for n in range(7)])
    owner = health(db, "m", 3)
    assert (owner["status"], owner["reasons"]) == ("degraded", ["vectors_incomplete"])
    assert figures_of(owner["coverage"]) == (3, 10, 0, 0) and owner["coverage"]["lanes"] == "all"
    assert owner["coverage"]["share"] == 0.3
    db.execute("set emem.vector_coverage_threshold = 0.25")  # the owner runs under its session's
    assert health(db, "m", 3)["status"] == "ok"
    db.execute("reset emem.vector_coverage_threshold")
    with psycopg.connect(dsn(make_role("agent", "teamwork")), autocommit=True) as agent:
        seen = health(agent, "m", 3)
        # The agent's figures are its own lanes': nothing of the other lane's size, nothing missing.
        assert (seen["status"], figures_of(seen["coverage"]), seen["coverage"]["lanes"]) == (
            "ok",
            (3, 3, 0, 0),
            "readable",
        )
        put(db, [{"kind": "note", "content": "team, no vector", "lane": "team"}])
        agent.execute("set emem.vector_coverage_threshold = 0")  # an agent's session does not choose it
        assert health(agent, "m", 3)["reasons"] == ["vectors_incomplete"]
        db.execute("select emem.set_agent_setting('teamwork', 'emem.vector_coverage_threshold', '0.7')")
        assert health(agent, "m", 3)["status"] == "ok"  # 3 of 4: above what the owner chose
    with pytest.raises(errors.InvalidParameterValue, match="accepted: a number from 0 to 1"):
        db.execute("select emem.set_agent_setting('teamwork', 'emem.vector_coverage_threshold', '1.5')")


def test_find_is_degraded_over_an_incomplete_space_in_the_lanes_the_caller_reads(
    db: psycopg.Connection, dsn: Callable[..., str], make_role: Callable[..., str]
) -> None:
    db.execute("select emem.create_lane('team'), emem.create_lane('other')")
    db.execute("select emem.create_agent_profile('teamwork', array['team'])")
    db.execute("select emem.create_agent_profile('otherwork', array['other'])")
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    put(db, [{"kind": "note", "content": "team report", "lane": "team", "vector": [1, 0, 0]}])
    [bare] = put(db, [{"kind": "note", "content": "other report", "lane": "other"}])

    def envelope(conn: psycopg.Connection, vector: str | None = "[1,0,0]") -> tuple[bool, str | None]:
        answer = scalar(conn, "select emem.e_gather_find_envelope('report', %s)", (vector,))
        return answer["degraded"], answer["degraded_reason"]

    assert envelope(db) == (True, "vectors_incomplete")
    assert envelope(db, None) == (True, "no_vector")  # no vector at all says more
    with (
        psycopg.connect(dsn(make_role("agent", "teamwork")), autocommit=True) as team,
        psycopg.connect(dsn(make_role("agent", "otherwork")), autocommit=True) as other,
    ):
        assert envelope(team) == (False, None)  # another lane's missing vector tells this agent nothing
        assert envelope(other) == (True, "vectors_incomplete")
        db.execute("select emem.put_record_vector(%s, '[0,1,0]')", (bare,))
        assert envelope(other) == envelope(db) == (False, None)
        explanation = scalar(db, "select emem.e_gather_explain('report', '[1,0,0]')")
        assert explanation["degraded"] is False


# ---- the workers' API ---------------------------------------------------------------------------------


def test_an_edit_while_a_worker_holds_the_entry_waits_and_its_vector_does_not_survive(
    db: psycopg.Connection, dsn: Callable[..., str]
) -> None:
    db.execute("select emem.create_lane('team')")
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    [record] = put(db, [{"kind": "note", "content": "the old text", "lane": "team"}])
    with psycopg.connect(dsn()) as worker:
        [(queue_id, texts)] = worker.execute("select queue_id, texts from emem.claim_embeddings(1)").fetchall()
        assert texts == ["the old text"]
        editor = in_another_session(dsn(), "select emem.update_record(%s, content => 'the new text')", (record,))
        time.sleep(0.5)
        assert editor.is_alive()  # the edit waits for the worker's batch
        worker.execute("select emem.store_embeddings(%s, array['[1,0,0]']::vector[])", ([queue_id],))
        worker.commit()
    editor.join(30)
    assert scalar(db, "select count(*) from emem.record_vectors") == 0  # the old text's vector went
    [(again, texts)] = db.execute("select queue_id, texts from emem.claim_embeddings(1)").fetchall()
    assert (again != queue_id, texts) == (True, ["the new text"])
    # A store for the entry's old id (a claim made outside a transaction) writes nothing.
    assert db.execute("select emem.store_embeddings(%s, array['[1,0,0]']::vector[])", ([queue_id],)).fetchone() == (0,)
    assert scalar(db, "select count(*) from emem.record_vectors") == 0


def test_a_claim_drops_work_already_done_and_takes_the_next(db: psycopg.Connection) -> None:
    """Entries whose vector exists (as a race between loaders can leave) go without a gateway call."""
    db.execute("select emem.create_lane('team')")
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    done = put(db, [{"kind": "note", "content": f"done {n}", "lane": "team", "vector": [1, n, 0]} for n in range(5)])
    db.execute(
        "insert into emem.embedding_queue (space_id, lane_name, record_id) select 1, 'team', unnest(%s::bigint[])",
        (done,),
    )
    [todo] = put(db, [{"kind": "note", "content": "to do", "lane": "team"}])
    assert db.execute("select record_id from emem.claim_embeddings(1, 2)").fetchall() == [(todo,)]
    assert queued(db) == {(1, str(todo))}


def test_workers_claim_only_their_own_lanes_and_refuse_bad_arguments(
    db: psycopg.Connection, dsn: Callable[..., str], make_role: Callable[..., str]
) -> None:
    for lane in ("team", "shared", "secret", "drop"):
        db.execute("select emem.create_lane(%s)", (lane,))
    # Reads team and shared, writes team and the write-only lane drop (whose texts it may not read).
    db.execute("select emem.create_agent_profile('teamwork', array['team', 'shared'], array['team', 'drop'])")
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    ids = {
        lane: put(db, [{"kind": "note", "content": f"{lane} text", "lane": lane}])[0]
        for lane in ("team", "shared", "secret", "drop")
    }
    foreign = scalar(db, "select array_agg(queue_id) from emem.embedding_queue where lane_name <> 'team'")
    with psycopg.connect(dsn(make_role("agent", "teamwork"))) as agent:
        claimed = agent.execute("select record_id, texts from emem.claim_embeddings(1, 1000)").fetchall()
        assert claimed == [(ids["team"], ["team text"])]
        assert agent.execute(
            "select emem.store_embeddings(%s, %s::vector[])", (foreign, ["[1,0,0]"] * len(foreign))
        ).fetchone() == (0,)
        assert agent.execute("select emem.defer_embeddings(%s, 'no', 10)", (foreign,)).fetchone() == (0,)
        assert {r[0] for r in agent.execute("select lane_name from emem.embedding_queue")} == {"team", "shared"}
        assert coverage(agent)["records"] == 2  # the lanes it reads, nothing of secret's or drop's
        agent.rollback()
        for statement in (
            "delete from emem.embedding_queue",
            "insert into emem.embedding_queue (space_id, lane_name, record_id) values (1, 'team', 1)",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                agent.execute(statement)
            agent.rollback()
    assert scalar(db, "select count(*) from emem.record_vectors") == 0
    with psycopg.connect(dsn(make_role("unbound"))) as unbound:
        for call in (
            "select emem.claim_embeddings(1)",
            "select emem.embedding_coverage()",
            "select emem.queue_missing_embeddings(1)",
            "select emem.defer_embeddings(array[1], 'x', 1)",
            "select emem.store_embeddings(array[1], array['[1,0,0]']::vector[])",
        ):
            with pytest.raises(errors.InsufficientPrivilege, match="bound to no agent profile"):
                unbound.execute(call)
            unbound.rollback()
    for call, message in (
        ("select emem.claim_embeddings(1, 0)", "batch_size 0 is out of range"),
        ("select emem.claim_embeddings(99)", "unknown embedding space 99"),
        ("select emem.store_embeddings(array[1, 2], array['[1,0,0]']::vector[])", "as many vectors"),
        ("select emem.defer_embeddings(array[1], repeat('x', 1001), 1)", "1 to 1000 characters"),
        ("select emem.defer_embeddings(array[1], 'x', -1)", "retry_after -1 is out of range"),
        ("select emem.defer_embeddings(array_fill(1::bigint, array[1001]), 'x', 1)", "1 to 1000 queue ids"),
    ):
        with pytest.raises(errors.InvalidParameterValue, match=message):
            db.execute(call)
    with psycopg.connect(dsn()) as worker:
        [(queue_id,)] = worker.execute("select queue_id from emem.claim_embeddings(1, 1)").fetchall()
        with pytest.raises(errors.InvalidParameterValue, match="has 2 dimensions but embedding space 1"):
            worker.execute("select emem.store_embeddings(%s, array['[1,0]']::vector[])", ([queue_id],))


# ---- emem embed --------------------------------------------------------------------------------------------


def embed_command(dsn: str, service: FakeService, *args: str, model: str = MODEL) -> list[str]:
    return [
        sys.executable,
        "-m",
        "emem_client.cli",
        "--dsn",
        dsn,
        "--gateway",
        "openai",
        "--openai-base-url",
        service.base_url,
        "--openai-model",
        model,
        "embed",
        *args,
    ]


def start_worker(dsn: str, service: FakeService, key: str, *args: str) -> subprocess.Popen[str]:
    """`emem embed` in a process of its own; `key` (its API key) tells its requests apart."""
    return subprocess.Popen(
        embed_command(dsn, service, "--no-progress", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPENAI_API_KEY": key, "PYTHONFAULTHANDLER": "1"},
    )


def interrupt(worker: subprocess.Popen[str]) -> None:
    """Ctrl-C; a worker still running 30 s later is aborted, its threads' stacks in the failure."""
    worker.send_signal(signal.SIGINT)
    try:
        worker.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        worker.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: the stacks go to its stderr
        _, stacks = worker.communicate(timeout=30)
        pytest.fail(f"emem embed --follow ignored Ctrl-C for 30 s; where it was:\n{stacks}")


def texts_of(service: FakeService, key: str) -> list[str]:
    return [text for text in service.behaviour.texts_embedded(f"Bearer {key}") if text != FINGERPRINT_PROBE]


def assert_filled(db: psycopg.Connection, space: int) -> None:
    assert queued(db) == missing(db) == set()
    records = scalar(db, "select count(*) from emem.records")
    assert scalar(db, "select count(*) from emem.record_vectors where space_id = %s", (space,)) == records
    assert scalar(db, "select count(*) from emem.windows where embedding is null") == 0
    assert coverage(db, space)["share"] == 1


def test_emem_embed_fills_the_space_of_the_gateways_model(
    db: psycopg.Connection,
    dsn: Callable[..., str],
    service: FakeService,
    seeded: Seeded,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert figures_of(coverage(db)) == (0, len(NOTES) + len(TURNS), 0, len(TURNS) - 1)
    gateway = ["--dsn", dsn(), "--gateway", "openai", "--openai-base-url", service.base_url, "--openai-model", MODEL]
    assert cli.main([*gateway, "health"]) == 3  # before
    out = capsys.readouterr().out
    assert "vectors: 0 of 10 records, 0 of 3 windows (in every lane)\n  emem embed (with the active" in out
    assert cli.main([*gateway, "find", TURNS[1]]) == 0
    out = capsys.readouterr().out
    assert "DEGRADED (vectors_incomplete): records or windows lack a vector of the active space" in out
    for wrong, message in (
        (["--openai-model", "another-model", "embed"], "no embedding space for the gateway's model another-model"),
        (["embed", "--space", "7"], "there is no embedding space 7"),
    ):
        assert cli.main([*gateway, *wrong]) == 1
        assert message in capsys.readouterr().err
    db.execute("select emem.create_embedding_space('another-model', 8)")
    assert cli.main([*gateway, "embed", "--space", "2"]) == 1
    assert "the gateway embeds with fake-embed-8 (8 dimensions), embedding space 2 is another-model" in (
        capsys.readouterr().err
    )
    db.execute("select emem.drop_embedding_space(2)")

    code = cli.main(embed_command(dsn(), service, "--no-progress", "--batch-size", "4")[3:])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[0].startswith(f"embedded {len(NOTES) + len(TURNS)} records and 3 windows into space 1")
    assert "vectors: 10 of 10 records, 3 of 3 windows (in every lane)" in out
    assert_filled(db, seeded["space"])
    assert set(service.behaviour.texts_embedded()) - {FINGERPRINT_PROBE, TURNS[1]} == every_text() - {TURNS[1]}
    assert cli.main([*gateway, "health"]) == 0  # after
    assert "vectors: 10 of 10 records, 3 of 3 windows" in capsys.readouterr().out
    stored = scalar(db, "select embedding::text from emem.record_vectors where record_id = %s", (seeded["turns"][1],))
    assert json.loads(stored) == pytest.approx(unit(*vector_for(TURNS[1], 8, "model-a")), abs=1e-6)
    # Nothing left: a second run asks the gateway for nothing but its declaration.
    before = len(service.behaviour.requests)
    assert cli.main([*embed_command(dsn(), service, "--no-progress", "--json")[3:]]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["records_embedded"], report["coverage"]["share"]) == (0, 1)
    assert len(service.behaviour.requests) - before <= 1


def test_an_agents_worker_embeds_the_lanes_it_reads_and_writes_only(
    db: psycopg.Connection,
    dsn: Callable[..., str],
    service: FakeService,
    seeded: Seeded,
    make_gateway: Callable[..., OpenAIGateway],
    make_role: Callable[..., str],
) -> None:
    db.execute("select emem.create_agent_profile('teamwork', array['team', 'other'], array['team'])")
    with psycopg.connect(dsn(make_role("agent", "teamwork")), autocommit=True) as agent:
        report = embed_queue(Client(agent, make_gateway(service.base_url)), QUIET)
    team_notes = [note for n, note in enumerate(NOTES) if n % 2]
    assert set(service.behaviour.texts_embedded()) - {FINGERPRINT_PROBE} == every_text() - set(NOTES) | set(team_notes)
    assert (report.records_embedded, report.windows_embedded) == (len(team_notes) + len(TURNS), 3)
    assert report.coverage is not None and report.coverage.lanes == "readable"
    assert {lane for (lane,) in db.execute("select lane_name from emem.embedding_queue")} == {"other"}


def test_two_workers_drain_one_queue_without_double_work(
    db: psycopg.Connection, dsn: Callable[..., str], service: FakeService, seeded: Seeded
) -> None:
    more = put(db, [{"kind": "note", "content": f"extra note {n}", "lane": "team"} for n in range(40)])
    service.behaviour.delay = 0.1
    workers = {key: start_worker(dsn(), service, key, "--batch-size", "3") for key in ("worker-a", "worker-b")}
    for key, worker in workers.items():
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, f"{key}: {out}{err}"
    a, b = texts_of(service, "worker-a"), texts_of(service, "worker-b")
    assert a and b, "both workers took work"
    assert len(set(a)) == len(a) and len(set(b)) == len(b) and not set(a) & set(b)
    assert set(a) | set(b) == every_text() | {f"extra note {n}" for n in range(40)}
    assert_filled(db, seeded["space"])
    assert len(more) == 40


def test_a_worker_killed_mid_batch_loses_nothing_and_embeds_nothing_twice(
    db: psycopg.Connection, dsn: Callable[..., str], service: FakeService, seeded: Seeded
) -> None:
    put(db, [{"kind": "note", "content": f"extra note {n}", "lane": "team"} for n in range(12)])
    service.behaviour.delay = 0.4
    worker = start_worker(dsn(), service, "worker-a", "--batch-size", "5")

    def batches_sent() -> list[list[str]]:
        return [r["body"]["input"] for r in service.behaviour.requests if r["body"]["input"] != [FINGERPRINT_PROBE]]

    wait_until(lambda: len(batches_sent()) >= 3, what="the third batch at the gateway")
    worker.send_signal(signal.SIGKILL)  # while the gateway answers its third batch: claimed, not stored
    worker.wait()
    done_before, killed = batches_sent()[:2], batches_sent()[2]
    records_stored = scalar(db, "select count(*) from emem.record_vectors where space_id = %s", (seeded["space"],))
    windows_stored = scalar(db, "select count(*) from emem.windows where embedding is not null")
    assert records_stored + windows_stored == sum(len(batch) for batch in done_before) == 10
    assert queued(db) == missing(db) and len(queued(db)) == len(every_text()) + 12 - 10  # the killed batch too
    wait_until(
        lambda: (
            not scalar(
                db,
                "select count(*) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()",
            )
        ),
        what="the killed worker's session to end",
    )
    service.behaviour.delay = 0
    again = start_worker(dsn(), service, "worker-b", "--batch-size", "5")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, out + err
    redone = texts_of(service, "worker-b")
    assert set(killed) <= set(redone)
    assert not set(redone) & {text for batch in done_before for text in batch}  # nothing stored is embedded again
    assert len(redone) == len(set(redone)) == len(every_text()) + 12 - 10
    assert_filled(db, seeded["space"])


def test_a_text_the_gateway_refuses_waits_and_the_rest_goes_on(
    db: psycopg.Connection,
    dsn: Callable[..., str],
    service: FakeService,
    seeded: Seeded,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service.behaviour.refused = {NOTES[2]}
    code = cli.main(embed_command(dsn(), service, "--no-progress")[3:])
    out = capsys.readouterr().out
    assert code == 1
    assert "the gateway refused 1 text(s), queued again for later" in out
    assert "vectors: 9 of 10 records, 3 of 3 windows" in out
    attempts, error, waiting = row(db, "select attempts, last_error, not_before > now() from emem.embedding_queue")
    assert (attempts, waiting) == (1, True) and "HTTP 400" in error
    assert coverage(db)["deferred"] == 1
    assert health(db, MODEL, 8)["reasons"] == ["vectors_incomplete"]


def test_a_gateway_that_is_down_is_tried_again_and_then_given_up_with_nothing_lost(
    db: psycopg.Connection,
    dsn: Callable[..., str],
    service: FakeService,
    seeded: Seeded,
    make_gateway: Callable[..., OpenAIGateway],
) -> None:
    before = queued(db)
    service.behaviour.failures_left = 2  # two 503s, then answers
    report = embed_queue(Client(db, make_gateway(service.base_url)), QUIET)
    assert report.records_embedded == len(NOTES) + len(TURNS)
    assert_filled(db, seeded["space"])
    db.execute("select emem.update_record(record_id, content => content || '!') from emem.records")  # all again
    started = time.monotonic()
    with pytest.raises(EmbedError, match="failed 3 times in a row"):
        embed_queue(
            Client(db, make_gateway(DOWN_URL)), EmbedOptions(progress=False, retries=2, backoff=0.1, max_backoff=0.1)
        )
    assert time.monotonic() - started < 10
    assert queued(db) == missing(db) and len(queued(db)) == len(before)


def test_follow_embeds_new_work_as_it_arrives(
    db: psycopg.Connection, dsn: Callable[..., str], service: FakeService, seeded: Seeded
) -> None:
    worker = start_worker(dsn(), service, "worker-a", "--follow", "--poll-interval", "0.2")
    try:
        wait_until(lambda: not queued(db), what="the first drain")
        [late] = put(db, [{"kind": "note", "content": "written later", "lane": "team"}])
        db.execute("select emem.update_record(%s, content => 'edited later')", (seeded["notes"][0],))
        wait_until(lambda: not queued(db), what="the new work embedded")
        assert {"written later", "edited later"} <= set(texts_of(service, "worker-a"))
        assert_filled(db, seeded["space"])
        assert late
    finally:
        interrupt(worker)
    assert worker.returncode == 130


def test_ingest_writes_without_vectors_while_the_gateway_is_down_and_embed_fills_them(
    db: psycopg.Connection, service: FakeService, make_gateway: Callable[..., OpenAIGateway], tmp_path: Path
) -> None:
    db.execute("select emem.create_lane('team')")
    space = Client(db, make_gateway(service.base_url)).ensure_space()
    down = make_gateway(DOWN_URL)
    notes = tmp_path / "notes.jsonl"
    notes.write_text("\n".join(json.dumps({"content": c}) for c in NOTES))
    conversations = tmp_path / "conversations.json"
    conversations.write_text(json.dumps([{"id": "standup", "turns": TURNS}]))
    options = IngestOptions(lane="team", progress=False)
    reports = [
        ingest_notes(Client(db, down), [notes], options),
        ingest_conversations(Client(db, down), [conversations], options),
    ]
    assert [(r.records_created, r.windows_created, r.queued_for_embedding) for r in reports] == [
        (len(NOTES), 0, len(NOTES)),
        (len(TURNS), 2, len(TURNS) + 2),  # windows of three turns, one starting at each of the first two
    ]
    problem = reports[0].gateway_problem
    assert problem is not None and "unreachable" in problem
    assert scalar(db, "select count(*) from emem.record_vectors") == 0
    assert figures_of(coverage(db)) == (0, 10, 0, 2)
    embed_queue(Client(db, make_gateway(service.base_url)), QUIET)
    assert_filled(db, space)
    page = Client(db, make_gateway(service.base_url)).find(TURNS[1])
    assert (page.degraded, page.rows[0].content) == (False, f"{TURNS[1]}")


def test_a_parallel_restore_fills_the_queue_again(db: psycopg.Connection, seeded: Seeded, tmp_path: Path) -> None:
    db.execute(
        "select emem.put_record_vector(%s::bigint, %s::vector)",
        (seeded["notes"][0], str(vector_for(NOTES[0], 8, "model-a"))),
    )
    db.execute("select emem.create_embedding_space('m2', 2)")
    before = queued(db)
    info = db.info
    connection = ["-h", info.host, "-p", str(info.port), "-U", info.user]
    pg_dump, pg_restore = shutil.which("pg_dump"), shutil.which("pg_restore")
    assert pg_dump and pg_restore, "pg_dump and pg_restore come with the PostgreSQL client"
    dump = tmp_path / "emem.dump"
    subprocess.run([pg_dump, *connection, "-Fc", "-f", str(dump), info.dbname], check=True)
    target = f"emem_restore_{uuid.uuid4().hex[:8]}"
    db.execute(f"create database {target}")
    try:
        subprocess.run(
            [pg_restore, *connection, "-j", "4", "-d", target, "--exit-on-error", str(dump)],
            check=True,
        )
        with psycopg.connect(host=info.host, port=info.port, user=info.user, dbname=target, autocommit=True) as copy:
            assert queued(copy) == missing(copy) == before
            assert figures_of(coverage(copy, 1)) == figures_of(coverage(db, 1))
    finally:
        db.execute(f"drop database {target} with (force)")


def test_an_update_from_0_1_1_queues_what_lacks_a_vector(db: psycopg.Connection) -> None:
    require_legacy_modules(db)
    with scratch_database(db, "queue") as conn:
        conn.execute("create extension emem version '0.1.1' cascade")
        emulate_modules_of(conn, "0.1.1")
        conn.execute("select emem.create_lane('team')")
        conn.execute("select emem.create_embedding_space('m', 3, null, true)")
        items = [
            {"kind": "note", "content": "with", "lane": "team", "vector": [1, 0, 0]},
            {"kind": "note", "content": "without", "lane": "team"},
        ]
        conn.execute("select emem.put_records(%s::jsonb)", (json.dumps(items),))
        conn.execute("select emem.create_embedding_space('m2', 2)")
        emulate_modules_of(conn, "0.2.1")  # the legacy modules also answer for 0.2.0 on the way
        conn.execute("alter extension emem update")
        assert queued(conn) == missing(conn) == {(1, "2"), (2, "1"), (2, "2")}


# ---- with the embedded model ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded() -> EmbeddedGateway:
    return EmbeddedGateway()


def projected(gateway: EmbeddedGateway) -> Callable[[list[str]], list[list[float]]]:
    """Another model for the service: MiniLM's vectors through a fixed random projection to 256
    dimensions, which keeps their cosines roughly (so meaning still finds)."""
    matrix = numpy.random.default_rng(17).normal(size=(384, 256))
    return lambda texts: (numpy.array(gateway.embed(texts)) @ matrix).tolist()


MEANINGS = {
    "The quarterly budget was approved by the board on Monday.": "Who signed off on the spending plan?",
    "Our cat sleeps on the sofa all day long.": "Where does the pet nap?",
    "The database server ran out of disk space last night.": "Why did the storage fill up?",
    "Maria is planning a hiking trip to the Alps in July.": "Who goes walking in the mountains this summer?",
}
CONVERSATION = [
    "Maya: The finance export failed again last night.",
    "Tomás: It runs on the replica since the migration.",
    "Maya: Then replica lag cancels the long query.",
    "Tomás: Let us turn on hot standby feedback.",
]


def first_content(client: Client, question: str) -> tuple[str, bool, str | None]:
    page = client.find(question, page_size=5)
    return page.rows[0].content, page.degraded, page.degraded_reason


@pytest.mark.embedded_model
def test_a_model_switch_end_to_end_without_a_blind_spot(
    db: psycopg.Connection,
    dsn: Callable[..., str],
    service: FakeService,
    embedded: EmbeddedGateway,
    make_gateway: Callable[..., OpenAIGateway],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    service.behaviour.embedder = projected(embedded)
    real_gateway = cli.make_gateway
    monkeypatch.setattr(
        cli, "make_gateway", lambda args: embedded if cli.option(args, "gateway") == "embedded" else real_gateway(args)
    )
    other = ["--gateway", "openai", "--openai-base-url", service.base_url, "--openai-model", PROJECTED_MODEL]

    def emem(*args: str) -> tuple[int, str]:
        code = cli.main(["--dsn", dsn(), *args])
        return code, capsys.readouterr().out

    # The embedded model: set up, ingest notes and a conversation; every record has its vector.
    assert emem("init", "--lane", "team")[0] == 0
    notes = tmp_path / "notes.jsonl"
    notes.write_text("\n".join(json.dumps({"content": content}) for content in MEANINGS))
    conversations = tmp_path / "conversations.json"
    conversations.write_text(json.dumps([{"id": "standup", "turns": CONVERSATION}]))
    assert emem("ingest", "notes", "--lane", "team", "--no-progress", str(notes))[0] == 0
    assert emem("ingest", "conversations", "--lane", "team", "--no-progress", str(conversations))[0] == 0
    old, new = Client(db, embedded), Client(db, make_gateway(service.base_url, PROJECTED_MODEL))
    code, out = emem("health")
    assert code == 0 and "vectors: 8 of 8 records, 2 of 2 windows (in every lane)" in out  # before

    # The new model's space: created inactive and queued whole; the old one keeps answering.
    code, out = emem("init", "--lane", "team", *other)
    assert code == 0 and out.startswith(f"embedding space 2: {PROJECTED_MODEL} (256 dimensions), inactive")
    assert figures_of(coverage(db, 2)) == (0, 8, 0, 2)
    assert old.health().ok and new.health().reasons == [
        "model_mismatch",
        "dimension_mismatch",
        "fingerprint_mismatch",
    ]  # during
    for content, question in MEANINGS.items():
        assert first_content(old, question) == (content, False, None)
    code = cli.main(["--dsn", dsn(), "init", *other, "--activate"])
    assert code == 1 and "has vectors for 0 of 8 records and 0 of 2 windows" in capsys.readouterr().err
    assert old.health().ok

    # Filled while the old space answers, then switched to: the clients see it at once.
    code, out = emem(*other, "embed", "--no-progress")
    assert code == 0 and "vectors: 8 of 8 records, 2 of 2 windows" in out
    assert "switch to this space with emem init --activate" in out
    assert first_content(old, "Where does the pet nap?")[1:] == (False, None)
    code, out = emem("init", *other, "--activate")
    assert code == 0 and out.startswith(f"embedding space 2: {PROJECTED_MODEL} (256 dimensions), active")
    after = new.health()
    assert after.ok and after.coverage is not None and after.coverage["share"] == 1  # after
    assert old.health().reasons == ["model_mismatch", "dimension_mismatch", "fingerprint_mismatch"]
    assert old.find("Where does the pet nap?").degraded_reason == "declaration_mismatch"
    for content, question in MEANINGS.items():
        assert first_content(new, question) == (content, False, None)
    page = new.find("Why does the export keep failing on the replica?")
    assert page.rows[0].content in CONVERSATION and any(row.windows for row in page.rows)


@pytest.mark.embedded_model
def test_a_forced_switch_is_degraded_until_every_record_has_a_vector(
    db: psycopg.Connection,
    service: FakeService,
    embedded: EmbeddedGateway,
    make_gateway: Callable[..., OpenAIGateway],
) -> None:
    """The new user's sequence of the issue, forced: health says ok only once every record has a
    vector of the active model, and finds by meaning work afterwards."""
    service.behaviour.embedder = projected(embedded)
    db.execute("select emem.create_lane('team')")
    old = Client(db, embedded)
    old.ensure_space()
    old.put_records(
        [
            {"kind": "note", "content": c, "lane": "team", "vector": v}
            for c, v in zip(MEANINGS, embedded.embed(list(MEANINGS)), strict=True)
        ]
    )
    new = Client(db, make_gateway(service.base_url, PROJECTED_MODEL))
    db.execute("select emem.activate_embedding_space(%s, force => true)", (new.ensure_space(activate=False),))
    now = new.health()
    assert now.coverage is not None
    assert (now.status, now.reasons, figures_of(now.coverage)) == ("degraded", ["vectors_incomplete"], (0, 4, 0, 0))
    page = new.find("Where does the pet nap?")
    assert (page.degraded, page.degraded_reason) == (True, "vectors_incomplete")
    assert not any("record_vectors" in row.found_by for row in page.rows)  # no record has a vector yet
    report = embed_queue(new, QUIET)
    assert report.coverage is not None
    assert (report.records_embedded, report.coverage.share) == (4, 1)
    assert new.health().ok
    for content, question in MEANINGS.items():
        assert first_content(new, question) == (content, False, None)


@pytest.mark.embedded_model
def test_an_edited_record_is_stale_until_embedded_again_then_found_by_its_new_meaning(
    db: psycopg.Connection, embedded: EmbeddedGateway
) -> None:
    db.execute("select emem.create_lane('team')")
    client = Client(db, embedded)
    client.ensure_space()
    ids = client.put_records(
        [
            {"kind": "note", "content": c, "lane": "team", "vector": v}
            for c, v in zip(MEANINGS, embedded.embed(list(MEANINGS)), strict=True)
        ]
    )
    turns = client.put_records(
        [
            {
                "kind": "conversation",
                "content": c,
                "lane": "team",
                "thread_id": "standup",
                "thread_position": n,
                "vector": v,
            }
            for n, (c, v) in enumerate(zip(CONVERSATION, embedded.embed(CONVERSATION), strict=True))
        ]
    )
    for start in range(3):
        client.put_window(turns[start : start + 2], embedded.embed([window_text(CONVERSATION[start : start + 2])])[0])
    cat = ids[1]
    [as_cat] = [row for row in client.find("Where does the pet nap?").rows if row.record_id == cat]
    assert (as_cat.rank, as_cat.placed_by) == (1, "record_vectors")

    printer = "The printer on the third floor is jammed again."
    db.execute("select emem.update_record(%s, content => %s)", (cat, printer))
    coffee = "Tomás: The coffee machine on the third floor needs descaling."
    db.execute("select emem.update_record(%s, content => %s)", (turns[1], coffee))
    # Stale: no vector answers for the old texts, and the answer says so.
    page = client.find("Where does the pet nap?")
    assert (page.degraded, page.degraded_reason) == (True, "vectors_incomplete")
    assert cat not in {row.record_id for row in page.rows if "record_vectors" in row.found_by}
    assert client.health().reasons == ["vectors_incomplete"]
    stale = client.health().coverage
    assert stale is not None and figures_of(stale) == (6, 8, 1, 3)

    report = embed_queue(client, QUIET)
    assert (report.records_embedded, report.windows_embedded) == (2, 2)
    assert client.health().ok
    content, degraded, _ = first_content(client, "Which office device is broken?")
    assert (content, degraded) == (printer, False)
    [as_printer] = [row for row in client.find("Where does the pet nap?").rows if row.record_id == cat]
    assert as_printer.distance > as_cat.distance + 0.2  # its vector now speaks for the new text only
    window = scalar(db, "select embedding::text from emem.windows where first_position = 1 and last_position = 2")
    expected = embedded.embed([window_text([coffee, CONVERSATION[2]])])[0]
    assert json.loads(window) == pytest.approx(expected, abs=1e-5)
    page = client.find("Who should descale the coffee maker?")
    assert turns[1] in {row.record_id for row in page.rows[:5] if "window_vectors" in row.found_by}


# ---- a gateway that fails midway, or is slow ----------------------------------------------------------


def test_what_the_gateway_embedded_before_it_failed_is_kept(
    db: psycopg.Connection, service: FakeService, make_gateway: Callable[..., OpenAIGateway]
) -> None:
    """A batch of 300 goes to the gateway in several requests; the third fails and the run gives up: what
    the second brought back is stored, not thrown away with the batch."""
    db.execute("select emem.create_lane('team')")
    space = Client(db, make_gateway(service.base_url)).ensure_space()
    put(db, [{"kind": "note", "content": f"note number {n}", "lane": "team"} for n in range(300)])
    requests: list[int] = []

    def first_request_only(texts: list[str]) -> list[list[float]]:
        requests.append(len(texts))
        if len(requests) > 2:  # the first is the fingerprint probe's
            raise ConnectionAbortedError("the service fell over")  # the handler drops the connection
        return [vector_for(text, 8, "model-a") for text in texts]

    service.behaviour.embedder = first_request_only
    with pytest.raises(EmbedError) as gave_up:
        embed_queue(Client(db, make_gateway(service.base_url)), EmbedOptions(batch_size=300, retries=0, progress=False))
    embedded = sum(requests[1:-1])
    stored = scalar(db, "select count(*) from emem.record_vectors where space_id = %s", (space,))
    assert (stored, len(queued(db))) == (embedded, 300 - embedded) and embedded > 0
    assert "what was embedded is stored, the rest stays queued" in str(gave_up.value)


def test_a_slow_gateway_is_said_to_be_slow_with_what_to_change(
    db: psycopg.Connection, service: FakeService, make_gateway: Callable[..., OpenAIGateway], seeded: Seeded
) -> None:
    service.behaviour.delay = 0.5
    with pytest.raises(EmbedError) as gave_up:
        embed_queue(
            Client(db, make_gateway(service.base_url, timeout=0.1)),
            EmbedOptions(retries=1, backoff=0.01, progress=False),
        )
    message = str(gave_up.value)
    assert message.startswith("the embedding gateway did not answer in time 2 times in a row")
    assert "--openai-timeout" in message and "when the gateway is back" not in message


def test_the_gateways_timeout_is_an_option_and_a_setting(
    dsn: Callable[..., str], service: FakeService, seeded: Seeded, capsys: pytest.CaptureFixture[str]
) -> None:
    service.behaviour.delay = 0.5
    options = ["--gateway", "openai", "--openai-base-url", service.base_url, "--openai-model", MODEL, "--json"]
    assert cli.main(["--dsn", dsn(), *options, "--openai-timeout", "0.1", "health"]) == 3
    assert json.loads(capsys.readouterr().out)["gateway_reason"] == "gateway_timeout"
    os.environ["EMEM_OPENAI_TIMEOUT"] = "5"
    try:
        cli.main(["--dsn", dsn(), *options, "health"])  # degraded all the same: no record has a vector yet
    finally:
        del os.environ["EMEM_OPENAI_TIMEOUT"]
    assert json.loads(capsys.readouterr().out)["gateway_reason"] is None
    with pytest.raises(SystemExit) as usage:
        cli.main(["--dsn", dsn(), *options, "--openai-timeout", "0", "health"])
    assert usage.value.code == 2
    assert "0 is not a number of seconds from more than 0 to 86400" in capsys.readouterr().err
