"""The `emem` command: set up a database, ingest, embed, find, explain, the timeline, health and the HTTP service.

Where the database is: --dsn, else $EMEM_DSN, else libpq's own defaults and PG* variables
(PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD or ~/.pgpass) when any is set, else the libpq
service `emem` that set-up records (emem_client/setup_defaults.py); no credentials are made up.
Output is a table for people (terminal control characters in the data shown as escapes);
--json gives the same answer for programs, with ISO 8601 dates. Exit codes: ExitCode below.

Each command is a pair of functions: `add_<command>` declares its arguments, `run_<command>`
runs it and returns an exit code. COMMANDS lists the `add_` functions in --help's order.
"""

import argparse
import json
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from datetime import UTC, datetime
from enum import IntEnum
from pathlib import Path
from typing import Any, TypeAlias

import psycopg

from emem_client import __version__, calls
from emem_client.calls import assume_utc
from emem_client.client import Client, run_on, server_of, with_vector_type
from emem_client.embed import EmbedError, EmbedOptions, EmbedReport, embed_queue
from emem_client.gateway_options import (
    GATEWAYS,
    OPENAI_DEFAULT_KEY_ENV,
    OPENAI_DEFAULT_MODEL,
    OPENAI_DEFAULT_TIMEOUT,
    OPENAI_DEFAULT_URL,
)
from emem_client.gateway_options import make_gateway as gateway_named
from emem_client.gateways import Gateway, GatewayError, extra_install_command
from emem_client.ingest import ingest_conversations, ingest_files, ingest_notes
from emem_client.service import ISOLATION_MEANS, Limits, ServiceError, StartupError, classify, profile_isolations
from emem_client.service_settings import LIMITS, ServiceSettings, default_setting, flag
from emem_client.setup_defaults import default_conninfo
from emem_client.types import FindPage, FindRow, Health, RecordSummary, RegisteredLookup
from emem_client.units import DEFAULT_LANE, IngestError, IngestOptions, IngestReport, WindowShape


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    DEGRADED = 3
    SKIPPED = 4
    INTERRUPTED = 130
    OUTPUT_CLOSED = 141  # as a command killed by SIGPIPE


EXIT_CODE_MEANINGS = {
    ExitCode.OK: "done (find too when its answer is degraded: see `degraded` in its output)",
    ExitCode.ERROR: "an error; the message on stderr says what to do",
    ExitCode.USAGE: "a usage error: arguments that are wrong or do not go together",
    ExitCode.DEGRADED: "health: degraded (the reasons are printed; find still answers)",
    ExitCode.SKIPPED: "ingest: written, but some items were skipped (listed in the report)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
    ExitCode.OUTPUT_CLOSED: "the output was closed early, as by `| head`; ends quietly",
}


class CommandError(Exception):
    """A failure the user can act on; main prints it and exits with ExitCode.ERROR."""


class UsageError(CommandError):
    """Arguments that parse but do not go together; main prints it and exits with ExitCode.USAGE."""


# ---- arguments ------------------------------------------------------------------------------


def integer_from(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value} is not {minimum} or more")
    return value


def positive_int(text: str) -> int:
    return integer_from(text, 1)


def non_negative_int(text: str) -> int:
    return integer_from(text, 0)


def positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds from more than 0 to 86400")
    return value


