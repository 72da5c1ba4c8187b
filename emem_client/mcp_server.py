"""`emem mcp`: emem's tools for agents over the Model Context Protocol, on stdio or streamable HTTP.

    emem mcp                                                 # stdio: as the DSN's role (or --role)
    emem mcp --transport http --tokens tokens.toml --port 8000   # streamable HTTP at /mcp

Six tools: find, timeline, remember, link, explain and health. Each call runs on a pooled
connection that acts as one database role (SET ROLE when the connection is taken, RESET ROLE
when it goes back), so that role's agent profile decides which lanes it reads and writes: on
stdio the server's one role; over HTTP the role the request's bearer token maps to in the
tokens file of emem_client.access (the HTTP service's), and only from a Host of its allow-list.
What the database refuses (bad arguments, a lane the role may not write) comes back as a tool
error with the database's message and hint; the server goes on.
"""

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import psycopg
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from pydantic import Field
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from emem_client import calls
from emem_client.access import AccessTokens, HostAllowList, bearer_token
from emem_client.aio import AsyncClient
from emem_client.gateways import Gateway, GatewayError
from emem_client.ingest import IngestOptions, assume_utc
from emem_client.types import FindPage, Health, RecordSummary

# Where the HTTP access check leaves the caller's role, in the request's state.
ROLE_STATE = "emem_role"
# The role the current tool call acts as (None: the pool's login role); RolePool reads it.
acting_role: ContextVar[str | None] = ContextVar("emem_mcp_acting_role", default=None)
MCP_PATH = "/mcp"
POOL_WAIT_SECONDS = 10.0
# SQLSTATE classes of failures of the server rather than of the call (connection, resources, system,
# internal): their text goes to the server's log, the agent gets the SQLSTATE only.
SERVER_FAILURE_CLASSES = frozenset({"08", "53", "58", "XX"})
THREAD_POSITION_TAKEN = "one_record_per_thread_position"
APPEND_ATTEMPTS = 3  # a turn appended while another writer appends to the same conversation is retried
CONVERSATION_WINDOW = IngestOptions().conversation_windows  # the windows ingest writes over conversations
# What explain shows a role that does not read every lane: how find reads the question, nothing counted
# (candidate counts and list ranks count the records of every lane, which page_filter keeps from agents).
EXPLAIN_FOR_EVERY_ROLE = (
    "question",
    "pipeline_profile",
    "skipped_lookups",
    "degraded",
    "degraded_reason",
    "active_space",
)

INSTRUCTIONS = (
    "emem is a memory of records (notes, conversation turns, file chunks, entities) with tags and "
    "edges between them. `find` answers a question by meaning and by exact names, codes and figures "
    "at once; `timeline` lists records by date; `remember` stores a note or a conversation turn; "
    "`link` relates two records; `explain` shows how find read a question; `health` says whether "
    "search by meaning works right now. You see only the lanes your role may read."
)
READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)

Question = Annotated[
    str, Field(description="What you want to know, in plain words; names, codes and figures are matched exactly")
]
Page = Annotated[int, Field(description="Page number, from 1")]
PageSize = Annotated[int, Field(description="Records per page, from 1")]


@dataclass(frozen=True)
class TimelinePage:
    """Records by date between from_time and to_time (inclusive), oldest first."""

    from_time: datetime
    to_time: datetime
    page: int
    page_size: int
    records: list[RecordSummary]


@dataclass(frozen=True)
class Remembered:
    """A stored record; `embedded` says whether it has a vector (find by meaning reaches it)."""

    record_id: int
    kind: str
    lane: str
    thread_id: str | None
    thread_position: int | None
    embedded: bool
    not_embedded_reason: str | None
    window_id: int | None
    message: str


@dataclass(frozen=True)
class Linked:
    edge_id: int
    from_record_id: int
    to_record_id: int
    relation: str


