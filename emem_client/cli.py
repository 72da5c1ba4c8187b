"""The `emem` command: set up a database, ingest, find, the timeline, health and the HTTP service.

Where the database is: --dsn, else $EMEM_DSN, else libpq's own defaults and PG* variables
(PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD or ~/.pgpass); no credentials are made up.
Output is a table for people; --json gives the same answer for programs.
Exit codes: 0 done, 1 an error (the message says what to do), 2 a usage error.
"""

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from emem_client.client import Client
from emem_client.gateways import EmbeddedGateway, Gateway, GatewayError, OpenAIGateway
from emem_client.ingest import (
    DEFAULT_LANE,
    IngestError,
    IngestOptions,
    IngestReport,
    WindowShape,
    assume_utc,
    ingest_conversations,
    ingest_files,
    ingest_notes,
)
from emem_client.types import FindPage, FindRow, Health, RecordSummary

OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
# How a table names the lookups (placed_by, found_by).
LOOKUP_NAMES = {"record_vectors": "vector", "tags": "tags", "window_vectors": "window", "fulltext": "fulltext"}


class CommandError(Exception):
    """A failure the user can act on; main prints it and exits with 1."""


class UsageError(CommandError):
    """Arguments that parse but do not go together; main prints it and exits with 2."""


# ---- arguments ------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value


