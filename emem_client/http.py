"""The HTTP service: find, explain, the timeline, health, and remembering and linking records.

    app = create_app(ServiceSettings(conninfo, tokens_file=Path("tokens.toml")), gateway)  # any ASGI server
    uvicorn --factory emem_client.http:app_from_environment                                # settings from EMEM_*
    emem serve --tokens tokens.toml                                                        # the command line

Every request acts as a database role: the one its bearer token maps to (emem_client.access),
through `SET ROLE` on a pooled connection of the service's login role, so the database's lanes
and row-level security decide what it reads and writes. No token, or an unknown one: 401. Only
a service on loopback started with `no_auth` answers without tokens, as its login role. A Host
header off the allow-list gets 421 (DNS rebinding).

Each statement runs under a statement timeout; questions and bodies have size limits; a bad
parameter is 400 saying what is accepted. Database errors keep their meaning: bad input (SQLSTATE
classes 22 and 23) is 400 (409 for a duplicate), a lane the role may not read or write (42501)
403, a timeout, a busy pool or an unreachable database 503. The OpenAPI description, with the
package's version, is at /openapi.json (and /docs).
"""

import contextvars
import errno
import logging
import logging.config
import math
import os
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

import psycopg
import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from emem_client import calls
from emem_client.access import AccessConfigError, AccessTokens, HostAllowList, bearer_token, is_loopback
from emem_client.cli import OPENAI_DEFAULT_MODEL, OPENAI_DEFAULT_URL
from emem_client.client import Client
from emem_client.gateways import EmbeddedGateway, Gateway, GatewayError, OpenAIGateway
from emem_client.ingest import assume_utc
from emem_client.service_settings import ServiceSettings
from emem_client.types import FindPage, Health, RecordSummary

logger = logging.getLogger("emem.http")

CONNECT_TIMEOUT_SECONDS = 10
# Nesting deeper than this in metadata or edge properties is refused before it reaches the database.
MAX_JSON_DEPTH = 64
LARGEST_INTEGER = 2**31 - 1  # PostgreSQL's integer; the database says which part of it is accepted
AUTHENTICATE = 'Bearer realm="emem"'


class ServiceStartupError(Exception):
    """The service cannot start; the message says what to change."""


# ---- the database side: a pool whose connections act as the caller's role ---------------------------