class RolePool(AsyncConnectionPool):
    """A pool whose connections act as `acting_role` while lent: SET ROLE when lent, RESET ROLE (the pool's
    reset) when returned; a connection that cannot be reset is closed, never lent again."""

    async def getconn(self, timeout: float | None = None) -> psycopg.AsyncConnection[Any]:
        connection = await super().getconn(timeout)
        role = acting_role.get()
        if role is not None:
            try:
                await connection.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
            except BaseException:
                await self.putconn(connection)
                raise
        return connection


class EmemTools:
    """The tools, each a few client calls on connections of `pool` that act as the caller's role.

    `role` is the role of every call that comes without an HTTP request (stdio; None: the pool's
    own login role); `lane` is where remember writes when the call names no lane.
    """

    def __init__(self, pool: RolePool, gateway: Gateway, role: str | None, lane: str) -> None:
        self.emem = AsyncClient(pool, gateway)
        self.role = role
        self.lane = lane

    async def find(
        self,
        *,
        question: Question,
        page: Page = 1,
        page_size: PageSize = 30,
        ctx: Context,
    ) -> FindPage:
        """Search the memory for a question: tags, edge properties, full text, record vectors and window vectors
        at once, merged into one ranked list (each row says which lookup placed it and which found it).

        Totals count every lane, so a page can hold fewer rows than page_size (or none) when records lie in
        lanes your role cannot read: ask for the next page. degraded=true means the embedding model was not
        usable (degraded_reason says why): the answer then comes from exact matches only."""
        async with self.client(ctx) as client:
            return await client.find(question, page, page_size)

    async def timeline(
        self,
        *,
        from_time: Annotated[datetime, Field(description="Start, ISO 8601 (UTC when it names no zone), inclusive")],
        to_time: Annotated[
            datetime | None, Field(description="End, ISO 8601 (UTC when it names no zone), inclusive; default now")
        ] = None,
        kinds: Annotated[
            list[str] | None, Field(description="Only these kinds: note, conversation, file, entity")
        ] = None,
        tags: Annotated[list[str] | None, Field(description="Only records carrying all of these tags")] = None,
        page: Page = 1,
        page_size: PageSize = 30,
        ctx: Context,
    ) -> TimelinePage:
        """List records by the time they occurred, oldest first, between two moments; optionally only some
        kinds and only records with all the given tags."""
        start = assume_utc(from_time)
        end = assume_utc(to_time) if to_time is not None else datetime.now(UTC)
        async with self.client(ctx) as client:
            records = await client.timeline(start, end, page, page_size, kinds, tags)
        return TimelinePage(start, end, page, page_size, records)

    async def remember(
        self,
        *,
        content: Annotated[str, Field(description="The text to remember")],
        kind: Annotated[
            Literal["note", "conversation"],
            Field(description="note, or conversation for one turn of a conversation (then give thread_id)"),
        ] = "note",
        tags: Annotated[Sequence[str], Field(description="Labels, e.g. invoice, project apollo, customer:acme")] = (),
        lane: Annotated[str | None, Field(description="Lane to store it in; default: the server's lane")] = None,
        thread_id: Annotated[
            str | None, Field(description="For a conversation turn: the conversation it belongs to")
        ] = None,
        thread_position: Annotated[
            int | None, Field(description="For a conversation turn: its position from 0; default: after the last")
        ] = None,
        occurred_at: Annotated[
            datetime | None, Field(description="When it happened, ISO 8601 (UTC when it names no zone); default now")
        ] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="Free-form JSON object, e.g. the speaker")] = None,
        ctx: Context,
    ) -> Remembered:
        """Store a note, or one turn of a conversation, with tags. It is embedded right away when the embedding
        model is usable; otherwise it is stored without a vector (the answer says so and why) and find reaches it
        through its tags and words until a vector is written for it. A conversation turn with a vector also gets
        a window vector over the latest turns of its conversation."""
        fields = {
            "thread_id": thread_id,
            "thread_position": thread_position,
            "occurred_at": assume_utc(occurred_at) if occurred_at is not None else None,
            "metadata": metadata,
        }
        item = calls.record_item(kind, content, lane or self.lane, tags, fields)
        async with self.client(ctx) as client:
            # The client's own embedding path: the gateway's vector when it fits the active space, else the reason.
            vector, reason = await client.vector_for(content)
            record_id, position = await self.store(client, item, vector)
            window_id = None
            if vector is not None and kind == "conversation" and thread_id is not None:
                window_id = await conversation_window(client, item["lane"], thread_id, position)
        why = reason.reason if reason else None
        message = (
            "stored with a vector of the active embedding space"
            if vector is not None
            else f"stored without a vector ({why}): find reaches it through its tags and words until a vector "
            "is written for it"
        )
        return Remembered(
            record_id, kind, item["lane"], thread_id, position, vector is not None, why, window_id, message
        )

    async def link(
        self,
        *,
        from_record_id: Annotated[int, Field(description="The record the edge starts from")],
        to_record_id: Annotated[int, Field(description="The record the edge points to")],
        relation: Annotated[str, Field(description="What the link means, e.g. billed, about, follows")],
        properties: Annotated[
            dict[str, Any] | None,
            Field(description='Facts of the link as a JSON object, e.g. {"invoice": "INV-2031", "amount": "1200 EUR"}'),
        ] = None,
        ctx: Context,
    ) -> Linked:
        """Link two records with a directed edge: a relation name and properties. find matches a question's words
        against relation names and property values, and then returns both records."""
        async with self.client(ctx) as client:
            edge_id = await client.link(from_record_id, to_record_id, relation, properties)
        return Linked(edge_id, from_record_id, to_record_id, relation)

    async def explain(self, *, question: Question, ctx: Context) -> dict[str, Any]:
        """Show how find reads a question: its terms, the words WordNet knows and the terms searched in full
        text, the lookups that run and whether it is degraded. What each lookup found (candidate counts, each
        row's rank in every list) is shown only to roles that read every lane, because it counts records of
        every lane."""
        async with self.client(ctx) as client:
            explanation = await client.explain(question)
            if await client.run(reads_every_lane()):
                return explanation
        shown = {key: explanation[key] for key in EXPLAIN_FOR_EVERY_ROLE if key in explanation}
        return shown | {"withheld": "candidate counts and list ranks: only for roles that read every lane"}

    async def health(self, *, ctx: Context) -> Health:
        """Whether search by meaning works now: ok, or degraded with reasons (for example the embedding model is
        down or does not match the stored vectors). Degraded is not an outage: find keeps answering from exact
        matches."""
        async with self.client(ctx) as client:
            return await client.health()

    async def store(
        self, client: AsyncClient, item: dict[str, Any], vector: list[float] | None
    ) -> tuple[int, int | None]:
        """Writes the record (with its vector when there is one): its id and thread position. A conversation turn
        without a position goes after the last turn stored, retried when another writer took that place."""
        item = item if vector is None else {**item, "vector": vector}
        appending = item["kind"] == "conversation" and "thread_position" not in item
        for _ in range(APPEND_ATTEMPTS if appending else 1):
            if appending:
                item["thread_position"] = await client.run(next_position(item["lane"], item.get("thread_id")))
            try:
                [record_id] = await client.put_records([item])
                return record_id, item.get("thread_position")
            except psycopg.errors.UniqueViolation as error:
                if error.diag.constraint_name != THREAD_POSITION_TAKEN:
                    raise
        raise ToolError(
            f"conversation {item['thread_id']!r} in lane {item['lane']!r} already has a turn at position "
            f"{item['thread_position']}: leave thread_position out to append after its last turn"
        )

    @asynccontextmanager
    async def client(self, ctx: Context) -> AsyncIterator[AsyncClient]:
        """The client, its connections acting as the caller's role meanwhile; database errors become tool errors.
        A connection is taken for each statement only, never held while the gateway embeds."""
        acting = acting_role.set(self.role_of(ctx))
        try:
            yield self.emem
        except psycopg.Error as error:
            raise ToolError(database_message(error)) from error
        finally:
            acting_role.reset(acting)

    def role_of(self, ctx: Context) -> str | None:
        request = ctx.request_context.request
        if request is None:  # stdio: the server's own role
            return self.role
        role = getattr(request.state, ROLE_STATE, None)
        if not isinstance(role, str):  # an HTTP request that passed no access check: refuse, never fall back
            raise ToolError("this request carries no authenticated database role")
        return role


