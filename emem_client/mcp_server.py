"""`emem mcp`: emem's tools for agents over the Model Context Protocol, on stdio or streamable HTTP; a
thin front end on emem_client.service.

    emem mcp                                                     # stdio: as the DSN's role (or --role)
    emem mcp --transport http --tokens tokens.toml --port 8000   # streamable HTTP at /mcp

Seven tools: find, timeline, remember, link, explain, health and lanes (which lanes the caller reads
and writes, and its isolation). Each call acts as one database role (SET ROLE on a pooled
connection while it runs): on stdio the server's one role; over HTTP the role the request's bearer
token maps to in the tokens file of emem_client.access (the HTTP service's), and only from a Host
of its allow-list. Every argument has a type and bounds in its schema, and unknown arguments are
refused. What fails comes back as a tool error naming its situation (docs/clients.md), with the
database's message and hint; a database that is down fails a call within the pool timeout (2 s).
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar, cast
from urllib.parse import urlsplit

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from pydantic import ConfigDict, Field
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from emem_client import __version__
from emem_client.access import AccessTokens, HostAllowList, bearer_token
from emem_client.calls import assume_utc
from emem_client.gateways import Gateway
from emem_client.service import (
    MAX_PAGE,
    MAX_PAGE_SIZE,
    MAX_QUESTION_CHARS,
    Caller,
    CallerLanes,
    Limits,
    Remembered,
    Service,
    ServiceError,
    check_database,
    open_pool,
    warm_up,
)
from emem_client.types import FindPage, Health, RecordSummary
from emem_client.units import MAX_KEY_CHARS

# Where the HTTP access check leaves the caller's role, in the request's state.
ROLE_STATE = "emem_role"
MCP_PATH = "/mcp"
MAX_TAGS = 50
MAX_TAG_CHARS = 200  # what the database accepts for a tag
MAX_CONTENT_CHARS = 100_000
MAX_RELATION_CHARS = 200

INSTRUCTIONS = (
    "emem is a memory of records (notes, conversation turns, file chunks, entities) with tags and "
    "edges between them. `find` answers a question by meaning and by exact names, codes and figures "
    "at once; `timeline` lists records by date; `remember` stores a note or a conversation turn; "
    "`link` relates two records; `explain` shows how find read a question; `health` says whether "
    "search by meaning works right now; `lanes` tells you which lanes you read and write. You see "
    "only the lanes your role may read."
)
READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)

Page = Annotated[int, Field(ge=1, le=MAX_PAGE, description=f"Page number, from 1 to {MAX_PAGE}")]
PageSize = Annotated[int, Field(ge=1, le=MAX_PAGE_SIZE, description=f"Records per page, from 1 to {MAX_PAGE_SIZE}")]
Tags = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=MAX_TAG_CHARS)]],
    Field(max_length=MAX_TAGS, description="Labels, e.g. invoice, project apollo, customer:acme"),
]
Kind = Literal["note", "conversation", "file", "entity"]
Question = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUESTION_CHARS,
        description=f"What you want to know, in plain words (at most {MAX_QUESTION_CHARS} characters); names, "
        "codes and figures are matched exactly",
    ),
]
T = TypeVar("T")


@dataclass(frozen=True)
class TimelinePage:
    """Records by date between from_time and to_time (inclusive; None: that end is open), oldest first."""

    from_time: datetime | None
    to_time: datetime | None
    page: int
    page_size: int
    records: list[RecordSummary]


class EmemTools:
    """The tools, each one call of the service layer acting as the caller's role.

    `role` is the role of every call that comes without an HTTP request (stdio; None: the pool's
    own login role)."""

    def __init__(self, service: Service, role: str | None) -> None:
        self.service = service
        self.role = role

    async def find(self, *, question: Question, page: Page = 1, page_size: PageSize = 30, ctx: Context) -> FindPage:
        """Search the memory for a question: tags, edge properties, full text, record vectors and window vectors
        at once, merged into one ranked list (each row says which lookup placed it and which found it).

        Under the default lane isolation the totals count every lane, so a page can hold fewer rows than
        page_size (or none) when records lie in lanes your role cannot read: ask for the next page (the `lanes`
        tool says which isolation you are under). degraded=true means the embedding model was not usable
        (degraded_reason says why): the answer then comes from exact matches only."""
        return await self.call(ctx, lambda caller: self.service.find(caller, question, page, page_size))

    async def timeline(
        self,
        *,
        from_time: Annotated[
            datetime | None, Field(description="Start, ISO 8601 (UTC when it names no zone), inclusive; default: none")
        ] = None,
        to_time: Annotated[
            datetime | None, Field(description="End, ISO 8601 (UTC when it names no zone), inclusive; default: none")
        ] = None,
        kinds: Annotated[list[Kind] | None, Field(max_length=4, description="Only records of these kinds")] = None,
        tags: Annotated[Tags | None, Field(description="Only records carrying all of these tags")] = None,
        page: Page = 1,
        page_size: PageSize = 30,
        ctx: Context,
    ) -> TimelinePage:
        """List records by the time they occurred, oldest first, between two moments (either may be left out);
        optionally only some kinds and only records with all the given tags."""
        start = assume_utc(from_time) if from_time else None
        end = assume_utc(to_time) if to_time else None
        records = await self.call(
            ctx,
            lambda caller: self.service.timeline(
                caller, start, end, page, page_size, list(kinds) if kinds else None, tags
            ),
        )
        return TimelinePage(start, end, page, page_size, records)

    async def remember(
        self,
        *,
        content: Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="The text to remember")],
        kind: Annotated[
            Literal["note", "conversation"],
            Field(description="note, or conversation for one turn of a conversation (then give thread_id)"),
        ] = "note",
        tags: Annotated[Tags | None, Field(description="Labels, e.g. invoice, project apollo, customer:acme")] = None,
        lane: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=63,
                description="Lane to store it in; default: the lane your role writes (the `lanes` tool lists them)",
            ),
        ] = None,
        thread_id: Annotated[
            str | None,
            Field(min_length=1, max_length=MAX_KEY_CHARS, description="For a conversation turn: its conversation"),
        ] = None,
        thread_position: Annotated[
            int | None,
            Field(ge=0, le=2**31 - 1, description="For a conversation turn: its position from 0; default: next"),
        ] = None,
        occurred_at: Annotated[
            datetime | None, Field(description="When it happened, ISO 8601 (UTC when it names no zone); default now")
        ] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="Free-form JSON object, e.g. the speaker")] = None,
        ctx: Context,
    ) -> Remembered:
        """Store a note, or one turn of a conversation, with tags, in a lane your role writes. It is embedded
        right away when the embedding model is usable; otherwise it is stored without a vector (the answer says
        so and why) and find reaches it through its tags and words until a vector is written for it. A
        conversation turn with a vector also gets a window vector over the latest turns of its conversation."""
        item = {
            "kind": kind,
            "content": content,
            "lane": lane,
            "tags": list(tags or []),
            "thread_id": thread_id,
            "thread_position": thread_position,
            "occurred_at": assume_utc(occurred_at).isoformat() if occurred_at is not None else None,
            "metadata": metadata,
        }
        fields = {key: value for key, value in item.items() if value is not None}
        return await self.call(ctx, lambda caller: self.service.remember(caller, fields))

    async def link(
        self,
        *,
        from_record_id: Annotated[int, Field(ge=1, description="The record the edge starts from")],
        to_record_id: Annotated[int, Field(ge=1, description="The record the edge points to")],
        relation: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_RELATION_CHARS,
                description="What the link means, e.g. billed, about, follows",
            ),
        ],
        properties: Annotated[
            dict[str, Any] | None,
            Field(description='Facts of the link as a JSON object, e.g. {"invoice": "INV-2031", "amount": "1200 EUR"}'),
        ] = None,
        ctx: Context,
    ) -> dict[str, Any]:
        """Link two records with a directed edge: a relation name and properties. find matches a question's words
        against relation names and property values, and then returns both records."""
        edge_id = await self.call(
            ctx, lambda caller: self.service.link(caller, from_record_id, to_record_id, relation, properties)
        )
        return {
            "edge_id": edge_id,
            "from_record_id": from_record_id,
            "to_record_id": to_record_id,
            "relation": relation,
        }

    async def explain(
        self, *, question: Question, page: Page = 1, page_size: PageSize = 30, ctx: Context
    ) -> dict[str, Any]:
        """Show how find reads a question: its terms, the words WordNet knows and the terms searched in full
        text, the lookups that run and whether it is degraded. What each lookup found (candidate counts, each
        row's rank in every list) is shown only where it counts your lanes alone: to roles that read every lane,
        and under strict lane isolation."""
        return await self.call(ctx, lambda caller: self.service.explain(caller, question, page, page_size))

    async def health(self, *, ctx: Context) -> Health:
        """Whether search by meaning works now: ok, or degraded with reasons (for example the embedding model is
        down or does not match the stored vectors). Degraded is not an outage: find keeps answering from exact
        matches."""
        return await self.call(ctx, self.service.health)

    async def lanes(self, *, ctx: Context) -> CallerLanes:
        """Which lanes you read and write (your agent profile's), and the lane isolation your finds run under:
        `page_filter` (pages may be short and totals count every lane) or `strict` (only your lanes). remember
        writes into a lane you write."""
        return await self.call(ctx, self.service.lanes)

    async def call(self, ctx: Context, run: Callable[[Caller], Awaitable[T]]) -> T:
        """Runs one service call as the caller; its failure becomes a tool error naming the situation."""
        try:
            return await run(self.caller_of(ctx))
        except ServiceError as error:
            raise ToolError(f"{error.situation.name}: {error.text()}") from error

    def caller_of(self, ctx: Context) -> Caller:
        request = ctx.request_context.request
        if request is None:  # stdio: the server's own role
            return Caller(self.role)
        role = getattr(request.state, ROLE_STATE, None)
        if not isinstance(role, str):  # an HTTP request that passed no access check: refuse, never fall back
            raise ToolError("unauthenticated: this request carries no authenticated database role")
        return Caller(role)


def strict_tool(fn: Callable[..., Any], annotations: ToolAnnotations) -> Tool:
    """The SDK's tool for `fn`, refusing arguments it does not declare (an LLM's `limit` or `k` is an error,
    not silently ignored): its argument model forbids extra fields, and its schema says so."""
    tool = Tool.from_function(fn, annotations=annotations)
    base = tool.fn_metadata.arg_model
    strict = cast(
        type[ArgModelBase],
        type(
            base.__name__,
            (base,),
            {"model_config": ConfigDict(extra="forbid", arbitrary_types_allowed=True), "__module__": base.__module__},
        ),
    )
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)
    return tool


def create_server(tools: EmemTools) -> MCPServer:
    return MCPServer(
        "emem",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
        tools=[
            strict_tool(function, annotations)
            for function, annotations in (
                (tools.find, READS),
                (tools.timeline, READS),
                (tools.remember, WRITES),
                (tools.link, WRITES),
                (tools.explain, READS),
                (tools.health, READS),
                (tools.lanes, READS),
            )
        ],
    )


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


async def serve_stdio(conninfo: str, gateway: Gateway, *, role: str | None, lane: str | None, limits: Limits) -> None:
    """Serves the tools on stdin and stdout, every call acting as `role` (None: the login role). Like emem
    serve, it refuses to start (StartupError) on a database it cannot use."""
    check_database(conninfo, [role] if role is not None else [])
    await warm_up(gateway)
    async with open_pool(conninfo, limits) as pool:
        await create_server(EmemTools(Service(pool, gateway, limits, lane), role)).run_stdio_async()


async def serve_http(
    conninfo: str,
    gateway: Gateway,
    *,
    tokens: AccessTokens,
    hosts: HostAllowList,
    lane: str | None,
    limits: Limits,
    host: str,
    port: int,
) -> None:
    """Serves the tools over streamable HTTP at http://host:port/mcp until interrupted."""
    check_database(conninfo, tokens.roles)
    await warm_up(gateway)
    async with open_pool(conninfo, limits) as pool:
        app = create_http_app(EmemTools(Service(pool, gateway, limits, lane), None), tokens, hosts)
        await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info", access_log=False)).serve()