class RolePool(ConnectionPool):
    """A pool that lends connections only within a request (`Caller.acting`), acting as the
    caller's role: SET ROLE when lent, RESET ROLE when returned (a connection that cannot be
    reset is closed, never lent again)."""

    def getconn(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        caller = current_caller.get()
        if caller is None:  # fail closed: no statement runs as the login role by omission
            raise RuntimeError("the service's pool lends connections only within a request's Caller.acting()")
        connection = super().getconn(timeout)
        if caller.role is not None:
            try:
                connection.execute(sql.SQL("set role {}").format(sql.Identifier(caller.role)))
            except BaseException:
                self.putconn(connection)
                raise
        return connection


def configure_session(statement_timeout: float, connection: psycopg.Connection[Any]) -> None:
    """Every statement of the service's sessions stops after `statement_timeout` seconds; dates
    come back in UTC whatever the database's time zone."""
    connection.execute(
        "select pg_catalog.set_config('statement_timeout', %s, false), pg_catalog.set_config('timezone', 'UTC', false)",
        (f"{max(1, round(statement_timeout * 1000))}ms",),
    )


def reset_role(connection: psycopg.Connection[Any]) -> None:
    connection.execute("reset role")


@dataclass
class Backend:
    """The opened side of the service: its pool, the client on it, and the tokens."""

    pool: RolePool
    client: Client
    tokens: AccessTokens | None

    @classmethod
    def open(cls, settings: ServiceSettings, gateway: Gateway) -> "Backend":
        """Checks the database (reachable, has emem, the service may act as every token's role),
        then opens the pool; ServiceStartupError says what is wrong."""
        tokens = load_tokens(settings)
        check_database(settings.conninfo, tokens.roles if tokens else frozenset())
        warm_up(gateway)
        pool = RolePool(
            settings.conninfo,
            min_size=1,
            max_size=settings.pool_size,
            timeout=settings.pool_timeout,
            kwargs={"autocommit": True},
            configure=lambda connection: configure_session(settings.statement_timeout, connection),
            reset=reset_role,
            check=ConnectionPool.check_connection,  # a database restart costs no failed request
            name="emem-http",
            open=False,
        )
        try:
            pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
        except PoolTimeout:
            pool.close()
            raise ServiceStartupError(
                f"the connection pool could not connect within {CONNECT_TIMEOUT_SECONDS} seconds"
            ) from None
        return cls(pool, Client(pool, gateway), tokens)

    def close(self) -> None:
        self.pool.close()


def warm_up(gateway: Gateway) -> None:
    """Loads the gateway's model before the first request; a gateway that is down is no reason not
    to start (find answers degraded meanwhile)."""
    try:
        declaration = gateway.declaration()
    except GatewayError as error:
        logger.warning("the embedding gateway is not usable (%s): finds answer degraded until it is", error)
        return
    logger.info("embedding gateway: %s (%d dimensions)", declaration.model_name, declaration.dimension)


def load_tokens(settings: ServiceSettings) -> AccessTokens | None:
    if settings.tokens_file is None:
        return None
    try:
        return AccessTokens.load(settings.tokens_file)
    except AccessConfigError as error:
        raise ServiceStartupError(str(error)) from None


def check_database(conninfo: str, roles: frozenset[str]) -> None:
    """One connection: the database is reachable, holds the extension, and the login role may act
    as every role of the tokens file."""
    try:
        connection = psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
    except psycopg.OperationalError as error:
        raise ServiceStartupError(
            f"cannot connect to PostgreSQL: {str(error).strip()}\n"
            "Pass --dsn, or set EMEM_DSN or libpq's PG* variables (PGHOST, PGPORT, PGUSER, PGDATABASE)."
        ) from None
    with connection:
        database, login_role, has_emem = connection.execute(
            "select current_database(), session_user,"
            " exists (select from pg_catalog.pg_extension where extname = 'emem')"
        ).fetchone() or ("?", "?", False)
        if not has_emem:
            raise ServiceStartupError(
                f'database "{database}" does not have the emem extension: connect to it as its owner and run '
                "CREATE EXTENSION emem CASCADE"
            )
        for role in sorted(roles):
            try:
                connection.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
                connection.execute("reset role")
            except psycopg.Error as error:
                raise ServiceStartupError(
                    f"the tokens file maps a token to role {role!r}, which the service's login role "
                    f"{login_role!r} cannot act as ({error.diag.message_primary}): create the role, or "
                    f"GRANT {sql.Identifier(role).as_string(connection)} TO "
                    f"{sql.Identifier(login_role).as_string(connection)}"
                ) from None


# ---- requests: who calls, from where, how much ------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who a request acts as: a role, or None for the service's login role (no_auth)."""

    role: str | None

    @contextmanager
    def acting(self) -> Iterator[None]:
        """Within it, the service's pool lends connections that act as this caller's role."""
        token = current_caller.set(self)
        try:
            yield
        finally:
            current_caller.reset(token)


current_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("emem_caller", default=None)


class HostCheck:
    """ASGI middleware: 421 for a request whose Host header is not on the allow-list."""

    def __init__(self, app: ASGIApp, hosts: HostAllowList) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.hosts.allows(_header(scope, b"host")):
            detail = "the Host header names no host this service answers to (its allow-list: --allowed-host)"
            await JSONResponse({"detail": detail}, status_code=421)(scope, receive, send)
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
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await JSONResponse({"detail": self.detail}, status_code=413)(scope, receive, send)
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
PageNumber = Annotated[int, Query(ge=1, le=LARGEST_INTEGER, description="page number, from 1")]
PageSize = Annotated[int, Query(ge=1, le=LARGEST_INTEGER, description="rows per page (the database accepts 1 to 1000)")]


class RecordIn(BaseModel):
    """A record to remember; the database checks each field and says what it accepts."""

    model_config = ConfigDict(extra="forbid")

    kind: Text = Field(description="note, conversation, file or entity")
    content: Text
    lane: Text
    tags: list[Text] = Field(default_factory=list)
    authority: float | None = Field(default=None, allow_inf_nan=False, description="0 to 1 (default 0.5)")
    occurred_at: Moment | None = Field(default=None, description="ISO 8601; UTC without a zone; default now")
    thread_id: Text | None = Field(default=None, description="conversation or file records: the thread")
    thread_position: int | None = Field(default=None, description="conversation or file records: from 0")
    metadata: JsonObject | None = None
    source_key: Text | None = Field(
        default=None, description="makes the write idempotent: a lane holds one record per source_key"
    )


class RecordWritten(BaseModel):
    record_id: int
    created: bool = Field(description="false when the lane held a record of this source_key already")
    embedded: bool = Field(description="whether the record was stored with a vector of the active space")
    embedding_problem: str | None = Field(description="why it has no vector (e.g. gateway_down), when it has none")


class LinkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    from_record_id: int
    to_record_id: int
    relation: Text
    properties: JsonObject = Field(default_factory=dict)


class EdgeWritten(BaseModel):
    edge_id: int


def remember(item: dict[str, Any]) -> calls.Call[tuple[int, bool]]:
    return calls.Call(
        "select record_id, created from emem.put_records(%s::jsonb)",
        (Jsonb([item]),),
        lambda rows: (int(rows[0]["record_id"]), bool(rows[0]["created"])),
    )


# Explain shows every lookup's counts and ranks across lanes: only for roles that read every lane.
READS_EVERY_LANE = calls.Call(
    "select r.rolsuper or r.rolbypassrls or pg_catalog.pg_has_role(current_user, e.extowner, 'usage') as answer"
    " from pg_catalog.pg_roles as r, pg_catalog.pg_extension as e"
    " where r.rolname = current_user and e.extname = 'emem'",
    (),
    lambda rows: bool(rows and rows[0]["answer"]),
)


# ---- the app --------------------------------------------------------------------------------------


def package_version() -> str:
    try:
        return version("emem-client")
    except PackageNotFoundError:
        return "unknown"


def create_app(settings: ServiceSettings, gateway: Gateway | None = None) -> FastAPI:
    """The service for any ASGI server; it checks the database and opens its pool when the server
    starts (the gateway defaults to the embedded model)."""
    return build_app(settings, lambda: Backend.open(settings, gateway or EmbeddedGateway()))


def app_from_environment() -> FastAPI:
    """create_app with ServiceSettings.from_environment() and the gateway EMEM_GATEWAY names:
    `embedded` (default) or `openai` (OPENAI_BASE_URL, EMEM_OPENAI_MODEL, EMEM_OPENAI_API_KEY_ENV).
    For `uvicorn --factory emem_client.http:app_from_environment`."""
    return create_app(ServiceSettings.from_environment(), gateway_from_environment(os.environ))


def gateway_from_environment(environ: Mapping[str, str]) -> Gateway:
    kind = environ.get("EMEM_GATEWAY", "embedded")
    if kind == "embedded":
        return EmbeddedGateway()
    if kind == "openai":
        return OpenAIGateway(
            environ.get("OPENAI_BASE_URL", OPENAI_DEFAULT_URL),
            environ.get("EMEM_OPENAI_MODEL", OPENAI_DEFAULT_MODEL),
            api_key_env=environ.get("EMEM_OPENAI_API_KEY_ENV", "OPENAI_API_KEY"),
        )
    raise ValueError(f"EMEM_GATEWAY={kind!r} is not a gateway; accepted: embedded, openai")


def build_app(settings: ServiceSettings, open_backend: Callable[[], Backend]) -> FastAPI:
    """The app on the backend `open_backend` gives when the server starts (closed when it stops)."""
    backends: list[Backend] = []

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        backends.append(open_backend())
        try:
            yield
        finally:
            backends.pop().close()

    app = FastAPI(
        title="emem",
        version=package_version(),
        lifespan=lifespan,
        description="Hybrid memory retrieval for AI agents: four lookups (tags and edge properties, full text, "
        "record vectors, window vectors) merged 40:35:20:5 into one ranked, paged list. Every request acts as "
        "the database role its bearer token maps to.",
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(HostCheck, hosts=settings.host_allow_list())
    authenticate = authenticator(settings, backends)
    add_routes(app, settings, lambda: backends[0].client, authenticate)
    add_error_handlers(app, settings)
    return app


def authenticator(settings: ServiceSettings, backends: list[Backend]) -> Callable[..., Caller]:
    bearer = HTTPBearer(auto_error=False, description="a token of the service's tokens file")

    def authenticate(request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]) -> Caller:
        if settings.no_auth:
            server = request.scope.get("server") or ("", 0)
            if not is_loopback(str(server[0])):
                raise HTTPException(403, "this service runs without authentication and answers on loopback only")
            return Caller(None)
        tokens = backends[0].tokens
        token = bearer_token(request.headers.get("authorization"))
        role = tokens.role_for(token) if tokens else None
        if role is None:
            challenge = AUTHENTICATE if token is None else f'{AUTHENTICATE}, error="invalid_token"'
            detail = "a bearer token is required" if token is None else "the bearer token is not valid"
            raise HTTPException(401, detail, headers={"WWW-Authenticate": challenge})
        return Caller(role)

    return authenticate


def add_routes(
    app: FastAPI, settings: ServiceSettings, client: Callable[[], Client], authenticate: Callable[..., Caller]
) -> None:
    # Length first, so that its message is about characters.
    Question = Annotated[
        str,
        Query(min_length=1, max_length=settings.max_question_chars, description="the question"),
        AfterValidator(no_nul),
    ]
    Authenticated = Annotated[Caller, Depends(authenticate)]

    @app.get("/find", response_model=FindPage, summary="Answer a question with the four lookups")
    def find(caller: Authenticated, q: Question, page: PageNumber = 1, page_size: PageSize = 30) -> FindPage:
        with caller.acting():
            return client().find(q, page, page_size)

    @app.get(
        "/explain",
        summary="How find reads a question and what each lookup found (roles that read every lane only)",
        responses={403: {"description": "the role does not read every lane"}},
    )
    def explain(caller: Authenticated, q: Question) -> dict[str, Any]:
        with caller.acting():
            if not client().run(READS_EVERY_LANE):
                raise HTTPException(
                    403, "explain shows counts across every lane: only for the extension's owner or BYPASSRLS roles"
                )
            return client().explain(q)

    @app.get("/timeline", response_model=list[RecordSummary], summary="Records by date between two times")
    def timeline(
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
        with caller.acting():
            return client().timeline(from_time, to_time or datetime.now(UTC), page, page_size, kind, tag)

    @app.get("/health", response_model=Health, summary="ok, or degraded with reasons (find still answers)")
    def health(caller: Authenticated) -> Health:
        with caller.acting():
            return client().health()

    @app.post(
        "/records",
        response_model=RecordWritten,
        status_code=201,
        summary="Remember a record, with a vector when the gateway can give one",
    )
    def remember_record(caller: Authenticated, record: RecordIn) -> RecordWritten:
        item = record.model_dump(mode="json", exclude_none=True)
        with caller.acting():
            # The check find makes: a vector only from a gateway whose model is the active space's.
            vector, problem = client().vector_for(record.content)
            record_id, created = client().run(remember(item | ({"vector": vector} if vector else {})))
        return RecordWritten(
            record_id=record_id,
            created=created,
            embedded=vector is not None,
            embedding_problem=problem.reason if problem else None,
        )

    @app.post("/edges", response_model=EdgeWritten, status_code=201, summary="Link two records")
    def link_records(caller: Authenticated, link: LinkIn) -> EdgeWritten:
        with caller.acting():
            edge_id = client().link(link.from_record_id, link.to_record_id, link.relation, link.properties)
        return EdgeWritten(edge_id=edge_id)


def add_error_handlers(app: FastAPI, settings: ServiceSettings) -> None:
    @app.exception_handler(RequestValidationError)
    def bad_request(_: Request, error: RequestValidationError) -> JSONResponse:
        problems = [
            {
                "parameter": ".".join(part for part in problem["loc"][1:] if isinstance(part, str))
                or problem["loc"][0],
                "message": str(problem["msg"]).removeprefix("Value error, "),
            }
            for problem in error.errors()
        ]
        detail = "; ".join(f"{problem['parameter']}: {problem['message']}" for problem in problems)
        return JSONResponse({"detail": detail, "problems": problems}, status_code=400)

    @app.exception_handler(PoolTimeout)
    def busy(_: Request, error: PoolTimeout) -> JSONResponse:
        detail = f"no database connection came free within {settings.pool_timeout:g} s: try again"
        return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(psycopg.Error)
    def database_error(_: Request, error: psycopg.Error) -> JSONResponse:
        status = status_of(error)
        headers = {"Retry-After": "1"} if status == 503 else None
        return JSONResponse(error_body(error, status, settings), status_code=status, headers=headers)


STATUS_OF_SQLSTATE = {"42501": 403, "23505": 409, "57014": 503, "40001": 503, "40P01": 503, "3F000": 503}
STATUS_OF_SQLSTATE_CLASS = {"22": 400, "23": 400, "08": 503, "53": 503, "57": 503}


def status_of(error: psycopg.Error) -> int:
    state = error.sqlstate or ""
    if state in STATUS_OF_SQLSTATE:
        return STATUS_OF_SQLSTATE[state]
    if state[:2] in STATUS_OF_SQLSTATE_CLASS:
        return STATUS_OF_SQLSTATE_CLASS[state[:2]]
    if isinstance(error, psycopg.OperationalError):  # the connection failed
        return 503
    if isinstance(error, psycopg.DataError):  # refused before it was sent, e.g. a NUL character
        return 400
    return 500


def error_body(error: psycopg.Error, status: int, settings: ServiceSettings) -> dict[str, Any]:
    if status == 500:
        logger.error("database error %s: %s", error.sqlstate, str(error).strip())
        return {"detail": "internal database error", "sqlstate": error.sqlstate}
    if error.sqlstate == "57014" and "statement timeout" in (error.diag.message_primary or ""):
        detail = (
            f"the database did not answer within the service's statement timeout ({settings.statement_timeout:g} s)"
        )
        return {"detail": detail, "sqlstate": error.sqlstate}
    if error.sqlstate == "3F000":
        detail = f"{error.diag.message_primary}: the database has no emem extension (CREATE EXTENSION emem CASCADE)"
        return {"detail": detail, "sqlstate": error.sqlstate}
    if error.sqlstate is None:
        return {"detail": str(error).strip() or type(error).__name__}
    return {
        "detail": error.diag.message_primary or str(error).strip(),
        "hint": error.diag.message_hint,
        "sqlstate": error.sqlstate,
    }


# ---- emem serve ---------------------------------------------------------------------------------


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on host:port; ServiceStartupError when the port is taken."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family, backlog=2048)
    except socket.gaierror as error:
        raise ServiceStartupError(f"cannot listen on {host}: {error.strerror}") from None
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise ServiceStartupError(
                f"port {port} on {host} is in use by another process: stop it, or choose another --port"
            ) from None
        raise ServiceStartupError(f"cannot listen on {host} port {port}: {error.strerror}") from None


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
    database unreachable or without emem, the tokens file) raise ServiceStartupError before it
    listens for requests."""
    logging.config.dictConfig(LOG_CONFIG)
    listener = listening_socket(settings.bind_host, port)
    with listener:
        backend = Backend.open(settings, gateway)
        config = uvicorn.Config(build_app(settings, lambda: backend), lifespan="on", log_config=LOG_CONFIG)
        address = f"[{settings.bind_host}]" if ":" in settings.bind_host else settings.bind_host
        logger.info("emem serves on http://%s:%d (OpenAPI at /docs)", address, port)
        uvicorn.Server(config).run(sockets=[listener])