def reads_every_lane() -> calls.Call[bool]:
    """Whether the current role reads every lane: a superuser, a BYPASSRLS role, or a member of the extension's
    owner."""
    return calls.Call(
        "select r.rolsuper or r.rolbypassrls or pg_catalog.pg_has_role(current_user, e.extowner, 'usage') as every"
        " from pg_catalog.pg_roles as r, pg_catalog.pg_extension as e"
        " where r.rolname = current_user and e.extname = 'emem'",
        (),
        lambda rows: bool(rows and rows[0]["every"]),
    )


def next_position(lane: str, thread_id: str | None) -> calls.Call[int]:
    return calls.Call(
        "select coalesce(max(thread_position) + 1, 0) as position from emem.records"
        " where lane_name = %s::text and kind = 'conversation' and thread_id = %s::text",
        (lane, thread_id),
        lambda rows: int(rows[0]["position"]),
    )


def recent_turns(lane: str, thread_id: str, first: int, last: int) -> calls.Call[list[dict[str, Any]]]:
    return calls.Call(
        "select record_id, thread_position, content from emem.records"
        " where lane_name = %s::text and kind = 'conversation' and thread_id = %s::text"
        " and thread_position between %s::integer and %s::integer order by thread_position",
        (lane, thread_id, first, last),
        lambda rows: rows,
    )


