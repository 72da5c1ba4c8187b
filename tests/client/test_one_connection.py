"""A Client on one connection, used at once by several threads or tasks, as the README's examples
let LangChain do (`batch`, `abatch`): every call answers, no transaction is left open, and every
write is committed, seen by other sessions."""

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from doubles import INVOICE_AXIS, WEATHER_AXIS, StubGateway
from psycopg.pq import TransactionStatus

from emem_client import AsyncClient, Client
from emem_client.integrations.langchain import EmemRetriever

WEATHER = "How was the weather?"
INVOICES = "Which invoices did Kowalski send?"
CALLS = 8


@pytest.fixture
def gateway() -> StubGateway:
    return StubGateway({WEATHER: WEATHER_AXIS, INVOICES: INVOICE_AXIS})


@pytest.fixture
def conninfo(db: psycopg.Connection, dsn: Callable[..., str], gateway: StubGateway) -> str:
    db.execute("select emem.create_lane('work')")
    owner = Client(db, gateway)
    owner.ensure_space()
    owner.put_records(
        [
            {"kind": "note", "content": "Sunny all week", "lane": "work", "tags": ["weather"], "vector": WEATHER_AXIS},
            {"kind": "note", "content": "Kowalski sent INV-2031", "lane": "work", "vector": INVOICE_AXIS},
        ]
    )
    return dsn()


def seen_by_another_session(conninfo: str, contents: list[str]) -> list[str]:
    with psycopg.connect(conninfo) as other:
        rows = other.execute("select content from emem.records where content = any(%s)", (contents,)).fetchall()
    return sorted(content for (content,) in rows)


def test_langchain_batch_on_one_connection_answers_every_question_and_loses_no_write(
    conninfo: str, gateway: StubGateway
) -> None:
    with psycopg.connect(conninfo, autocommit=True) as connection:
        client = Client(connection, gateway)
        answers = EmemRetriever(client=client).batch([WEATHER, INVOICES] * (CALLS // 2), {"max_concurrency": CALLS})
        assert [documents[0].page_content for documents in answers] == ["Sunny all week", "Kowalski sent INV-2031"] * (
            CALLS // 2
        )
        assert connection.info.transaction_status == TransactionStatus.IDLE
        client.put_record("note", "written after the batch", "work")
    assert seen_by_another_session(conninfo, ["written after the batch"]) == ["written after the batch"]


def test_threads_sharing_one_client_take_turns_and_commit_every_write(conninfo: str, gateway: StubGateway) -> None:
    failures: list[BaseException] = []
    written = [f"note of thread {n}" for n in range(4)]

    with psycopg.connect(conninfo, autocommit=True) as connection:
        client = Client(connection, gateway)

        def work(text: str) -> None:
            try:
                for _ in range(5):
                    assert client.find(WEATHER).rows[0].content == "Sunny all week"
                client.put_record("note", text, "work")
            except BaseException as error:
                failures.append(error)

        threads = [threading.Thread(target=work, args=(text,)) for text in written]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert connection.info.transaction_status == TransactionStatus.IDLE
    assert failures == []
    assert seen_by_another_session(conninfo, written) == sorted(written)


def test_langchain_abatch_and_gathered_writes_on_one_async_connection(conninfo: str, gateway: StubGateway) -> None:
    written = [f"async note {n}" for n in range(CALLS)]

    async def scenario() -> tuple[list[Any], TransactionStatus]:
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as connection:
            client = AsyncClient(connection, gateway)
            answers = await EmemRetriever(client=client).abatch([WEATHER] * CALLS, {"max_concurrency": CALLS})
            await asyncio.gather(*(client.put_record("note", text, "work") for text in written))
            return answers, connection.info.transaction_status

    answers, status = asyncio.run(scenario())
    assert [documents[0].page_content for documents in answers] == ["Sunny all week"] * CALLS
    assert status == TransactionStatus.IDLE
    assert seen_by_another_session(conninfo, written) == sorted(written)


def test_a_write_inside_the_callers_transaction_is_the_callers_to_commit(conninfo: str, gateway: StubGateway) -> None:
    """The one case where a write is not committed when the method returns: the caller opened a
    transaction on purpose, and its commit or rollback decides."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        client = Client(connection, gateway)
        with connection.transaction() as outer:
            client.put_record("note", "rolled back with the caller", "work")
            raise_rollback(outer)
        assert connection.info.transaction_status == TransactionStatus.IDLE
    assert seen_by_another_session(conninfo, ["rolled back with the caller"]) == []


def raise_rollback(transaction: psycopg.Transaction) -> None:
    raise psycopg.Rollback(transaction)
