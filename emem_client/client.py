"""The synchronous client: one SQL call per method on a connection or pool the caller owns."""

import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from pgvector.psycopg import register_vector
from psycopg import Connection, ConnectionInfo
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from emem_client import calls
from emem_client.gateways import EmbeddedGateway, Gateway, GatewayError, ModelDeclaration
from emem_client.types import EmbeddingCoverage, EmbeddingSpace, FindPage, Health, RecordSummary, RegisteredLookup

T = TypeVar("T")


class Client:
    """emem for an agent: find, the timeline, health, and writing records, tags, edges and vectors.

    It borrows `connection_or_pool` and never creates the extension or credentials. Each method
    runs in its own transaction block, committed when the method returns (a savepoint inside a
    transaction the caller has open, which the caller then commits), and database errors propagate
    unchanged. Calls on one Connection from several threads (LangChain's `batch`, a thread pool)
    take turns: one call's transaction block at a time, so none nests inside another's and none is
    left open. A pool serves threads in parallel. The gateway defaults to the embedded local model.
    """

    def __init__(
        self,
        connection_or_pool: Connection[Any] | ConnectionPool[Any],
        gateway: Gateway | None = None,
    ) -> None:
        self.source = connection_or_pool
        self.gateway: Gateway = gateway if gateway is not None else EmbeddedGateway()

    def find(self, question: str, page: int = 1, page_size: int = 30) -> FindPage:
        """One page of e_gather_find; degraded (with the gateway's reason) when no vector could be used."""
        vector, reason = self.vector_for(question)
        return self.run(calls.find(question, vector, page, page_size, reason, self._declaration_of(vector)))

    def explain(self, question: str, page: int = 1, page_size: int = 30) -> dict[str, Any]:
        """e_gather_explain: how find reads the question and what each lookup found."""
        vector, reason = self.vector_for(question)
        return self.run(calls.explain(question, vector, page, page_size, reason, self._declaration_of(vector)))

    def timeline(
        self,
        from_time: datetime | None = None,
        to_time: datetime | None = None,
        page: int = 1,
        page_size: int = 30,
        kinds: Iterable[str] | None = None,
        tags: Iterable[str] | None = None,
    ) -> list[RecordSummary]:
        """Records by date between `from_time` and `to_time`, inclusive; None leaves that end open."""
        return self.run(calls.timeline(from_time, to_time, page, page_size, kinds, tags))

    def lookup_registry(self) -> list[RegisteredLookup]:
        """Every lookup emem knows, in the merge's tie order, with its label, default weight and description."""
        return self.run(calls.lookup_registry())

    def records_with_all_tags(self, tags: Iterable[str]) -> list[RecordSummary]:
        return self.run(calls.records_with_all_tags(tags))

    def put_records(self, items: Sequence[dict[str, Any]], space_id: int | None = None) -> list[int]:
        """Writes records in one statement, all or nothing; returns their ids in item order."""
        return self.run(calls.put_records(items, space_id))

    def put_record(self, kind: str, content: str, lane: str, tags: Iterable[str] = (), **fields: Any) -> int:
        return self.put_records([calls.record_item(kind, content, lane, tags, fields)])[0]

    def tag(self, record_id: int, tags: Iterable[str]) -> None:
        self.run(calls.tag(record_id, tags))

    def untag(self, record_id: int, tags: Iterable[str]) -> int:
        return self.run(calls.untag(record_id, tags))

    def link(self, from_id: int, to_id: int, relation: str, properties: dict[str, Any] | None = None) -> int:
        return self.run(calls.link(from_id, to_id, relation, properties))

    def put_record_vector(self, record_id: int, vector: Sequence[float], space_id: int | None = None) -> None:
        self.run(calls.put_record_vector(record_id, vector, space_id))

    def put_window(self, member_record_ids: Iterable[int], vector: Sequence[float], space_id: int | None = None) -> int:
        return self.run(calls.put_window(member_record_ids, vector, space_id))

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Vectors from the gateway; raises GatewayError when it fails."""
        return self.gateway.embed(texts)

    def health(self) -> Health:
        try:
            declaration, problem = self.gateway.declaration(), None
        except GatewayError as error:
            declaration, problem = None, error
        return self.run(calls.health(declaration, problem))

    def embedding_coverage(self, space_id: int | None = None) -> EmbeddingCoverage:
        """How far a space (None: the active one) has vectors, in the lanes this role reads."""
        return self.run(calls.embedding_coverage(space_id))

    def ensure_space(self, activate: bool = True) -> int:
        """The embedding space of the gateway's model (created when missing, and queued for embedding);
        raises GatewayError. activate => True makes it the active one: the database refuses that while
        another is active and this one lacks vectors (emem embed fills it first)."""
        return self.run(calls.ensure_space(self.gateway.declaration(), activate))

    def run(self, call: calls.Call[T]) -> T:
        """Runs one Call (emem_client.calls) in its own transaction block: the way to add SQL calls."""
        with self._connection() as connection:
            return run_on(connection, call)

    @contextmanager
    def transaction(self) -> Iterator[Connection[Any]]:
        """A connection inside one transaction block: Calls run on it with run_on share its locks and
        commit together (or not at all), as the embedding worker's claim and store must."""
        with self._connection() as connection, connection.transaction():
            yield connection

    def vector_for(self, question: str) -> tuple[list[float] | None, GatewayError | None]:
        """The gateway's vector of a text (a question, a record) when its model is the active space's; else
        None and why it cannot be used."""
        try:
            space = self._active_space()
            declaration = self.gateway.declaration()
            if problem := calls.declaration_problem(declaration, space):
                return None, problem
            vectors = self.gateway.embed([question])
        except GatewayError as error:
            return None, error
        return calls.question_vector(vectors, declaration)

    def _active_space(self) -> EmbeddingSpace | None:
        return self.run(calls.active_space())

    def _declaration_of(self, vector: list[float] | None) -> ModelDeclaration | None:
        """The model that made the question's vector (the gateway's, read already), for the database's check."""
        return self.gateway.declaration() if vector is not None else None

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        if isinstance(self.source, ConnectionPool):
            with self.source.connection() as connection:
                yield with_vector_type(connection)
        else:
            with turn_on(self.source):
                yield with_vector_type(self.source)