async def conversation_window(client: AsyncClient, lane: str, thread_id: str, position: int | None) -> int | None:
    """A window over the turns that run without a gap up to `position` (at most the size ingest uses), with the
    vector of their joined text as ingest writes it; None when there is no earlier turn or the gateway failed."""
    if position is None:
        return None
    turns = await client.run(recent_turns(lane, thread_id, position - CONVERSATION_WINDOW.size + 1, position))
    run: list[dict[str, Any]] = []
    for turn in reversed(turns):
        if turn["thread_position"] != position - len(run):
            break
        run.insert(0, turn)
    if len(run) < 2:
        return None
    try:
        [vector] = await client.embed(["\n".join(turn["content"] for turn in run)])
    except GatewayError:
        return None
    return await client.put_window([turn["record_id"] for turn in run], vector)


def database_message(error: psycopg.Error) -> str:
    """What the agent reads: the database's message and hint, except for failures of the server itself."""
    state = error.sqlstate or ""
    if isinstance(error, psycopg.OperationalError) and not state:  # no connection (PoolTimeout is one too)
        return "the database cannot be reached right now; try again later"
    if state[:2] in SERVER_FAILURE_CLASSES or not error.diag.message_primary:
        return f"internal database error (SQLSTATE {state or 'unknown'}); the server's log has the details"
    message = f"{error.diag.message_primary} (SQLSTATE {state})"
    return f"{message}\nhint: {error.diag.message_hint}" if error.diag.message_hint else message


def package_version() -> str:
    try:
        return version("emem-client")
    except PackageNotFoundError:
        return "unknown"


def create_server(tools: EmemTools) -> MCPServer:
    server: MCPServer = MCPServer("emem", instructions=INSTRUCTIONS, version=package_version(), log_level="WARNING")
    for tool, annotations in (
        (tools.find, READS),
        (tools.timeline, READS),
        (tools.remember, WRITES),
        (tools.link, WRITES),
        (tools.explain, READS),
        (tools.health, READS),
    ):
        server.add_tool(tool, annotations=annotations)
    return server