def port_number(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (1 to 65535)")
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
    parent.add_argument(
        "--dsn",
        help="libpq connection string or URI (default: $EMEM_DSN, else libpq's PG* variables, else the service emem)",
    )
    parent.add_argument(
        "--gateway",
        choices=GATEWAYS,
        help="embedding gateway: the local all-MiniLM-L6-v2 model (default) or an OpenAI-compatible endpoint",
    )
    parent.add_argument(
        "--openai-base-url", help=f"OpenAI-compatible API base URL (default: $OPENAI_BASE_URL or {OPENAI_DEFAULT_URL})"
    )
    parent.add_argument("--openai-model", help=f"embedding model name (default {OPENAI_DEFAULT_MODEL})")
    parent.add_argument(
        "--openai-api-key-env", help=f"environment variable holding the API key (default {OPENAI_DEFAULT_KEY_ENV})"
    )
    parent.add_argument(
        "--openai-timeout",
        type=positive_number,
        metavar="SECONDS",
        help="longest wait for one answer of the embeddings service "
        f"(default: $EMEM_OPENAI_TIMEOUT, else {OPENAI_DEFAULT_TIMEOUT:g})",
    )
    parent.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parent


OPTION_DEFAULTS: dict[str, Callable[[], Any]] = {
    "dsn": default_conninfo,
    "gateway": lambda: "embedded",
    "openai_base_url": lambda: os.environ.get("OPENAI_BASE_URL", OPENAI_DEFAULT_URL),
    "openai_model": lambda: OPENAI_DEFAULT_MODEL,
    "openai_api_key_env": lambda: OPENAI_DEFAULT_KEY_ENV,
    "openai_timeout": lambda: positive_number(os.environ.get("EMEM_OPENAI_TIMEOUT", str(OPENAI_DEFAULT_TIMEOUT))),
    "json": lambda: False,
}


def option(args: argparse.Namespace, name: str) -> Any:
    return getattr(args, name) if hasattr(args, name) else OPTION_DEFAULTS[name]()


Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # what add_subparsers returns


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="emem",
        parents=[common],
        description="emem: hybrid memory retrieval for AI agents, in PostgreSQL.",
        epilog="exit codes:\n"
        + "\n".join(f"  {int(code):<4} {meaning}" for code, meaning in EXIT_CODE_MEANINGS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="store_true",
        help="print the client's version and the emem extension's version in the database, and exit",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(commands, common)
    return parser


def add_init(commands: Commands, common: argparse.ArgumentParser) -> None:
    init = commands.add_parser(
        "init",
        parents=[common],
        help="create the gateway's embedding space (active when it is the first), "
        "lanes, agent profiles and role bindings (for the extension's owner)",
        description="Creates the embedding space of the gateway's model, and lanes, agent profiles and role "
        "bindings. The first space becomes the active one. A space for another model is created inactive and "
        "queued for embedding: the active space keeps answering while `emem embed` fills it; then "
        "`emem init --activate` (with the same gateway) switches to it.",
    )
    init.add_argument(
        "--activate",
        action="store_true",
        help="make the gateway's space the active one (refused until it holds every vector, unless --force)",
    )
    init.add_argument(
        "--force",
        action="store_true",
        help="with --activate: switch even though records lack a vector of the new model",
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
    init.add_argument(
        "--isolation",
        action="append",
        default=[],
        type=isolation_assignment,
        metavar="PROFILE=MODE",
        help="the lane isolation of an agent profile's finds: page_filter (the default: other lanes' totals, "
        "ranks and edge words show through) or strict (lanes that keep secrets from each other) (repeatable)",
    )
    init.set_defaults(run=run_init)


def isolation_assignment(text: str) -> tuple[str, str]:
    profile, mode = assignment(text)
    if mode not in ISOLATION_MEANS:
        raise argparse.ArgumentTypeError(f"{text!r}: the lane isolation is one of {', '.join(ISOLATION_MEANS)}")
    return profile, mode


def add_ingest(commands: Commands, common: argparse.ArgumentParser) -> None:
    ingest = commands.add_parser(
        "ingest",
        parents=[common],
        help="write notes, conversations or files, with vectors (exit 4 when items were skipped)",
    )
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


def add_serve_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    serve = commands.add_parser(
        "serve",
        parents=[common],
        help="the HTTP service: find, explain, timeline, health, remember and link records",
        description="The HTTP service (OpenAPI at /openapi.json). Every request acts as the database role its "
        "bearer token maps to in the tokens file; --no-auth (loopback only) answers without tokens, as the "
        "login role of --dsn.",
        epilog="Exit codes: 0 stopped, 1 could not start (the port in use, the database unreachable or without "
        "the emem extension, the tokens file unusable; the message says which), 2 usage error.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=port_number, default=8000, help="port to listen on (default 8000)")
    serve.add_argument("--tokens", type=Path, metavar="FILE", help="bearer tokens mapped to database roles (TOML)")
    serve.add_argument(
        "--no-auth", action="store_true", help="no tokens: every request acts as the login role (loopback only)"
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host header name clients use to reach the service (repeatable; localhost and the --host address "
        "are always allowed; * allows any)",
    )
    for name, limit in LIMITS.items():
        serve.add_argument(
            flag(name),
            type=limit.kind,
            default=default_setting(name),
            metavar=limit.unit,
            help=f"{limit.meaning} (default {default_setting(name)})",
        )
    serve.set_defaults(run=run_serve)


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
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (there is none off a terminal)")
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


def add_page_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--page", type=positive_int, default=1, help="page number, from 1")
    parser.add_argument("--page-size", type=positive_int, default=30, help="records per page (default 30)")


def add_find(commands: Commands, common: argparse.ArgumentParser) -> None:
    find = commands.add_parser(
        "find",
        parents=[common],
        help="answer a question with the lookups of the pipeline profile (exit 0 also when degraded)",
    )
    find.add_argument("question")
    add_page_options(find)
    find.set_defaults(run=run_find)


def add_explain(commands: Commands, common: argparse.ArgumentParser) -> None:
    explain = commands.add_parser(
        "explain",
        parents=[common],
        help="how find reads a question: its terms, each lookup's candidates and time, each row's rank per lookup",
    )
    explain.add_argument("question")
    add_page_options(explain)
    explain.set_defaults(run=run_explain)


def add_timeline(commands: Commands, common: argparse.ArgumentParser) -> None:
    timeline = commands.add_parser("timeline", parents=[common], help="records by date between two times")
    timeline.add_argument(
        "--from", dest="from_time", type=moment, help="ISO 8601 date or time, inclusive (default: no lower bound)"
    )
    timeline.add_argument(
        "--to", dest="to_time", type=moment, help="ISO 8601 date or time, inclusive (default: no upper bound)"
    )
    timeline.add_argument(
        "--kind", action="append", help="only records of this kind (repeatable; the database names the kinds)"
    )
    timeline.add_argument("--tag", action="append", help="only records with this tag (repeatable: all of them)")
    add_page_options(timeline)
    timeline.set_defaults(run=run_timeline)


def add_embed(commands: Commands, common: argparse.ArgumentParser) -> None:
    defaults = EmbedOptions()
    embed = commands.add_parser(
        "embed",
        parents=[common],
        help="embed what lacks a vector in the space of the gateway's model (the embedding queue)",
        description="Drains the embedding queue of a space through the gateway: records and windows without a "
        "current vector (new, edited, or a new model's space). Several may run at once; each may be killed and "
        "started again at any point. The extension's owner embeds every lane, an agent's role the lanes it "
        "reads and writes.",
        epilog="Exit codes: 0 done, 1 the gateway kept failing or refused texts (they stay queued), 2 usage error.",
    )
    embed.add_argument(
        "--space",
        type=positive_int,
        metavar="ID",
        help="the embedding space to fill (default: the space of the gateway's model); the gateway must be its model's",
    )
    embed.add_argument(
        "--follow", action="store_true", help="keep embedding new work as it arrives, until stopped (Ctrl-C)"
    )
    embed.add_argument(
        "--batch-size",
        type=positive_int,
        default=defaults.batch_size,
        help=f"texts per gateway call and transaction (default {defaults.batch_size}, at most 1000)",
    )
    embed.add_argument(
        "--poll-interval",
        type=positive_number,
        default=defaults.poll_interval,
        metavar="SECONDS",
        help=f"with --follow: seconds between looks at an empty queue (default {defaults.poll_interval:g})",
    )
    embed.add_argument(
        "--retries",
        type=non_negative_int,
        default=defaults.retries,
        help=f"gateway failures in a row before giving up (default {defaults.retries}; --follow never gives up)",
    )
    embed.add_argument("--no-progress", action="store_true", help="no progress bar (there is none off a terminal)")
    embed.set_defaults(run=run_embed)


def add_health(commands: Commands, common: argparse.ArgumentParser) -> None:
    health = commands.add_parser(
        "health", parents=[common], help="does the gateway's model match the active space? (exit 3 when degraded)"
    )
    health.set_defaults(run=run_health)


# ---- connections and gateways -----------------------------------------------------------------


def make_gateway(args: argparse.Namespace) -> Gateway:
    """The gateway the options name; the embedded model loads only when something is embedded."""
    try:
        timeout = option(args, "openai_timeout")
    except argparse.ArgumentTypeError as error:
        raise UsageError(f"EMEM_OPENAI_TIMEOUT: {error}") from None
    return gateway_named(
        option(args, "gateway"),
        option(args, "openai_base_url"),
        option(args, "openai_model"),
        option(args, "openai_api_key_env"),
        timeout,
    )


@contextmanager
def database(args: argparse.Namespace) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the database the options name, whether emem is installed there or not."""
    try:
        connection = psycopg.connect(option(args, "dsn"), autocommit=True)
    except psycopg.OperationalError as error:
        raise CommandError(
            # libpq indents its hints with a tab, which the terminal-safe output would show as \t.
            f"cannot connect to PostgreSQL: {str(error).strip().replace(chr(9), '  ')}\n"
            "Pass --dsn, or set EMEM_DSN or libpq's PG* variables (PGHOST, PGPORT, PGUSER, "
            "PGDATABASE); without them emem uses the libpq service emem that scripts/setup.sh "
            "records (docs/setup.md)."
        ) from None
    with connection:
        yield connection


@contextmanager
def connected(args: argparse.Namespace) -> Iterator[psycopg.Connection[Any]]:
    """A connection to a database with emem installed (else ExtensionMissingError, saying how to install it)."""
    with database(args) as connection:
        yield with_vector_type(connection)


@contextmanager
def client_for(args: argparse.Namespace) -> Iterator[Client]:
    with connected(args) as connection:
        yield Client(connection, make_gateway(args))


# ---- commands -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Versions:
    client: str
    extension: str | None  # None: not installed in `database`
    database: str


def run_version(args: argparse.Namespace) -> int:
    if not option(args, "json"):
        print(f"emem-client {__version__}", flush=True)  # even when the database cannot be reached
    with database(args) as connection:
        installed = run_on(connection, calls.installed_extension())
        where = f'database "{installed.database}" on {server_of(connection.info)}'
    if option(args, "json"):
        print_json(Versions(__version__, installed.version, installed.database))
    elif installed.version is None:
        out(f"emem extension: not installed in {where} (CREATE EXTENSION emem CASCADE)")
    else:
        out(f"emem extension {installed.version} in {where}")
    return ExitCode.OK


@dataclass(frozen=True)
class InitAnswer:
    space_id: int
    model_name: str
    dimension: int
    active: bool
    lanes: list[str]
    profiles: dict[str, list[str]]
    bindings: dict[str, str]
    active_space_id: int | None  # the space that answers finds now
    isolation: dict[str, str]  # the lane isolation of each profile named (--profile, --isolation)


def run_init(args: argparse.Namespace) -> int:
    if args.force and not args.activate:
        raise UsageError("--force goes with --activate")
    lanes = args.lane or [DEFAULT_LANE]
    profiles = {name: [lane for lane in value.split(",") if lane] for name, value in args.profile}
    bindings = dict(args.bind)
    with connected(args) as connection:
        client = Client(connection, make_gateway(args))
        with connection.transaction():
            for lane in lanes:
                connection.execute("select emem.create_lane(%s::text)", (lane,))
            for name, profile_lanes in profiles.items():
                connection.execute("select emem.create_agent_profile(%s::text, %s::text[])", (name, profile_lanes))
            for role, profile in bindings.items():
                connection.execute("select emem.bind_role(%s::name, %s::text)", (role, profile))
            for profile, mode in args.isolation:
                connection.execute("select emem.set_agent_setting(%s, 'emem.lane_isolation', %s)", (profile, mode))
            space_id = client.ensure_space(activate=False)
        declaration = client.gateway.declaration()
        active = client.run(calls.active_space())
        # The first space has no other to keep answering; a later one is switched to on request
        # only, and the database refuses that until it holds every vector (unless forced): the
        # space and the rest stay set up either way.
        if active is None or (args.activate and active.space_id != space_id):
            client.run(calls.activate_space(space_id, args.force))
            active = client.run(calls.active_space())
        named = set(profiles) | {profile for profile, _ in args.isolation}
        isolation = {name: mode for name, mode in client.run(profile_isolations()).items() if name in named}
    answer = InitAnswer(
        space_id,
        declaration.model_name,
        declaration.dimension,
        active is not None and active.space_id == space_id,
        lanes,
        profiles,
        bindings,
        active.space_id if active else None,
        isolation,
    )
    if option(args, "json"):
        print_json(answer)
        return ExitCode.OK
    space = f"embedding space {space_id}: {answer.model_name} ({answer.dimension} dimensions)"
    if answer.active:
        out(f"{space}, active")
    else:
        out(f"{space}, inactive: space {answer.active_space_id} keeps answering finds")
        out("  fill it: emem embed (with this gateway); then switch: emem init --activate (with this gateway)")
    out(f"lanes: {', '.join(lanes)}")
    for name, mode in isolation.items():
        reads = f"reads {', '.join(profiles[name])}; " if name in profiles else ""
        out(f"agent profile {name}: {reads}{isolation_line(name, mode)}")
    for role, profile in bindings.items():
        out(f"role {role}: agent profile {profile}")
    return ExitCode.OK


def isolation_line(profile: str, mode: str) -> str:
    if mode == "strict":
        return "lane isolation strict"
    return f"lane isolation {mode} (other lanes show through; for secrets: --isolation {profile}=strict)"


def run_ingest(args: argparse.Namespace) -> int:
    try:
        options = IngestOptions(
            lane=args.lane,
            tags=tuple(args.tag),
            batch_size=args.batch_size,
            progress=not args.no_progress and sys.stderr.isatty(),
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
    return ExitCode.SKIPPED if report.problems else ExitCode.OK


def window_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.kind == "notes":
        return {}
    shape = WindowShape(args.window_size, args.window_stride)
    if args.kind == "conversations":
        return {"conversation_windows": shape}
    return {"file_windows": shape, "chunk_chars": args.chunk_chars}


@contextmanager
def stop_on_interrupt(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C sets `stop` as well as interrupting: a following worker whose KeyboardInterrupt a
    library swallowed (seen once: the worker went on polling) still ends at its next look."""

    def interrupt(signum: int, frame: object) -> None:
        stop.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_embed(args: argparse.Namespace) -> int:
    try:
        options = EmbedOptions(
            space_id=args.space,
            batch_size=args.batch_size,
            follow=args.follow,
            poll_interval=args.poll_interval,
            retries=args.retries,
            progress=not args.no_progress and sys.stderr.isatty(),
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    stop = threading.Event()
    with client_for(args) as client, stop_on_interrupt(stop):
        report = embed_queue(client, options, stop)
    if option(args, "json"):
        print_json(report)
    else:
        print_embed_report(report)
    return ExitCode.ERROR if report.refused else ExitCode.OK


def print_embed_report(report: EmbedReport) -> None:
    texts = report.records_embedded + report.windows_embedded
    rate = f": {texts / report.seconds:.0f} texts/s" if texts and report.seconds else ""
    out(
        f"embedded {report.records_embedded} records and {report.windows_embedded} windows into space "
        f"{report.space_id} ({report.model_name}) in {report.seconds:.1f} s{rate}"
    )
    if report.refused:
        out(f"the gateway refused {report.refused} text(s), queued again for later: {report.refusal}")
    coverage = report.coverage
    if coverage is None:
        return
    out(
        coverage_line(
            coverage.records_with_vector,
            coverage.records,
            coverage.windows_with_vector,
            coverage.windows,
            coverage.lanes,
        )
    )
    if not coverage.is_active and coverage.missing == 0:
        out("every vector is there: switch to this space with emem init --activate (with this gateway)")


def coverage_line(records_with_vector: int, records: int, windows_with_vector: int, windows: int, lanes: str) -> str:
    where = "every lane" if lanes == "all" else "the lanes this role reads"
    return (
        f"vectors: {records_with_vector} of {records} records, {windows_with_vector} of {windows} windows (in {where})"
    )


def print_report(report: IngestReport) -> None:
    out(f"records: {report.records_created} written, {report.records_existing} already stored")
    out(f"windows: {report.windows_created} written, {report.windows_existing} already stored")
    out(f"edges:   {report.edges_created} written, {report.edges_existing} already stored")
    for version in report.new_versions:
        out(f"new version: {version}")
    if report.queued_for_embedding:
        out(
            f"{report.queued_for_embedding} records and windows were written without a vector, for the embedding "
            f"queue: run emem embed once the gateway is back ({report.gateway_problem})"
        )
    if report.problems:
        out(f"skipped {len(report.problems)} item(s):")
        for problem in report.problems:
            out(f"  {problem.source}: {problem.reason}")
    if report.skipped_files:
        out(f"not read: {len(report.skipped_files)} file(s) of the folders that are no documents:")
        for skipped in report.skipped_files:
            out(f"  {skipped.source}")


def run_find(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        page = client.find(args.question, args.page, args.page_size)
    if option(args, "json"):
        print_json(page)
    else:
        print_find_page(page)
    return ExitCode.OK


def candidates(total: int, exact: bool) -> str:
    """The totals as counted: exact, or a lower bound (past emem.exact_totals_up_to)."""
    return f"{total} candidates" if exact else f"at least {total} candidates"


def find_summary(page: FindPage) -> list[str]:
    """What the page is and which lookups answered it, as the database lists them; why it is degraded."""
    ran = [lookup.label for lookup in page.lookups if lookup.ran]
    lines = [
        f"page {page.page} of {page.total_pages}, {candidates(page.total_candidates, page.totals_exact)}, "
        f"from {', '.join(ran) if ran else 'no lookup'}"
    ]
    if page.degraded_reason == calls.VECTORS_INCOMPLETE:
        lines.append(f"DEGRADED ({calls.VECTORS_INCOMPLETE}): {INCOMPLETE_MEANS}")
    elif page.degraded:
        skipped = [lookup.label for lookup in page.lookups if not lookup.ran]
        lines.append(
            f"DEGRADED ({page.degraded_reason}): no question vector, so "
            + (f"{', '.join(skipped)} did not run and " if skipped else "")
            + "distances are placeholders"
        )
        if page.degraded_message:
            lines.append(f"  {page.degraded_message}")
    return lines


INCOMPLETE_MEANS = (
    "records or windows lack a vector of the active space: the vector lookups cannot reach them until "
    "emem embed gives them one"
)


FIND_COLUMNS = ["rank", "id", "kind", "lane", "placed by", "found by", "distance", "content"]


def find_cells(row: FindRow, labels: Mapping[str, str], content: str | None = None) -> list[str]:
    """A find row as table cells (FIND_COLUMNS), lookups by their `labels` (lookup_labels); `content`
    replaces the record's text, e.g. by an excerpt."""
    return [
        str(row.rank),
        str(row.record_id),
        row.kind,
        row.lane,
        labels.get(row.placed_by, row.placed_by),
        "+".join(labels.get(name, name) for name in row.found_by),
        f"{row.distance:.3f}" if row.distance_kind == "cosine" else "-",
        row.content if content is None else content,
    ]


def lookup_labels(page: FindPage) -> dict[str, str]:
    return {lookup.name: lookup.label for lookup in page.lookups}


def print_find_page(page: FindPage) -> None:
    for line in find_summary(page):
        out(line)
    labels = lookup_labels(page)
    print_table(FIND_COLUMNS, [find_cells(row, labels) for row in page.rows])
    if page.total_candidates and not page.rows:
        out("(every record of this page lies in lanes outside this role's agent profile)")


def run_explain(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        explanation = client.explain(args.question, args.page, args.page_size)
        registry = client.lookup_registry()
    if option(args, "json"):
        print_json(explanation)
    else:
        print_explanation(explanation, registry)
    return ExitCode.OK


def print_explanation(explanation: Mapping[str, Any], registry: list[RegisteredLookup]) -> None:
    """The analysis, then a table of the profile's lookups and one of each row's rank in their lists,
    lookups in the registry's (the merge's tie) order and by its labels."""
    question = explanation["question"]
    out(f"terms: {', '.join(question['terms']) or '(none)'}")
    out(f"words WordNet knows: {', '.join(question['known_words']) or '(none)'}")
    out(f"terms for full text: {', '.join(question['unknown_terms']) or '(none)'}")
    out(space_line(explanation.get("active_space")))
    if explanation["degraded_reason"] == calls.VECTORS_INCOMPLETE:
        out(f"DEGRADED ({calls.VECTORS_INCOMPLETE}): {INCOMPLETE_MEANS}")
    elif explanation["degraded"]:
        out(f"DEGRADED ({explanation['degraded_reason']}): the vector lookups do not run")
        if explanation.get("degraded_message"):
            out(f"  {explanation['degraded_message']}")
    counted = candidates(explanation["total_candidates"], explanation.get("totals_exact", True))
    merged = explanation.get("merge_milliseconds")  # shown only to a role that reads every lane
    out(counted + (f", merged in {merged:.1f} ms" if merged is not None else ""))
    profile = explanation["pipeline_profile"]
    in_profile = [lookup for lookup in registry if lookup.name in profile]
    labels = {lookup.name: lookup.label for lookup in registry}
    out("")
    if "lookups" not in explanation:  # an agent under page_filter: lists span every lane
        out("each lookup's counts and ranks are shown to the extension's owner, or under strict isolation")
        print_table(
            ["rank", "id", "placed by", "found by"],
            [
                [
                    str(row["rank"]),
                    str(row["record_id"]),
                    labels.get(row["placed_by"], row["placed_by"]),
                    ", ".join(labels.get(name, name) for name in row["found_by"]),
                ]
                for row in explanation["rows"]
            ],
        )
        return
    print_lookups(explanation, in_profile)
    out("")
    out("rank of each row of the page in each lookup's list (-: not in it, or beyond what was read):")
    print_table(
        ["rank", "id", "placed by", *(lookup.label for lookup in in_profile)],
        [
            [str(row["rank"]), str(row["record_id"]), labels.get(row["placed_by"], row["placed_by"])]
            + [rank_text(row["list_ranks"].get(lookup.name)) for lookup in in_profile]
            for row in explanation["rows"]
        ],
    )


def print_lookups(explanation: Mapping[str, Any], in_profile: list[RegisteredLookup]) -> None:
    """Each lookup's weight and candidates; its milliseconds only where the database gave times, which
    it gives roles that read every lane only (an agent under strict isolation gets counts and ranks)."""
    timed = "merge_milliseconds" in explanation
    if not timed:
        out("times, plans and statements are shown to the extension's owner only")
    profile = explanation["pipeline_profile"]
    print_table(
        ["lookup", "label", "weight", "candidates", *(["ms"] if timed else [])],
        [
            [
                lookup.name,
                lookup.label,
                f"{float(profile[lookup.name]):g}",
                *lookup_figures(explanation["lookups"].get(lookup.name), timed),
            ]
            for lookup in in_profile
        ],
    )


def lookup_figures(figures: Mapping[str, Any] | None, timed: bool) -> list[str]:
    """A lookup's candidates (and milliseconds when timed), or that it was skipped (a vector lookup, degraded)."""
    if figures is None:
        return ["-", "skipped"] if timed else ["skipped"]
    return [str(figures["candidates"]), *([f"{figures['milliseconds']:.1f}"] if timed else [])]


def rank_text(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def run_timeline(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        records = client.timeline(args.from_time, args.to_time, args.page, args.page_size, args.kind, args.tag)
    if option(args, "json"):
        print_json(records)
    else:
        print_timeline(records)
    return ExitCode.OK


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
        isolations = client.run(profile_isolations())
    if option(args, "json"):
        print_json(health)
    else:
        print_health(health, isolations)
    return ExitCode.OK if health.ok else ExitCode.DEGRADED


def print_health(health: Health, isolations: Mapping[str, str]) -> None:
    reasons = health.reasons + ([health.gateway_reason] if health.gateway_reason else [])
    out(f"status: {health.status}" + (f" ({', '.join(reasons)})" if reasons else ""))
    declared = health.declared or {}
    if declared.get("model_name"):
        out(f"gateway model: {declared['model_name']} ({declared['dimension']} dimensions)")
    else:
        out("gateway model: unreadable" + (f": {health.gateway_message}" if health.gateway_message else ""))
    out(space_line(health.active_space))
    for name, mode in isolations.items():
        out(f"agent profile {name}: {isolation_line(name, mode)}")
    if health.coverage is not None:
        coverage = health.coverage
        out(
            coverage_line(
                coverage["records_with_vector"],
                coverage["records"],
                coverage["windows_with_vector"],
                coverage["windows"],
                coverage["lanes"],
            )
        )
        if calls.VECTORS_INCOMPLETE in health.reasons:
            out("  emem embed (with the active space's gateway) gives the rest theirs")
    if not health.ok:
        out("degraded is not an outage: find answers meanwhile from the lookups that need no vector")


def space_line(space: Mapping[str, Any] | None) -> str:
    if space is None:
        return "active space: none (run `emem init`)"
    return f"active space: {space['space_id']}: {space['model_name']} ({space['dimension']} dimensions)"


def run_serve(args: argparse.Namespace) -> int:
    try:  # fastapi and uvicorn load only for this command
        from emem_client.http import serve
    except ImportError as error:
        raise CommandError(
            f"the HTTP service needs the server extra ({error.name} is not installed): "
            f"{extra_install_command('server')}"
        ) from None
    try:
        settings = ServiceSettings(
            conninfo=option(args, "dsn"),
            tokens_file=args.tokens,
            no_auth=args.no_auth,
            bind_host=args.host,
            allowed_hosts=tuple(args.allowed_host),
            statement_timeout=args.statement_timeout,
            pool_size=args.pool_size,
            pool_timeout=args.pool_timeout,
            max_question_chars=args.max_question_chars,
            max_body_bytes=args.max_body_bytes,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    try:
        serve(settings, make_gateway(args), args.port)
    except StartupError as error:
        raise CommandError(str(error)) from None
    return 0


def add_mcp_command(commands: Commands, common: argparse.ArgumentParser) -> None:
    mcp = commands.add_parser(
        "mcp",
        parents=[common],
        help="the MCP server for agents, on stdio or streamable HTTP: "
        "find, timeline, remember, link, explain, health, lanes",
    )
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default stdio")
    mcp.add_argument(
        "--lane",
        help="lane remember writes to when a call names none and the caller may write it "
        "(default: the caller's one writable lane)",
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


COMMANDS: list[Callable[[Commands, argparse.ArgumentParser], None]] = [
    add_init,
    add_ingest,
    add_embed,
    add_find,
    add_explain,
    add_timeline,
    add_health,
    add_serve_command,
    add_mcp_command,
]


def run_mcp(args: argparse.Namespace) -> int:
    import asyncio

    try:
        from emem_client import mcp_server  # the mcp SDK loads only for this command
    except ModuleNotFoundError as error:
        raise CommandError(f"emem mcp needs the mcp extra: {extra_install_command('mcp')} ({error})") from None

    dsn, gateway = option(args, "dsn"), make_gateway(args)
    settings = {"lane": args.lane, "limits": Limits(statement_timeout=args.statement_timeout)}
    try:
        if args.transport == "http":
            access = mcp_access(args)
            asyncio.run(mcp_server.serve_http(dsn, gateway, host=args.host, port=args.port, **access, **settings))
        elif args.tokens or args.allowed_host:
            raise UsageError("--tokens and --allowed-host are for --transport http")
        else:
            asyncio.run(mcp_server.serve_stdio(dsn, gateway, role=args.role, **settings))
    except StartupError as error:
        raise CommandError(str(error)) from None
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

# Terminal controls that data must not send to a terminal: C0 (ESC starts sequences that retitle
# the window or write the clipboard, BEL rings), DEL, C1 (CSI, OSC ...) and bidirectional overrides
# that reorder what is shown.
TERMINAL_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# JSON escapes C0 itself; the rest may stand raw in a JSON string, so it is escaped as \\uXXXX.
RAW_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """The text with terminal controls shown as Python-style escapes (\\x1b, \\u202e)."""
    return TERMINAL_CONTROLS.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def out(line: str = "") -> None:
    """Prints one line of table output, data included, with terminal controls escaped."""
    print(visible(line))


def print_json(value: Any) -> None:
    text = json.dumps(plain(value), indent=2, ensure_ascii=False, default=calls.json_value)
    print(RAW_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text))


def plain(value: Any) -> Any:
    """Dataclasses (and lists of them) as dicts, for json."""
    if isinstance(value, list):
        return [plain(item) for item in value]
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Columns sized to their values; the last one (the content) cut to the terminal's width."""
    if not rows:
        out("(no records)")
        return
    rows = [[visible(" ".join(cell.split())) for cell in row] for row in rows]
    widths = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers[:-1])]
    room = max(20, shutil.get_terminal_size((160, 24)).columns - sum(widths) - 2 * len(widths))
    print("  ".join(h.ljust(w) for h, w in zip(headers[:-1], widths, strict=True)) + "  " + headers[-1])
    for row in rows:
        last = row[-1] if len(row[-1]) <= room else row[-1][: room - 1] + "…"
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + last)


# ---- main -----------------------------------------------------------------------------------


def error_message(error: Exception) -> str:
    if isinstance(error, GatewayError):
        return f"the embedding gateway failed: {error}"
    return str(error).strip()


def service_failure(error: ServiceError) -> int:
    """What the service layer's situation says for the command line: its message and its exit code."""
    print(f"emem: error: {visible_lines(error.text())}", file=sys.stderr)
    return error.situation.exit_code or ExitCode.ERROR


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = run_version if args.version else getattr(args, "run", None)
    if run is None:
        parser.error("a command is required (or --version)")
    try:
        code = run(args)
        sys.stdout.flush()  # a closed pipe shows here, while it can still be handled
        return code
    except BrokenPipeError:
        # The reader (say `head`) has what it wanted. Python would complain again while flushing
        # stdout at exit, so stdout goes to /dev/null from here on.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OUTPUT_CLOSED
    except UsageError as error:
        print(f"emem: error: {visible(str(error))}", file=sys.stderr)
        return ExitCode.USAGE
    except (ServiceError, calls.ExtensionMissingError, psycopg.Error) as error:
        return service_failure(classify(error))
    except (CommandError, IngestError, EmbedError, GatewayError) as error:
        print(f"emem: error: {visible_lines(error_message(error))}", file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt:
        print("emem: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED


def visible_lines(text: str) -> str:
    """Each line with terminal controls escaped; the line breaks kept."""
    return "\n".join(visible(line) for line in text.split("\n"))


if __name__ == "__main__":
    sys.exit(main())