# One lock per connection, whichever Clients share it: a thread's transaction block must end before
# another thread's begins, or psycopg's blocks nest out of order and leave a transaction open.
_turns: "weakref.WeakKeyDictionary[Connection[Any], threading.RLock]" = weakref.WeakKeyDictionary()
_turns_lock = threading.Lock()


@contextmanager
def turn_on(connection: Connection[Any]) -> Iterator[None]:
    """Holds the connection for the calling thread (re-entrant: a call inside Client.transaction)."""
    with _turns_lock:
        turn = _turns.setdefault(connection, threading.RLock())
    with turn:
        yield


def run_on(connection: Connection[Any], call: calls.Call[T]) -> T:
    """Runs one Call on the connection in its own transaction block (a savepoint inside the caller's)."""
    with connection.transaction(), connection.cursor(row_factory=dict_row) as cursor:
        cursor.execute(call.sql, call.params)
        return call.read(cursor.fetchall())


def with_vector_type(connection: Connection[Any]) -> Connection[Any]:
    """The connection, checked for the emem extension (ExtensionMissingError) and with pgvector's
    adapter registered: once per connection. A pool whose configure registers the adapter skips the
    check; its calls then meet the database's own errors when the extension is missing."""
    if connection.adapters.types.get("vector") is None:
        run_on(connection, calls.installed_extension()).require(server_of(connection.info))
        register_vector(connection)
    return connection


def server_of(info: ConnectionInfo) -> str:
    """Where a connection leads, for messages: host:port (a socket directory for a local socket)."""
    return f"{info.host}:{info.port}"
