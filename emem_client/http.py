"""The HTTP service: find, explain, the timeline, health, the caller's lanes, and remembering and
linking records: a thin front end on emem_client.service.

    app = create_app(ServiceSettings(conninfo, tokens_file=Path("tokens.toml")), gateway)  # any ASGI server
    uvicorn --factory emem_client.http:app_from_environment                                # settings from EMEM_*
    emem serve --tokens tokens.toml                                                        # the command line

Every request acts as a database role: the one its bearer token maps to (emem_client.access),
through `SET ROLE` on a pooled connection of the service's login role, so the database's lanes
and row-level security decide what it reads and writes. No token, or an unknown one: 401. Only
a service on loopback started with `no_auth` answers without tokens, as its login role. A Host
header off the allow-list gets 421 (DNS rebinding).

Statuses follow the service layer's situations (emem_client.service.SITUATIONS, docs/clients.md),
and every error has one body, ErrorBody. The OpenAPI description, with the package's version,
is at /openapi.json; /docs (Swagger UI) and /redoc serve their assets from the package, no CDN.
"""

import errno
import json
import logging
import logging.config
import math
import os
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from emem_client import __version__
from emem_client.access import AccessConfigError, AccessTokens, HostAllowList, bearer_token, is_loopback
from emem_client.calls import assume_utc
from emem_client.gateway_options import gateway_from_environment
from emem_client.gateways import EmbeddedGateway, Gateway
from emem_client.service import (
    MAX_PAGE,
    MAX_PAGE_SIZE,
    SITUATIONS,
    Caller,
    CallerLanes,
    Limits,
    Remembered,
    Service,
    ServiceError,
    StartupError,
    check_database,
    open_pool,
    warm_up,
)
from emem_client.service_settings import ServiceSettings
from emem_client.types import FindPage, Health, RecordSummary

logger = logging.getLogger("emem.http")

# Nesting deeper than this in metadata or edge properties is refused before it reaches the database.
MAX_JSON_DEPTH = 64
AUTHENTICATE = 'Bearer realm="emem"'


class ErrorBody(BaseModel):
    """Every error the service sends: what happened, its situation, and the database's hint and SQLSTATE."""

    detail: str
    situation: str = Field(description="one of the service layer's situations (docs/clients.md)")
    hint: str | None = None
    sqlstate: str | None = None
    problems: list[dict[str, str]] | None = Field(
        default=None, description="bad_input from the request's own checks: each parameter and what it accepts"
    )