def moment(text: str) -> datetime:
    """An ISO 8601 date or time; UTC when it names no zone."""
    try:
        return assume_utc(datetime.fromisoformat(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date or time (e.g. 2024-03-01T09:00)") from None


def assignment(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def common_options() -> argparse.ArgumentParser:
    """Options accepted before or after the command (defaults are applied in `option`)."""
    parent = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    parent.add_argument("--dsn", help="libpq connection string or URI (default: $EMEM_DSN, else libpq's PG* defaults)")
    parent.add_argument(
        "--gateway",
        choices=["embedded", "openai"],
        help="embedding gateway: the local all-MiniLM-L6-v2 model (default) or an OpenAI-compatible endpoint",
    )
    parent.add_argument(
        "--openai-base-url", help=f"OpenAI-compatible API base URL (default: $OPENAI_BASE_URL or {OPENAI_DEFAULT_URL})"
    )
    parent.add_argument("--openai-model", help=f"embedding model name (default {OPENAI_DEFAULT_MODEL})")
    parent.add_argument(
        "--openai-api-key-env", help="environment variable holding the API key (default OPENAI_API_KEY)"
    )
    parent.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parent


OPTION_DEFAULTS: dict[str, Callable[[], Any]] = {
    "dsn": lambda: os.environ.get("EMEM_DSN", ""),
    "gateway": lambda: "embedded",
    "openai_base_url": lambda: os.environ.get("OPENAI_BASE_URL", OPENAI_DEFAULT_URL),
    "openai_model": lambda: OPENAI_DEFAULT_MODEL,
    "openai_api_key_env": lambda: "OPENAI_API_KEY",
    "json": lambda: False,
}


def option(args: argparse.Namespace, name: str) -> Any:
    return getattr(args, name) if hasattr(args, name) else OPTION_DEFAULTS[name]()


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="emem",
        parents=[common],
        description="emem: hybrid memory retrieval for AI agents, in PostgreSQL.",
        epilog="Exit codes: 0 done, 1 error, 2 usage error.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = commands.add_parser(
        "init",
        parents=[common],
        help="create and activate the gateway's embedding space, "
        "lanes, agent profiles and role bindings (for the extension's owner)",
    )
    init.add_argument(
        "--lane", action="append", default=[], help=f"a lane to create (repeatable; default {DEFAULT_LANE})"
    )
    init.add_argument(
        "--profile",
        action="append",
        default=[],
        type=assignment,
        metavar="NAME=LANE[,LANE...]",
        help="an agent profile and the lanes it reads (repeatable)",
    )
    init.add_argument(
        "--bind",
        action="append",
        default=[],
        type=assignment,
        metavar="ROLE=PROFILE",
        help="bind a database role to an agent profile (repeatable)",
    )
    init.set_defaults(run=run_init)

    ingest = commands.add_parser("ingest", parents=[common], help="write notes, conversations or files, with vectors")
    kinds = ingest.add_subparsers(dest="kind", required=True, metavar="KIND")
    for kind, help_text in (
        ("notes", "JSON Lines or JSON array of {content, id?, kind?, tags?, lane?, occurred_at?, links?}"),
        ("conversations", "JSON: [{id, lane?, tags?, turns: [{speaker?, content, occurred_at?}]}]"),
        ("files", "text, Markdown and HTML files, or folders of them"),
    ):
        kind_parser = kinds.add_parser(kind, parents=[common], help=help_text)
        kind_parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
        add_ingest_options(kind_parser, kind)
    ingest.set_defaults(run=run_ingest)

    find = commands.add_parser("find", parents=[common], help="answer a question with the four lookups")
    find.add_argument("question")
    find.add_argument("--page", type=positive_int, default=1)
    find.add_argument("--page-size", type=positive_int, default=30)
    find.set_defaults(run=run_find)

    timeline = commands.add_parser("timeline", parents=[common], help="records by date between two times")
    timeline.add_argument("--from", dest="from_time", type=moment, required=True, help="ISO 8601 date or time")
    timeline.add_argument("--to", dest="to_time", type=moment, help="ISO 8601 date or time (default: now)")
    timeline.add_argument("--kind", action="append", choices=["note", "conversation", "file", "entity"])
    timeline.add_argument("--tag", action="append", help="only records with this tag (repeatable: all of them)")
    timeline.add_argument("--page", type=positive_int, default=1)
    timeline.add_argument("--page-size", type=positive_int, default=30)
    timeline.set_defaults(run=run_timeline)

    health = commands.add_parser("health", parents=[common], help="does the gateway's model match the active space?")
    health.set_defaults(run=run_health)

    serve = commands.add_parser("serve", parents=[common], help="the HTTP service (GET /find, /timeline, /health)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=positive_int, default=8000)
    serve.set_defaults(run=run_serve)
    add_mcp_command(commands, common)
    return parser


def add_ingest_options(parser: argparse.ArgumentParser, kind: str) -> None:
    defaults = IngestOptions()
    parser.add_argument("--lane", default=DEFAULT_LANE, help=f"lane of records that name none (default {DEFAULT_LANE})")
    parser.add_argument("--tag", action="append", default=[], help="a tag for every record (repeatable)")
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=defaults.batch_size,
        help=f"records per put_records call (default {defaults.batch_size})",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    if kind == "notes":
        return
    shape = defaults.conversation_windows if kind == "conversations" else defaults.file_windows
    parser.add_argument(
        "--window-size", type=positive_int, default=shape.size, help=f"records per window (default {shape.size})"
    )
    parser.add_argument(
        "--window-stride",
        type=positive_int,
        default=shape.stride,
        help=f"a window starts every N records (default {shape.stride})",
    )
    if kind == "files":
        parser.add_argument(
            "--chunk-chars",
            type=positive_int,
            default=defaults.chunk_chars,
            help=f"characters per chunk at most (default {defaults.chunk_chars})",
        )


# ---- connections and gateways -----------------------------------------------------------------


def make_gateway(args: argparse.Namespace) -> Gateway:
    if option(args, "gateway") == "openai":
        return OpenAIGateway(
            option(args, "openai_base_url"),
            option(args, "openai_model"),
            api_key_env=option(args, "openai_api_key_env"),
        )
    return EmbeddedGateway()


@contextmanager
def connected(args: argparse.Namespace) -> Iterator[psycopg.Connection[Any]]:
    try:
        connection = psycopg.connect(option(args, "dsn"), autocommit=True)
    except psycopg.OperationalError as error:
        raise CommandError(
            f"cannot connect to PostgreSQL: {str(error).strip()}\n"
            "Pass --dsn, or set EMEM_DSN or libpq's PG* variables (PGHOST, PGPORT, PGUSER, "
            "PGDATABASE)."
        ) from None
    with connection:
        yield connection


@contextmanager
def client_for(args: argparse.Namespace) -> Iterator[Client]:
    with connected(args) as connection:
        yield Client(connection, make_gateway(args))


# ---- commands -------------------------------------------------------------------------------


@dataclass(frozen=True)
class InitAnswer:
    space_id: int
    model_name: str
    dimension: int
    lanes: list[str]
    profiles: dict[str, list[str]]
    bindings: dict[str, str]


def run_init(args: argparse.Namespace) -> int:
    lanes = args.lane or [DEFAULT_LANE]
    profiles = {name: [lane for lane in value.split(",") if lane] for name, value in args.profile}
    bindings = dict(args.bind)
    with connected(args) as connection, connection.transaction():
        for lane in lanes:
            connection.execute("select emem.create_lane(%s::text)", (lane,))
        for name, profile_lanes in profiles.items():
            connection.execute("select emem.create_agent_profile(%s::text, %s::text[])", (name, profile_lanes))
        for role, profile in bindings.items():
            connection.execute("select emem.bind_role(%s::name, %s::text)", (role, profile))
        client = Client(connection, make_gateway(args))
        space_id = client.ensure_space(activate=True)
        declaration = client.gateway.declaration()
    answer = InitAnswer(space_id, declaration.model_name, declaration.dimension, lanes, profiles, bindings)
    if option(args, "json"):
        print_json(answer)
    else:
        print(f"embedding space {space_id}: {answer.model_name} ({answer.dimension} dimensions), active")
        print(f"lanes: {', '.join(lanes)}")
        for name, profile_lanes in profiles.items():
            print(f"agent profile {name}: reads {', '.join(profile_lanes)}")
        for role, profile in bindings.items():
            print(f"role {role}: agent profile {profile}")
    return 0


def run_ingest(args: argparse.Namespace) -> int:
    try:
        options = IngestOptions(
            lane=args.lane,
            tags=tuple(args.tag),
            batch_size=args.batch_size,
            progress=not args.no_progress,
            **window_options(args),
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    ingest = {"notes": ingest_notes, "conversations": ingest_conversations, "files": ingest_files}[args.kind]
    with client_for(args) as client:
        report = ingest(client, args.paths, options)
    if option(args, "json"):
        print_json(report)
    else:
        print_report(report)
    return 1 if report.problems else 0


def window_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.kind == "notes":
        return {}
    shape = WindowShape(args.window_size, args.window_stride)
    if args.kind == "conversations":
        return {"conversation_windows": shape}
    return {"file_windows": shape, "chunk_chars": args.chunk_chars}


def print_report(report: IngestReport) -> None:
    print(f"records: {report.records_created} written, {report.records_existing} already stored")
    print(f"windows: {report.windows_created} written, {report.windows_existing} already stored")
    print(f"edges:   {report.edges_created} written, {report.edges_existing} already stored")
    for version in report.new_versions:
        print(f"new version: {version}")
    if report.problems:
        print(f"skipped {len(report.problems)} item(s):")
        for problem in report.problems:
            print(f"  {problem.source}: {problem.reason}")


def run_find(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        page = client.find(args.question, args.page, args.page_size)
    if option(args, "json"):
        print_json(page)
    else:
        print_find_page(page)
    return 0


def find_summary(page: FindPage) -> str:
    summary = f"page {page.page} of {page.total_pages}, {page.total_candidates} candidates"
    if page.degraded:
        return (
            f"{summary}. DEGRADED ({page.degraded_reason}): no question vector, so the answer comes from "
            "tags, edge properties and full text only; distances are placeholders"
        )
    lookups = [LOOKUP_NAMES[name] for name in LOOKUP_NAMES if name in page.pipeline_profile]
    return f"{summary}, from {', '.join(lookups)}"


FIND_COLUMNS = ["rank", "id", "kind", "lane", "placed by", "found by", "distance", "content"]


def find_cells(row: FindRow, content: str | None = None) -> list[str]:
    """A find row as table cells (FIND_COLUMNS); `content` replaces the record's text, e.g. by an excerpt."""
    return [
        str(row.rank),
        str(row.record_id),
        row.kind,
        row.lane,
        LOOKUP_NAMES.get(row.placed_by, row.placed_by),
        "+".join(LOOKUP_NAMES.get(name, name) for name in row.found_by),
        f"{row.distance:.3f}" if row.distance_kind == "cosine" else "-",
        row.content if content is None else content,
    ]


def print_find_page(page: FindPage) -> None:
    print(find_summary(page))
    print_table(FIND_COLUMNS, [find_cells(row) for row in page.rows])
    if page.total_candidates and not page.rows:
        print("(every record of this page lies in lanes outside this role's agent profile)")


def run_timeline(args: argparse.Namespace) -> int:
    to_time = args.to_time or datetime.now(UTC)
    with client_for(args) as client:
        records = client.timeline(args.from_time, to_time, args.page, args.page_size, args.kind, args.tag)
    if option(args, "json"):
        print_json(records)
    else:
        print_timeline(records)
    return 0


def print_timeline(records: list[RecordSummary]) -> None:
    rows = [
        [
            str(r.record_id),
            r.occurred_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M"),
            r.kind,
            r.lane,
            ", ".join(r.tags),
            r.content,
        ]
        for r in records
    ]
    print_table(["id", "occurred (UTC)", "kind", "lane", "tags", "content"], rows)


def run_health(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        health = client.health()
    if option(args, "json"):
        print_json(health)
    else:
        print_health(health)
    return 0


def print_health(health: Health) -> None:
    reasons = health.reasons + ([health.gateway_reason] if health.gateway_reason else [])
    print(f"status: {health.status}" + (f" ({', '.join(reasons)})" if reasons else ""))
    declared = health.declared or {}
    if declared.get("model_name"):
        print(f"gateway model: {declared['model_name']} ({declared['dimension']} dimensions)")
    else:
        print("gateway model: unreadable")
    space = health.active_space
    print(
        f"active space: {space['space_id']}: {space['model_name']} ({space['dimension']} dimensions)"
        if space
        else "active space: none (run `emem init`)"
    )
    if not health.ok:
        print("degraded is not an outage: find answers from tags, edge properties and full text meanwhile")


def run_serve(args: argparse.Namespace) -> int:
    from emem_client.http import serve  # fastapi and uvicorn load only for this command

    serve(option(args, "dsn"), make_gateway(args), args.host, args.port)
    return 0


def add_mcp_command(commands: Any, common: argparse.ArgumentParser) -> None:
    mcp = commands.add_parser(
        "mcp",
        parents=[common],
        help="the MCP server for agents, on stdio or streamable HTTP: find, timeline, remember, link, explain, health",
    )
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default stdio")
    mcp.add_argument(
        "--lane", default=DEFAULT_LANE, help=f"lane remember writes to when a call names none (default {DEFAULT_LANE})"
    )
    mcp.add_argument(
        "--statement-timeout",
        type=positive_int,
        default=30,
        metavar="SECONDS",
        help="longest a tool's SQL may run (default 30)",
    )
    mcp.add_argument(
        "--role", help="stdio: the database role every call acts as (SET ROLE; default: the role the DSN logs in as)"
    )
    http = mcp.add_argument_group("streamable HTTP (--transport http), at /mcp")
    http.add_argument(
        "--tokens",
        type=Path,
        metavar="FILE",
        help="bearer tokens mapped to database roles, the HTTP service's TOML file "
        "(python -m emem_client.access new-token ROLE makes an entry); each request acts as its token's role",
    )
    http.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    http.add_argument("--port", type=positive_int, default=8000, help="default 8000")
    http.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name clients reach the server by, besides localhost and --host (repeatable)",
    )
    mcp.set_defaults(run=run_mcp)


def run_mcp(args: argparse.Namespace) -> int:
    import asyncio

    try:
        from emem_client import mcp_server  # the mcp SDK loads only for this command
    except ModuleNotFoundError as error:
        raise CommandError(f"emem mcp needs the mcp extra: pip install 'emem-client[mcp]' ({error})") from None

    dsn, gateway = option(args, "dsn"), make_gateway(args)
    settings = {"lane": args.lane, "statement_timeout": args.statement_timeout}
    if args.transport == "http":
        asyncio.run(mcp_server.serve_http(dsn, gateway, host=args.host, port=args.port, **mcp_access(args), **settings))
    elif args.tokens or args.allowed_host:
        raise UsageError("--tokens and --allowed-host are for --transport http")
    else:
        asyncio.run(mcp_server.serve_stdio(dsn, gateway, role=args.role, **settings))
    return 0


def mcp_access(args: argparse.Namespace) -> dict[str, Any]:
    """The tokens file and the Host allow-list of `emem mcp --transport http`, as serve_http takes them."""
    from emem_client.access import AccessConfigError, AccessTokens, HostAllowList

    if args.role:
        raise UsageError("--role is for stdio: over HTTP each request acts as the role of its bearer token")
    if args.tokens is None:
        raise UsageError("--transport http needs --tokens FILE (bearer tokens mapped to database roles)")
    try:
        hosts = HostAllowList.for_bind_address(args.host, args.allowed_host)
    except ValueError as error:
        raise UsageError(str(error)) from None
    try:
        return {"tokens": AccessTokens.load(args.tokens), "hosts": hosts}
    except AccessConfigError as error:
        raise CommandError(str(error)) from None


# ---- output ---------------------------------------------------------------------------------


def print_json(value: Any) -> None:
    data = [asdict(item) for item in value] if isinstance(value, list) else asdict(value)
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Columns sized to their values; the last one (the content) cut to the terminal's width."""
    if not rows:
        print("(no records)")
        return
    rows = [[" ".join(cell.split()) for cell in row] for row in rows]
    widths = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers[:-1])]
    room = max(20, shutil.get_terminal_size((160, 24)).columns - sum(widths) - 2 * len(widths))
    print("  ".join(h.ljust(w) for h, w in zip(headers[:-1], widths, strict=True)) + "  " + headers[-1])
    for row in rows:
        last = row[-1] if len(row[-1]) <= room else row[-1][: room - 1] + "…"
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + last)


# ---- main -----------------------------------------------------------------------------------


def error_message(error: Exception) -> str:
    if isinstance(error, psycopg.Error) and error.diag.message_primary:
        diagnostic = error.diag
        message = f"{diagnostic.message_primary} (SQLSTATE {diagnostic.sqlstate})"
        return f"{message}\nhint: {diagnostic.message_hint}" if diagnostic.message_hint else message
    if isinstance(error, GatewayError):
        return f"the embedding gateway failed: {error}"
    return str(error).strip()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except UsageError as error:
        print(f"emem: error: {error}", file=sys.stderr)
        return 2
    except (CommandError, IngestError, GatewayError, psycopg.Error) as error:
        print(f"emem: error: {error_message(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("emem: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
