"""The service layer under emem's front ends: the command line, the HTTP service and the MCP server.

Each front end only translates: its arguments into a call here, and what happens into its own
words. What they say for the same situation comes from one table, SITUATIONS (docs/clients.md
prints it): `classify` turns any failure into a ServiceError naming its situation, with the
database's message and hint where the database said no.

The network services share the rest too: a pool whose connections act as the caller's role
(`RolePool`, SET ROLE while lent), the check before they start (`check_database`), the limits,
which lanes a caller reads and writes (`Service.lanes`), and remembering a record (`remember`).
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from emem_client import calls
from emem_client.aio import AsyncClient
from emem_client.client import server_of
from emem_client.gateways import Gateway, GatewayError
from emem_client.types import FindPage, Health, RecordSummary
from emem_client.units import IngestOptions

logger = logging.getLogger("emem.service")

# What the database accepts (e_gather_find: page_size 1 to 1000, page * page_size at most 100,000):
# the front ends declare these bounds in their schemas.
MAX_PAGE_SIZE = 1000
MAX_PAGE = 100_000
MAX_QUESTION_CHARS = 2000  # the default limit of a question's length
# Failing fast beats waiting: a database that is down answers an agent within this many seconds.
DEFAULT_CONNECT_TIMEOUT = 1.5
# While the database answers, a call waits this much longer for the pool (it reconnects after a
# restart, with growing pauses, or its connections are busy) before it is `unavailable`.
POOL_PATIENCE = 10.0
THREAD_POSITION_TAKEN = "one_record_per_thread_position"
APPEND_ATTEMPTS = 3  # a turn appended while another writer appends to the same conversation is retried
# The turns a remembered turn's window covers: those of ingest's conversation windows.
CONVERSATION_WINDOW_SIZE = IngestOptions().conversation_windows.size


# ---- situations: what every front end says for the same thing ----------------------------------


@dataclass(frozen=True)
class Situation:
    """One thing that can happen to a call, and how each front end says it (None: it cannot happen there)."""

    name: str
    meaning: str
    exit_code: int | None  # the command line's
    http_status: int | None  # the HTTP service's (and the MCP server's over HTTP, for 401 and 421)
    mcp: str  # what an MCP client sees


SITUATIONS = {
    situation.name: situation
    for situation in (
        Situation("ok", "done (a find answered degraded too: the answer says so)", 0, 200, "the tool's result"),
        Situation("degraded", "health: degraded (find still answers)", 3, 200, 'the result, status "degraded"'),
        Situation("bad_input", "an argument is wrong: the message says what is accepted", 2, 400, "tool error"),
        Situation("unauthenticated", "no bearer token, or an unknown one", None, 401, "HTTP 401"),
        Situation("forbidden", "the role may not read or write that lane (SQLSTATE 42501)", 1, 403, "tool error"),
        Situation("duplicate", "the record or link exists already (SQLSTATE 23505)", None, 409, "tool error"),
        Situation(
            "refused",
            "the database refused the call for a reason its message and hint give (e.g. SQLSTATE 55000: "
            "a space that lacks vectors)",
            1,
            409,
            "tool error",
        ),
        Situation("too_large", "the request body is larger than the service accepts", None, 413, "HTTP 413"),
        Situation("host_not_allowed", "the Host or Origin header is off the allow-list", None, 421, "HTTP 421"),
        Situation(
            "unavailable",
            "the database is unreachable, busy, or did not answer within the statement timeout",
            1,
            503,
            "tool error",
        ),
        Situation(
            "extension_missing",
            "the database has no emem extension: CREATE EXTENSION emem CASCADE",
            1,
            503,
            "tool error",
        ),
        Situation("server_failure", "the database failed (its log has the details)", 1, 500, "tool error"),
    )
}


class ServiceError(Exception):
    """A call that did not succeed, as every front end reports it: its situation (SITUATIONS), what
    happened, and the database's hint and SQLSTATE when the database refused."""

    def __init__(self, situation: str, message: str, hint: str | None = None, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.situation = SITUATIONS[situation]
        self.message = message
        self.hint = hint
        self.sqlstate = sqlstate

    def text(self) -> str:
        """The message, with the SQLSTATE and the hint on a line of its own, for people and agents."""
        message = f"{self.message} (SQLSTATE {self.sqlstate})" if self.sqlstate else self.message
        return f"{message}\nhint: {self.hint}" if self.hint else message

    def body(self) -> dict[str, Any]:
        """The HTTP service's error body (ErrorBody in its OpenAPI document)."""
        return {"detail": self.message, "situation": self.situation.name, "hint": self.hint, "sqlstate": self.sqlstate}


class StartupError(Exception):
    """A network service cannot start; the message says what to change."""


# Failures of the server itself (system errors, internal errors): their text stays in the log.
SERVER_FAILURE_CLASSES = frozenset({"58", "XX"})
SITUATION_OF_SQLSTATE = {"42501": "forbidden", "23505": "duplicate", "3F000": "extension_missing"}
SITUATION_OF_SQLSTATE_CLASS = {
    "22": "bad_input",
    "23": "bad_input",
    "08": "unavailable",
    "40": "unavailable",  # a serialization failure or deadlock: try again
    "53": "unavailable",
    "57": "unavailable",
}


def classify(error: BaseException) -> ServiceError:
    """The situation of a failure, with what to tell the caller (server failures keep their text in the log)."""
    if isinstance(error, ServiceError):
        return error
    if isinstance(error, calls.ExtensionMissingError):
        return ServiceError("extension_missing", str(error))
    if isinstance(error, PoolTimeout):
        return ServiceError("unavailable", f"no database connection could be had in time ({error}): try again")
    if isinstance(error, psycopg.Error):
        return database_error(error)
    if isinstance(error, ValueError | TypeError):
        return ServiceError("bad_input", str(error))
    raise error


def database_error(error: psycopg.Error) -> ServiceError:
    state = error.sqlstate or ""
    situation = SITUATION_OF_SQLSTATE.get(state) or SITUATION_OF_SQLSTATE_CLASS.get(state[:2])
    diagnostic = error.diag
    if situation is None and not state:
        if isinstance(error, psycopg.OperationalError):  # no connection at all
            return ServiceError("unavailable", f"the database cannot be reached: {str(error).strip()}")
        if isinstance(error, psycopg.DataError):  # refused before it was sent, e.g. a NUL character
            return ServiceError("bad_input", str(error).strip())
    if situation is None and diagnostic.message_primary and state[:2] not in SERVER_FAILURE_CLASSES:
        situation = "refused"
    if situation is None or not diagnostic.message_primary:
        logger.error("database error %s: %s", state, str(error).strip())
        return ServiceError("server_failure", "internal database error; the server's log has the details", None, state)
    if state == "57014" and "statement timeout" in diagnostic.message_primary:
        return ServiceError("unavailable", "the database did not answer within the statement timeout", None, state)
    if state == "3F000":
        return ServiceError(
            "extension_missing",
            f"{diagnostic.message_primary}: the database has no emem extension",
            "connect as the database's owner and run CREATE EXTENSION emem CASCADE",
            state,
        )
    return ServiceError(situation, diagnostic.message_primary, diagnostic.message_hint, state)


# ---- who calls: connections that act as the caller's role ---------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who a call acts as: a database role, or None for the service's login role."""

    role: str | None


_acting: ContextVar[Caller | None] = ContextVar("emem_acting_caller", default=None)


class RolePool(AsyncConnectionPool):
    """A pool that lends connections only within `Service.acting`, acting as the caller's role: SET ROLE
    when lent, RESET ROLE (the pool's reset) when returned; a connection that cannot be reset is closed."""

    async def getconn(self, timeout: float | None = None) -> psycopg.AsyncConnection[Any]:
        caller = _acting.get()
        if caller is None:  # fail closed: no statement runs as the login role by omission
            raise RuntimeError("the service's pool lends connections only within Service.acting()")
        connection = await self.lent(timeout)
        if caller.role is not None:
            try:
                await connection.execute(sql.SQL("set role {}").format(sql.Identifier(caller.role)))
            except BaseException:
                await self.putconn(connection)
                raise
        return connection

    async def lent(self, timeout: float | None) -> psycopg.AsyncConnection[Any]:
        """A connection within the pool's timeout; past it, only while the database answers a connection of
        its own does the call wait longer (POOL_PATIENCE): the pool is catching up after a restart, or busy.
        A database that is down fails the call at once."""
        try:
            return await super().getconn(timeout)
        except PoolTimeout:
            if not await self.database_answers():
                raise
        return await super().getconn(POOL_PATIENCE)

    async def database_answers(self) -> bool:
        conninfo = self.conninfo if isinstance(self.conninfo, str) else ""
        options = self.kwargs if isinstance(self.kwargs, dict) else {}
        try:
            probe = await psycopg.AsyncConnection.connect(conninfo, **options)
        except psycopg.OperationalError:
            return False
        await probe.close()
        return True


@dataclass(frozen=True)
class Limits:
    """What one call may cost: statement and wait times (seconds), question length, pool size."""

    statement_timeout: float = 5.0
    pool_timeout: float = DEFAULT_CONNECT_TIMEOUT
    pool_size: int = 8
    max_question_chars: int = MAX_QUESTION_CHARS


@asynccontextmanager
async def open_pool(conninfo: str, limits: Limits) -> AsyncIterator[RolePool]:
    """The pool of a network service: statements stop after the timeout, dates come in UTC, and a
    connection that broke (a database restart) is replaced before it is lent."""

    async def configure(connection: psycopg.AsyncConnection[Any]) -> None:
        await connection.execute(
            "select pg_catalog.set_config('statement_timeout', %s, false),"
            " pg_catalog.set_config('timezone', 'UTC', false)",
            (f"{max(1, round(limits.statement_timeout * 1000))}ms",),
        )

    async def reset_role(connection: psycopg.AsyncConnection[Any]) -> None:
        await connection.execute("reset role")

    pool = RolePool(
        conninfo,
        min_size=1,
        max_size=limits.pool_size,
        timeout=limits.pool_timeout,
        kwargs={"autocommit": True, "connect_timeout": max(1, round(limits.pool_timeout))},
        configure=configure,
        reset=reset_role,
        check=AsyncConnectionPool.check_connection,
        name="emem",
        open=False,
    )
    try:
        await pool.open(wait=True, timeout=max(limits.pool_timeout, 10.0))
    except PoolTimeout:
        await pool.close()
        raise StartupError("the connection pool could not connect to PostgreSQL in time") from None
    try:
        yield pool
    finally:
        await pool.close()


def check_database(conninfo: str, roles: Iterable[str], connect_timeout: float = 10.0) -> None:
    """Before a network service listens: the database is reachable, holds the extension, and the
    login role may act as each of `roles`; StartupError says what to change."""
    try:
        connection = psycopg.connect(conninfo, autocommit=True, connect_timeout=max(1, round(connect_timeout)))
    except psycopg.OperationalError as error:
        raise StartupError(
            f"cannot connect to PostgreSQL: {str(error).strip()}\n"
            "Pass --dsn, or set EMEM_DSN or libpq's PG* variables (PGHOST, PGPORT, PGUSER, PGDATABASE)."
        ) from None
    with connection:
        database, login_role, has_emem = connection.execute(
            "select pg_catalog.current_database(), session_user,"
            " exists (select from pg_catalog.pg_extension where extname = 'emem')"
        ).fetchone() or ("?", "?", False)
        if not has_emem:  # the words every front end uses (ExtensionMissingError)
            raise StartupError(str(calls.ExtensionMissingError(database, server_of(connection.info))))
        for role in sorted(set(roles)):
            try:
                connection.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
                connection.execute("reset role")
            except psycopg.Error as error:
                raise StartupError(
                    f"the service is to act as role {role!r}, which its login role {login_role!r} cannot act as "
                    f"({error.diag.message_primary}): create the role, or GRANT "
                    f"{sql.Identifier(role).as_string(connection)} TO "
                    f"{sql.Identifier(login_role).as_string(connection)}"
                ) from None


# ---- what a caller reads and writes ----------------------------------------------------------------


@dataclass(frozen=True)
class CallerLanes:
    """The lanes the acting role reads and writes (its agent profile's; every lane for the extension's
    owner), and the isolation its finds run under: `page_filter` (pages cut before the lane filter,
    totals count every lane) or `strict`."""

    role: str
    reads_every_lane: bool
    agent_profile: str | None
    reads: list[str]
    writes: list[str]
    lane_isolation: str
    explanation: str = field(default="")


def caller_lanes() -> calls.Call[CallerLanes]:
    """Read as the acting role. Its profile and the lanes it reads are the database's answer
    (emem.policy_profile, emem.policy_lanes: the binding by name, OID and cluster, as row-level
    security decides), and row-level security shows it its own profile's lanes and settings only."""
    return calls.Call(
        "with me as (select r.rolname::text as role,"
        "   r.rolsuper or r.rolbypassrls or pg_catalog.pg_has_role(r.oid, c.relowner, 'usage') as every,"
        "   emem.policy_profile(current_user) as profile"
        "   from pg_catalog.pg_roles as r, pg_catalog.pg_class as c"
        "   where r.rolname = current_user and c.oid = 'emem.records'::pg_catalog.regclass)"
        " select me.role, me.every, case when me.every then null else me.profile end as profile,"
        "  emem.policy_lanes(current_user) as reads,"
        "  case when me.every then array(select l.lane_name from emem.lanes as l order by 1)"
        "   else array(select pl.lane_name from emem.profile_lanes as pl"
        "    where pl.profile_name = me.profile and pl.can_write order by 1) end as writes,"
        "  coalesce(case when not me.every then (select ap.settings->>'emem.lane_isolation'"
        "   from emem.agent_profiles as ap where ap.profile_name = me.profile) end,"
        "   nullif(pg_catalog.current_setting('emem.lane_isolation', true), '')) as isolation"
        " from me",
        (),
        lambda rows: describe_lanes(rows[0]),
    )


ISOLATION_MEANS = {
    "page_filter": "a page is cut from the list of every lane before records of lanes you cannot read are "
    "removed: pages may hold fewer rows than asked, and totals count every lane",
    "strict": "every lookup reads only the lanes you read: pages are full and totals count your lanes only",
}
DEFAULT_ISOLATION = "page_filter"
# When the mode is set the database still accepts `seed`, page_filter's old name, in any case.
ISOLATION_ALIASES = {"seed": "page_filter"}


def isolation_mode(value: str | None) -> str:
    """The mode a setting's value names, as the database reads it; the default when unset."""
    mode = (value or "").strip().lower()
    mode = ISOLATION_ALIASES.get(mode, mode)
    return mode if mode in ISOLATION_MEANS else DEFAULT_ISOLATION


def profile_isolations() -> calls.Call[dict[str, str]]:
    """Each agent profile the caller sees (the owner: every one; an agent: its own) and the lane
    isolation its finds run under: its own setting, else the database's, else the default."""
    return calls.Call(
        "select coalesce(pg_catalog.jsonb_object_agg(ap.profile_name, coalesce("
        " nullif(ap.settings->>'emem.lane_isolation', ''),"
        " nullif(pg_catalog.current_setting('emem.lane_isolation', true), ''), '')), '{}') as isolations"
        " from emem.agent_profiles as ap",
        (),
        lambda rows: {name: isolation_mode(value) for name, value in sorted(rows[0]["isolations"].items())},
    )


def describe_lanes(row: Mapping[str, Any]) -> CallerLanes:
    reads, writes = list(row["reads"]), list(row["writes"])
    if row["every"]:
        said = "you read and write every lane (the extension's owner, or a role that bypasses row-level security)"
    elif row["profile"] is None:
        said = "your role is bound to no agent profile: it reads nothing and writes nothing"
    else:
        said = (
            f"agent profile {row['profile']}: you read {', '.join(reads) or 'no lane'} and write "
            f"{', '.join(writes) or 'no lane'}"
        )
    isolation = isolation_mode(row["isolation"])
    return CallerLanes(
        role=row["role"],
        reads_every_lane=bool(row["every"]),
        agent_profile=row["profile"],
        reads=reads,
        writes=writes,
        lane_isolation=isolation,
        explanation=f"{said}; lane isolation {isolation}: {ISOLATION_MEANS[isolation]}",
    )


# ---- the calls --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Remembered:
    """A stored record; `embedded` says whether it has a vector (find by meaning reaches it)."""

    record_id: int
    created: bool  # False: the lane held a record of this source_key already
    kind: str
    lane: str
    thread_id: str | None
    thread_position: int | None
    embedded: bool
    embedding_problem: str | None  # why it has no vector (e.g. gateway_down), when it has none
    window_id: int | None
    message: str


class Service:
    """emem's calls for callers that each act as a database role, on a RolePool."""

    def __init__(self, pool: RolePool, gateway: Gateway, limits: Limits, default_lane: str | None = None) -> None:
        self.client = AsyncClient(pool, gateway)
        self.limits = limits
        self.default_lane = default_lane

    @asynccontextmanager
    async def acting(self, caller: Caller) -> AsyncIterator[AsyncClient]:
        """The client, its connections acting as the caller's role meanwhile; every failure a ServiceError.
        A connection is taken for each statement only, never held while the gateway embeds."""
        token = _acting.set(caller)
        try:
            yield self.client
        except (psycopg.Error, calls.ExtensionMissingError, ValueError, TypeError) as error:
            raise classify(error) from error
        finally:
            _acting.reset(token)

    def checked_question(self, question: str) -> str:
        if not isinstance(question, str) or not question.strip() or "\x00" in question:
            raise ServiceError("bad_input", "question: give a non-empty text without NUL characters")
        if len(question) > self.limits.max_question_chars:
            raise ServiceError(
                "bad_input", f"question: at most {self.limits.max_question_chars} characters, got {len(question)}"
            )
        return question

    async def find(self, caller: Caller, question: str, page: int = 1, page_size: int = 30) -> FindPage:
        async with self.acting(caller) as client:
            return await client.find(self.checked_question(question), page, page_size)

    async def explain(self, caller: Caller, question: str, page: int = 1, page_size: int = 30) -> dict[str, Any]:
        """The database's explanation: an agent under page_filter gets no counts or ranks across lanes."""
        async with self.acting(caller) as client:
            return await client.explain(self.checked_question(question), page, page_size)

    async def timeline(
        self,
        caller: Caller,
        from_time: datetime | None,
        to_time: datetime | None,
        page: int = 1,
        page_size: int = 30,
        kinds: list[str] | None = None,
        tags: list[str] | None = None,
    ) -> list[RecordSummary]:
        async with self.acting(caller) as client:
            return await client.timeline(from_time, to_time, page, page_size, kinds, tags)

    async def health(self, caller: Caller) -> Health:
        async with self.acting(caller) as client:
            return await client.health()

    async def lanes(self, caller: Caller) -> CallerLanes:
        async with self.acting(caller) as client:
            return await client.run(caller_lanes())

    async def link(
        self, caller: Caller, from_id: int, to_id: int, relation: str, properties: dict[str, Any] | None
    ) -> int:
        async with self.acting(caller) as client:
            return await client.link(from_id, to_id, relation, properties)

    async def remember(self, caller: Caller, item: dict[str, Any]) -> Remembered:
        """Stores one record (put_records' item; the lane defaults to the caller's own writable lane),
        with the gateway's vector when its model is the active space's; a conversation turn without a
        position goes after the last one, and with a vector gets a window over the latest turns."""
        async with self.acting(caller) as client:
            item = {**item, "lane": item.get("lane") or self.own_lane(await client.run(caller_lanes()))}
            vector, problem = await client.vector_for(item["content"])
            record_id, created, position = await store(client, item, vector)
            window_id = None
            if vector is not None and created and item["kind"] == "conversation" and item.get("thread_id"):
                window_id = await conversation_window(client, item["lane"], item["thread_id"], position)
        why = problem.reason if problem else None
        message = (
            "stored with a vector of the active embedding space"
            if vector is not None
            else f"stored without a vector ({why}): find reaches it through its tags and words until emem embed "
            "writes its vector"
        )
        return Remembered(
            record_id,
            created,
            item["kind"],
            item["lane"],
            item.get("thread_id"),
            position,
            vector is not None,
            why,
            window_id,
            message,
        )

    def own_lane(self, lanes: CallerLanes) -> str:
        """Where a record that names no lane goes: the caller's one writable lane, or the service's
        default lane when the caller may write it; else a clear error naming the lanes it may write."""
        if self.default_lane and (lanes.reads_every_lane or self.default_lane in lanes.writes):
            return self.default_lane
        if not lanes.reads_every_lane and len(lanes.writes) == 1:
            return lanes.writes[0]
        if not lanes.writes:
            raise ServiceError("forbidden", f"role {lanes.role} may write no lane: {lanes.explanation}")
        raise ServiceError(
            "bad_input", f"lane: name the lane to write; role {lanes.role} writes {', '.join(lanes.writes)}"
        )


async def store(client: AsyncClient, item: dict[str, Any], vector: list[float] | None) -> tuple[int, bool, int | None]:
    """Writes the record (with its vector): its id, whether it is new, its thread position."""
    item = item if vector is None else {**item, "vector": vector}
    appending = item["kind"] == "conversation" and "thread_position" not in item
    for _ in range(APPEND_ATTEMPTS if appending else 1):
        if appending:
            item["thread_position"] = await client.run(next_position(item["lane"], item.get("thread_id")))
        try:
            [(record_id, created)] = await client.run(calls.put_records_created([item], None))
            return record_id, created, item.get("thread_position")
        except psycopg.errors.UniqueViolation as error:
            if error.diag.constraint_name != THREAD_POSITION_TAKEN:
                raise
    raise ServiceError(
        "duplicate",
        f"conversation {item.get('thread_id')!r} in lane {item['lane']!r} already has a turn at position "
        f"{item['thread_position']}: leave thread_position out to append after its last turn",
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
    turns = await client.run(recent_turns(lane, thread_id, position - CONVERSATION_WINDOW_SIZE + 1, position))
    run: list[dict[str, Any]] = []
    for turn in reversed(turns):
        if turn["thread_position"] != position - len(run):
            break
        run.insert(0, turn)
    if len(run) < 2:
        return None
    try:
        [vector] = await client.embed([calls.window_text(turn["content"] for turn in run)])
    except GatewayError:
        return None
    return await client.put_window([turn["record_id"] for turn in run], vector)


async def warm_up(gateway: Gateway) -> None:
    """Loads the gateway's model before the first call; a gateway that is down is no reason not to start
    (find answers degraded meanwhile)."""
    try:
        declaration = await asyncio.to_thread(gateway.declaration)
    except GatewayError as error:
        logger.warning("the embedding gateway is not usable (%s): finds answer degraded until it is", error)
        return
    logger.info("embedding gateway: %s (%d dimensions)", declaration.model_name, declaration.dimension)
