"""The asyncio client: Client's surface on an AsyncConnection or AsyncConnectionPool.

The SQL and parsing are shared with Client (emem_client.calls); gateways are synchronous and
run in a worker thread so they never block the event loop.
"""

import asyncio
import weakref
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from emem_client import calls
from emem_client.client import server_of
from emem_client.gateways import EmbeddedGateway, Gateway, GatewayError, ModelDeclaration
from emem_client.types import EmbeddingCoverage, EmbeddingSpace, FindPage, Health, RecordSummary, RegisteredLookup

T = TypeVar("T")


class AsyncClient:
    """Client for asyncio: the same methods, awaited. See emem_client.Client. Concurrent tasks on one
    AsyncConnection (`asyncio.gather`, LangChain's `abatch`) take turns, one transaction block at a time."""

    def __init__(
        self,
        connection_or_pool: AsyncConnection[Any] | AsyncConnectionPool[Any],
        gateway: Gateway | None = None,
    ) -> None:
        self.source = connection_or_pool
        self.gateway: Gateway = gateway if gateway is not None else EmbeddedGateway()

    async def find(self, question: str, page: int = 1, page_size: int = 30) -> FindPage:
        vector, reason = await self.vector_for(question)
        return await self.run(calls.find(question, vector, page, page_size, reason, await self._declaration_of(vector)))

    async def explain(self, question: str, page: int = 1, page_size: int = 30) -> dict[str, Any]:
        vector, reason = await self.vector_for(question)
        declaration = await self._declaration_of(vector)
        return await self.run(calls.explain(question, vector, page, page_size, reason, declaration))

    async def timeline(
        self,
        from_time: datetime | None = None,
        to_time: datetime | None = None,
        page: int = 1,
        page_size: int = 30,
        kinds: Iterable[str] | None = None,
        tags: Iterable[str] | None = None,
    ) -> list[RecordSummary]:
        return await self.run(calls.timeline(from_time, to_time, page, page_size, kinds, tags))

    async def lookup_registry(self) -> list[RegisteredLookup]:
        """Every lookup emem knows, in the merge's tie order, with its label, default weight and description."""
        return await self.run(calls.lookup_registry())

    async def records_with_all_tags(self, tags: Iterable[str]) -> list[RecordSummary]:
        return await self.run(calls.records_with_all_tags(tags))

    async def put_records(self, items: Sequence[dict[str, Any]], space_id: int | None = None) -> list[int]:
        return await self.run(calls.put_records(items, space_id))

    async def put_record(self, kind: str, content: str, lane: str, tags: Iterable[str] = (), **fields: Any) -> int:
        return (await self.put_records([calls.record_item(kind, content, lane, tags, fields)]))[0]

    async def tag(self, record_id: int, tags: Iterable[str]) -> None:
        await self.run(calls.tag(record_id, tags))

    async def untag(self, record_id: int, tags: Iterable[str]) -> int:
        return await self.run(calls.untag(record_id, tags))

    async def link(self, from_id: int, to_id: int, relation: str, properties: dict[str, Any] | None = None) -> int:
        return await self.run(calls.link(from_id, to_id, relation, properties))

    async def put_record_vector(self, record_id: int, vector: Sequence[float], space_id: int | None = None) -> None:
        await self.run(calls.put_record_vector(record_id, vector, space_id))

    async def put_window(
        self,
        member_record_ids: Iterable[int],
        vector: Sequence[float],
        space_id: int | None = None,
    ) -> int:
        return await self.run(calls.put_window(member_record_ids, vector, space_id))

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.gateway.embed, texts)

    async def health(self) -> Health:
        try:
            declaration, problem = await asyncio.to_thread(self.gateway.declaration), None
        except GatewayError as error:
            declaration, problem = None, error
        return await self.run(calls.health(declaration, problem))

    async def embedding_coverage(self, space_id: int | None = None) -> EmbeddingCoverage:
        return await self.run(calls.embedding_coverage(space_id))

    async def ensure_space(self, activate: bool = True) -> int:
        declaration = await asyncio.to_thread(self.gateway.declaration)
        return await self.run(calls.ensure_space(declaration, activate))

    async def run(self, call: calls.Call[T]) -> T:
        """Runs one Call (emem_client.calls) in its own transaction block: the way to add SQL calls."""
        async with self._connection() as connection:
            return await run_on(connection, call)

    async def vector_for(self, question: str) -> tuple[list[float] | None, GatewayError | None]:
        try:
            space = await self._active_space()
            declaration = await asyncio.to_thread(self.gateway.declaration)
            if problem := calls.declaration_problem(declaration, space):
                return None, problem
            vectors = await asyncio.to_thread(self.gateway.embed, [question])
        except GatewayError as error:
            return None, error
        return calls.question_vector(vectors, declaration)

    async def _active_space(self) -> EmbeddingSpace | None:
        return await self.run(calls.active_space())

    async def _declaration_of(self, vector: list[float] | None) -> ModelDeclaration | None:
        return await asyncio.to_thread(self.gateway.declaration) if vector is not None else None

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        if isinstance(self.source, AsyncConnectionPool):
            async with self.source.connection() as connection:
                yield await with_vector_type(connection)
        else:
            async with turn_on(self.source):
                yield await with_vector_type(self.source)


# One lock per connection, whichever AsyncClients share it (see emem_client.client.turn_on).
_turns: "weakref.WeakKeyDictionary[AsyncConnection[Any], asyncio.Lock]" = weakref.WeakKeyDictionary()


@asynccontextmanager
async def turn_on(connection: AsyncConnection[Any]) -> AsyncIterator[None]:
    """Holds the connection for the calling task until its transaction block has ended."""
    async with _turns.setdefault(connection, asyncio.Lock()):
        yield


async def run_on(connection: AsyncConnection[Any], call: calls.Call[T]) -> T:
    async with connection.transaction(), connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(call.sql, call.params)
        return call.read(await cursor.fetchall())


async def with_vector_type(connection: AsyncConnection[Any]) -> AsyncConnection[Any]:
    """The connection, checked for the emem extension and with pgvector's adapter registered (see Client)."""
    if connection.adapters.types.get("vector") is None:
        (await run_on(connection, calls.installed_extension())).require(server_of(connection.info))
        await register_vector_async(connection)
    return connection