class RequireAccess:
    """ASGI middleware in front of the MCP endpoint: a Host (and Origin, when one is sent) of the allow-list, so a
    page in a browser cannot reach the server through DNS rebinding, and a bearer token of the tokens file, whose
    role the request then acts as."""

    def __init__(self, app: ASGIApp, tokens: AccessTokens, hosts: HostAllowList) -> None:
        self.app = app
        self.tokens = tokens
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if not self.hosts.allows(headers.get("host")) or (origin and not self.hosts.allows(urlsplit(origin).netloc)):
            await PlainTextResponse("this Host or Origin is not served here", status_code=421)(scope, receive, send)
            return
        role = self.tokens.role_for(bearer_token(headers.get("authorization")))
        if role is None:
            refusal = JSONResponse(
                {"error": "invalid_token", "error_description": "send Authorization: Bearer <a token of this server>"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="emem", error="invalid_token"'},
            )
            await refusal(scope, receive, send)
            return
        scope.setdefault("state", {})[ROLE_STATE] = role
        await self.app(scope, receive, send)


def create_http_app(tools: EmemTools, tokens: AccessTokens, hosts: HostAllowList) -> ASGIApp:
    """Streamable HTTP at /mcp, stateless: each request stands alone and acts as its own token's role."""
    app = create_server(tools).streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        # RequireAccess checks Host and Origin against the allow-list; the SDK's own check knows loopback names only.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return RequireAccess(app, tokens, hosts)


@asynccontextmanager
async def open_pool(conninfo: str, statement_timeout: float, max_size: int = 8) -> AsyncIterator[RolePool]:
    """A pool whose statements stop after the timeout and give dates in UTC."""

    async def configure(connection: psycopg.AsyncConnection[Any]) -> None:
        await connection.execute(f"set statement_timeout = {int(statement_timeout * 1000)}; set timezone = 'UTC'")

    async def reset_role(connection: psycopg.AsyncConnection[Any]) -> None:
        await connection.execute("reset role")

    pool = RolePool(
        conninfo,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True},
        configure=configure,
        reset=reset_role,
        check=AsyncConnectionPool.check_connection,
        open=False,
    )
    try:
        await pool.open(wait=True, timeout=POOL_WAIT_SECONDS)
    except PoolTimeout:
        raise psycopg.OperationalError(
            f"cannot connect to PostgreSQL within {POOL_WAIT_SECONDS:.0f} seconds: pass --dsn, or set EMEM_DSN "
            "or libpq's PG* variables"
        ) from None
    try:
        yield pool
    finally:
        await pool.close()


async def check_roles(pool: RolePool, roles: Iterable[str]) -> None:
    """Fails at start, not at the first call, when the server cannot act as one of `roles`."""
    for role in sorted(roles):
        acting = acting_role.set(role)
        try:
            async with pool.connection():
                pass
        finally:
            acting_role.reset(acting)


async def serve_stdio(
    conninfo: str, gateway: Gateway, *, role: str | None, lane: str, statement_timeout: float
) -> None:
    """Serves the tools on stdin and stdout, every call acting as `role` (None: the login role)."""
    async with open_pool(conninfo, statement_timeout) as pool:
        await check_roles(pool, [role] if role is not None else [])
        await create_server(EmemTools(pool, gateway, role, lane)).run_stdio_async()


async def serve_http(
    conninfo: str,
    gateway: Gateway,
    *,
    tokens: AccessTokens,
    hosts: HostAllowList,
    lane: str,
    statement_timeout: float,
    host: str,
    port: int,
) -> None:
    """Serves the tools over streamable HTTP at http://host:port/mcp until interrupted."""
    async with open_pool(conninfo, statement_timeout) as pool:
        await check_roles(pool, tokens.roles)
        app = create_http_app(EmemTools(pool, gateway, None, lane), tokens, hosts)
        await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info", access_log=False)).serve()