def error_response(error: ServiceError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    status = error.situation.http_status or 500
    if status == 503:
        headers = {**(headers or {}), "Retry-After": "1"}
    body = {key: value for key, value in error.body().items() if value is not None}
    return JSONResponse(body, status_code=status, headers=dict(headers) if headers else None)


# Declared on every route: the errors any request may meet (the rest per route).
COMMON_ERRORS = (
    "bad_input",
    "unauthenticated",
    "too_large",
    "host_not_allowed",
    "unavailable",
    "extension_missing",
    "server_failure",
)


def responses(*situations: str) -> dict[int | str, dict[str, Any]]:
    declared: dict[int | str, dict[str, Any]] = {}
    for name in (*COMMON_ERRORS, *situations):
        situation = SITUATIONS[name]
        assert situation.http_status is not None
        entry = declared.setdefault(situation.http_status, {"model": ErrorBody, "description": ""})
        entry["description"] = "; ".join(filter(None, [entry["description"], f"{name}: {situation.meaning}"]))
    return declared


class HostCheck:
    """ASGI middleware: 421 for a request whose Host header is not on the allow-list."""

    def __init__(self, app: ASGIApp, hosts: HostAllowList) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.hosts.allows(_header(scope, b"host")):
            detail = "the Host header names no host this service answers to (its allow-list: --allowed-host)"
            await error_response(ServiceError("host_not_allowed", detail))(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: 413 for a request body over `max_bytes`, declared or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.detail = f"the request body is larger than this service accepts ({max_bytes} bytes)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and (not (declared.isascii() and declared.isdigit()) or int(declared) > self.max_bytes):
            await error_response(ServiceError("too_large", self.detail))(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:  # FastAPI lets an HTTPException out of reading the body
                raise HTTPException(413, self.detail)
            return message

        await self.app(scope, counting_receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


# ---- parameters and bodies ----------------------------------------------------------------------


def no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("must not contain NUL characters (PostgreSQL text cannot hold them)")
    return text


def iso_moment(value: Any) -> datetime:
    """An ISO 8601 date or time (text); UTC when it names no zone."""
    example = "(e.g. 2024-03-01 or 2024-03-01T09:00:00Z)"
    if not isinstance(value, str):
        raise ValueError(f"must be an ISO 8601 date or time {example}")
    no_nul(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value[:40]!r} is not an ISO 8601 date or time {example}") from None
    return assume_utc(moment)


def plain_json(value: dict[str, Any]) -> dict[str, Any]:
    """`value` if it nests at most MAX_JSON_DEPTH deep and holds no NUL and no NaN or infinity."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"nests deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, dict):
            pending.extend((key, depth) for key in item)
            pending.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            pending.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            no_nul(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError("must not hold NaN or infinity (JSON has no such numbers)")
    return value


Text = Annotated[str, AfterValidator(no_nul)]
Moment = Annotated[datetime, BeforeValidator(iso_moment)]
JsonObject = Annotated[dict[str, Any], AfterValidator(plain_json)]
PageNumber = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"page number, from 1 to {MAX_PAGE}")]
PageSize = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description=f"rows per page, from 1 to {MAX_PAGE_SIZE}")]


class RecordIn(BaseModel):
    """A record to remember; the database checks each field and says what it accepts."""

    model_config = ConfigDict(extra="forbid")

    kind: Text = Field(description="note, conversation, file or entity")
    content: Text
    lane: Text | None = Field(default=None, description="default: the lane the role writes (when it writes one)")
    tags: list[Text] = Field(default_factory=list)
    authority: float | None = Field(default=None, allow_inf_nan=False, description="0 to 1 (default 0.5)")
    occurred_at: Moment | None = Field(default=None, description="ISO 8601; UTC without a zone; default now")
    thread_id: Text | None = Field(default=None, description="conversation or file records: the thread")
    thread_position: int | None = Field(default=None, description="conversation or file records: from 0")
    metadata: JsonObject | None = None
    source_key: Text | None = Field(
        default=None, description="makes the write idempotent: a lane holds one record per source_key"
    )


class LinkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    from_record_id: int
    to_record_id: int
    relation: Text
    properties: JsonObject = Field(default_factory=dict)


class EdgeWritten(BaseModel):
    edge_id: int


class RecordWritten(BaseModel):
    record_id: int
    created: bool = Field(description="false when the lane held a record of this source_key already")
    lane: str
    embedded: bool = Field(description="whether the record was stored with a vector of the active space")
    embedding_problem: str | None = Field(description="why it has no vector (e.g. gateway_down), when it has none")
    window_id: int | None = Field(default=None, description="a conversation turn's window over the latest turns")


# ---- the app --------------------------------------------------------------------------------------


def limits_of(settings: ServiceSettings) -> Limits:
    return Limits(settings.statement_timeout, settings.pool_timeout, settings.pool_size, settings.max_question_chars)


def create_app(settings: ServiceSettings, gateway: Gateway | None = None) -> FastAPI:
    """The service for any ASGI server; it checks the database and opens its pool when the server
    starts (the gateway defaults to the embedded model)."""
    return build_app(settings, gateway or EmbeddedGateway(), None, check_first=True)


def app_from_environment() -> FastAPI:
    """create_app with ServiceSettings.from_environment() and the gateway EMEM_GATEWAY names:
    `embedded` (default) or `openai` (OPENAI_BASE_URL, EMEM_OPENAI_MODEL, EMEM_OPENAI_API_KEY_ENV).
    For `uvicorn --factory emem_client.http:app_from_environment`."""
    return create_app(ServiceSettings.from_environment(), gateway_from_environment(os.environ))


def load_tokens(settings: ServiceSettings) -> AccessTokens | None:
    if settings.tokens_file is None:
        return None
    try:
        return AccessTokens.load(settings.tokens_file)
    except AccessConfigError as error:
        raise StartupError(str(error)) from None


def build_app(
    settings: ServiceSettings, gateway: Gateway, tokens: AccessTokens | None, check_first: bool = False
) -> FastAPI:
    """The app; when the server starts it opens the pool (after checking the database and loading the
    tokens, with `check_first`: emem serve did both before it listened) and closes it when it stops."""
    services: list[Service] = []
    access: list[AccessTokens | None] = [tokens]

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if check_first:
            access[0] = load_tokens(settings)
            check_database(settings.conninfo, access[0].roles if access[0] else ())
        await warm_up(gateway)
        async with open_pool(settings.conninfo, limits_of(settings)) as pool:
            services.append(Service(pool, gateway, limits_of(settings)))
            try:
                yield
            finally:
                services.pop()

    app = FastAPIOffline(
        title="emem",
        version=__version__,
        lifespan=lifespan,
        description="Hybrid memory retrieval for AI agents: four lookups (tags and edge properties, full text, "
        "record vectors, window vectors) merged 40:35:20:5 into one ranked, paged list. Every request acts as "
        "the database role its bearer token maps to.",
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(HostCheck, hosts=settings.host_allow_list())
    add_routes(app, settings, lambda: services[0], authenticator(settings, access))
    add_error_handlers(app)
    return app


def authenticator(settings: ServiceSettings, access: list[AccessTokens | None]) -> Callable[..., Caller]:
    bearer = HTTPBearer(auto_error=False, description="a token of the service's tokens file")

    def authenticate(request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]) -> Caller:
        if settings.no_auth:
            server = request.scope.get("server") or ("", 0)
            if not is_loopback(str(server[0])):
                raise ServiceError("forbidden", "this service runs without authentication and answers on loopback only")
            return Caller(None)
        tokens = access[0]
        token = bearer_token(request.headers.get("authorization"))
        role = tokens.role_for(token) if tokens else None
        if role is None:
            challenge = AUTHENTICATE if token is None else f'{AUTHENTICATE}, error="invalid_token"'
            detail = "a bearer token is required" if token is None else "the bearer token is not valid"
            raise HTTPException(401, detail, headers={"WWW-Authenticate": challenge})
        return Caller(role)

    return authenticate


def add_routes(
    app: FastAPI, settings: ServiceSettings, service: Callable[[], Service], authenticate: Callable[..., Caller]
) -> None:
    # Length first, so that its message is about characters.
    Question = Annotated[
        str,
        Query(min_length=1, max_length=settings.max_question_chars, description="the question"),
        AfterValidator(no_nul),
    ]
    Authenticated = Annotated[Caller, Depends(authenticate)]

    @app.get("/find", response_model=FindPage, summary="Answer a question with the four lookups", responses=responses())
    async def find(caller: Authenticated, q: Question, page: PageNumber = 1, page_size: PageSize = 30) -> FindPage:
        return await service().find(caller, q, page, page_size)

    @app.get(
        "/explain",
        summary="How find reads a question and what each lookup found (counts across lanes for the owner only)",
        responses=responses(),
    )
    async def explain(
        caller: Authenticated, q: Question, page: PageNumber = 1, page_size: PageSize = 30
    ) -> dict[str, Any]:
        return await service().explain(caller, q, page, page_size)

    @app.get(
        "/timeline",
        response_model=list[RecordSummary],
        summary="Records by date between two times",
        responses=responses(),
    )
    async def timeline(
        caller: Authenticated,
        from_time: Annotated[Moment, Query(alias="from", description="ISO 8601, inclusive; UTC without a zone")],
        to_time: Annotated[
            Moment | None, Query(alias="to", description="ISO 8601, inclusive; UTC without a zone; default now")
        ] = None,
        page: PageNumber = 1,
        page_size: PageSize = 30,
        kind: Annotated[list[Text] | None, Query(description="only these kinds (repeatable)")] = None,
        tag: Annotated[list[Text] | None, Query(description="only records with all these tags (repeatable)")] = None,
    ) -> list[RecordSummary]:
        return await service().timeline(caller, from_time, to_time or datetime.now(UTC), page, page_size, kind, tag)

    @app.get(
        "/health",
        response_model=Health,
        summary="ok, or degraded with reasons (200 either way: find still answers)",
        responses=responses(),
    )
    async def health(caller: Authenticated) -> Health:
        return await service().health(caller)

    @app.get(
        "/lanes",
        response_model=CallerLanes,
        summary="The lanes this caller reads and writes, and the isolation its finds run under",
        responses=responses(),
    )
    async def lanes(caller: Authenticated) -> CallerLanes:
        return await service().lanes(caller)

    @app.post(
        "/records",
        response_model=RecordWritten,
        status_code=201,
        summary="Remember a record, with a vector when the gateway can give one",
        responses=responses("forbidden", "duplicate"),
    )
    async def remember_record(caller: Authenticated, record: RecordIn) -> RecordWritten:
        remembered: Remembered = await service().remember(caller, record.model_dump(mode="json", exclude_none=True))
        return RecordWritten(
            record_id=remembered.record_id,
            created=remembered.created,
            lane=remembered.lane,
            embedded=remembered.embedded,
            embedding_problem=remembered.embedding_problem,
            window_id=remembered.window_id,
        )

    @app.post(
        "/edges",
        response_model=EdgeWritten,
        status_code=201,
        summary="Link two records",
        responses=responses("forbidden", "duplicate"),
    )
    async def link_records(caller: Authenticated, link: LinkIn) -> EdgeWritten:
        return EdgeWritten(
            edge_id=await service().link(caller, link.from_record_id, link.to_record_id, link.relation, link.properties)
        )


SITUATION_OF_STATUS = {401: "unauthenticated", 403: "forbidden", 404: "bad_input", 405: "bad_input", 413: "too_large"}


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, error: RequestValidationError) -> JSONResponse:
        problems = [
            {
                "parameter": ".".join(part for part in problem["loc"][1:] if isinstance(part, str))
                or str(problem["loc"][0]),
                "message": str(problem["msg"]).removeprefix("Value error, "),
            }
            for problem in error.errors()
        ]
        detail = "; ".join(f"{problem['parameter']}: {problem['message']}" for problem in problems)
        response = error_response(ServiceError("bad_input", detail))
        return JSONResponse({**body_of(response), "problems": problems}, status_code=400)

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, error: ServiceError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        situation = SITUATION_OF_STATUS.get(error.status_code, "server_failure")
        response = error_response(ServiceError(situation, str(error.detail)), error.headers)
        response.status_code = error.status_code
        return response


def body_of(response: JSONResponse) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(bytes(response.body))
    return answer


# ---- emem serve ---------------------------------------------------------------------------------


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on host:port; StartupError when the port is taken."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family, backlog=2048)
    except socket.gaierror as error:
        raise StartupError(f"cannot listen on {host}: {error.strerror}") from None
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise StartupError(
                f"port {port} on {host} is in use by another process: stop it, or choose another --port"
            ) from None
        raise StartupError(f"cannot listen on {host} port {port}: {error.strerror}") from None


# uvicorn's logging, with emem's messages in the same format.
LOG_CONFIG = {
    **uvicorn.config.LOGGING_CONFIG,
    "loggers": {
        **uvicorn.config.LOGGING_CONFIG["loggers"],
        "emem": {"handlers": ["default"], "level": "INFO", "propagate": False},
    },
}


def serve(settings: ServiceSettings, gateway: Gateway, port: int) -> None:
    """Runs the service with uvicorn until interrupted. Start-up problems (the port in use, the
    database unreachable or without emem, the tokens file) raise StartupError before it
    listens for requests."""
    logging.config.dictConfig(LOG_CONFIG)
    listener = listening_socket(settings.bind_host, port)
    with listener:
        tokens = load_tokens(settings)
        check_database(settings.conninfo, tokens.roles if tokens else ())
        config = uvicorn.Config(build_app(settings, gateway, tokens), lifespan="on", log_config=LOG_CONFIG)
        address = f"[{settings.bind_host}]" if ":" in settings.bind_host else settings.bind_host
        logger.info("emem serves on http://%s:%d (OpenAPI at /docs)", address, port)
        uvicorn.Server(config).run(sockets=[listener])
