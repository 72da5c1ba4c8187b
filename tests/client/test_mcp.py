"""`emem mcp` driven by the MCP SDK's own client, against the real database.

Over stdio the client starts `emem mcp` as a subprocess. The embedding gateway is a real local
OpenAI-style server answering each text with a fixed vector (tests/client/test_gateways.py), so a
record whose content is the question sits at cosine distance 0; the down gateway is a port
where nothing listens.
"""

import argparse
import asyncio
import hashlib
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import httpx2
import psycopg
import pytest
from clusters import free_port
from embeddings_service import FakeService
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult
from psycopg import sql
from test_gateways import MODEL

from emem_client import Client as EmemClient
from emem_client import OpenAIGateway
from emem_client.cli import build_parser
from emem_client.gateways import extra_install_command
from emem_client.service import classify

T = TypeVar("T")
EMEM = Path(sys.executable).with_name("emem")
DOWN_GATEWAY_URL = "http://127.0.0.1:9/v1"  # nothing listens on port 9
DAY = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
INVOICE = "Kowalski billed INV-2031 for the Apollo migration"
MEETING = "Weekly sync with the Acme team moved to Tuesday"
SALARY = "Salary review for Anna: invoice INV-9 from the payroll office"
TOOLS = {"find", "timeline", "remember", "link", "explain", "health", "lanes"}


@pytest.fixture
def embeddings(service: FakeService) -> str:
    """The base URL of a local OpenAI-compatible embeddings server."""
    return service.base_url


@dataclass(frozen=True)
class Memory:
    """Two lanes with their records, a role that reads each, and the gateway options of the server."""

    ids: dict[str, int]
    roles: dict[str, str]
    gateway_options: list[str]


@pytest.fixture
def memory(db: psycopg.Connection, embeddings: str, make_role: Callable[..., str]) -> Memory:
    for lane in ("sales", "hr"):
        db.execute(
            "select emem.create_lane(%s), emem.create_agent_profile(%s, array[%s])", (lane, f"{lane}_agent", lane)
        )
    with OpenAIGateway(embeddings, MODEL) as gateway:
        client = EmemClient(db, gateway)
        client.ensure_space()
        notes = [
            (INVOICE, "sales", ["invoice", "project apollo"], DAY),
            (MEETING, "sales", ["meeting"], datetime(2024, 3, 2, 9, 0, tzinfo=UTC)),
            (SALARY, "hr", ["invoice", "payroll"], datetime(2024, 3, 3, 9, 0, tzinfo=UTC)),
        ]
        vectors = client.embed([content for content, *_ in notes])
        ids = client.put_records(
            [
                {"kind": "note", "content": content, "lane": lane, "tags": tags, "occurred_at": when, "vector": vector}
                for (content, lane, tags, when), vector in zip(notes, vectors, strict=True)
            ]
        )
    roles = {lane: make_role(lane, f"{lane}_agent") for lane in ("sales", "hr")}
    options = ["--gateway", "openai", "--openai-base-url", embeddings, "--openai-model", MODEL]
    return Memory(dict(zip(["invoice", "meeting", "salary"], ids, strict=True)), roles, options)


def server_environment() -> dict[str, str]:
    """This process's environment (the SDK would otherwise give the server a minimal one)."""
    return dict(os.environ)


def stdio_server(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=str(EMEM), args=["mcp", *args], env=server_environment())


def over_stdio(server: StdioServerParameters, scenario: Callable[[Client], Awaitable[T]]) -> T:
    """Runs `scenario` with an MCP client connected to `emem mcp` over stdio."""

    async def main() -> T:
        async with Client(server, read_timeout_seconds=60) as client:
            return await scenario(client)

    return asyncio.run(main())


def answer(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return " ".join(block.text for block in result.content if block.type == "text")


def mcp_help_tools() -> set[str]:
    """The tools `emem --help` says the MCP server offers: the words after the colon of mcp's help."""
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    (mcp_help,) = [action.help for action in commands._choices_actions if action.dest == "mcp"]
    return {name.strip() for name in str(mcp_help).split(":", 1)[1].split(",")}


@pytest.fixture
def sales_server(dsn: Callable[..., str], memory: Memory) -> StdioServerParameters:
    """`emem mcp` logged in as the role that reads lane sales."""
    return stdio_server("--dsn", dsn(memory.roles["sales"]), "--lane", "sales", *memory.gateway_options)


def test_the_server_lists_its_tools_with_descriptions_and_bounded_strict_input_schemas(
    sales_server: StdioServerParameters,
) -> None:
    tools = {tool.name: tool for tool in over_stdio(sales_server, lambda client: client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert len(tool.description or "") > 80, tool.name
        assert tool.input_schema["type"] == "object"
        assert all(spec.get("description") for spec in tool.input_schema["properties"].values()), tool.name
        assert tool.output_schema is not None, tool.name
        assert tool.input_schema["additionalProperties"] is False, tool.name  # unknown arguments are refused
    assert set(tools) == mcp_help_tools()  # `emem --help` names every tool the server lists
    assert tools["find"].input_schema["required"] == ["question"]
    assert {"page", "page_size"} <= set(tools["find"].input_schema["properties"])
    assert tools["remember"].input_schema["properties"]["kind"]["enum"] == ["note", "conversation"]
    assert "required" not in tools["timeline"].input_schema  # either end of the range may stay open
    find = tools["find"].input_schema["properties"]
    assert (find["page_size"]["minimum"], find["page_size"]["maximum"], find["page"]["maximum"]) == (1, 1000, 100000)
    assert find["question"]["maxLength"] == 2000
    assert tools["link"].input_schema["required"] == ["from_record_id", "to_record_id", "relation"]
    find_hints, remember_hints = tools["find"].annotations, tools["remember"].annotations
    assert find_hints is not None and remember_hints is not None
    assert find_hints.read_only_hint and not remember_hints.read_only_hint
    find_output = tools["find"].output_schema
    assert find_output is not None
    rows = find_output["$defs"]["FindRow"]["properties"]
    assert {"rank", "record_id", "lane", "distance_kind", "placed_by", "found_by", "windows"} <= set(rows)


def test_find_answers_with_ranked_rows_their_provenance_and_the_totals(
    sales_server: StdioServerParameters, memory: Memory
) -> None:
    page = answer(over_stdio(sales_server, lambda client: client.call_tool("find", {"question": INVOICE})))
    assert (page["page"], page["page_size"], page["degraded"], page["degraded_reason"]) == (1, 30, False, None)
    first = page["rows"][0]
    assert (first["rank"], first["record_id"], first["lane"], first["kind"]) == (
        1,
        memory.ids["invoice"],
        "sales",
        "note",
    )
    assert first["distance"] == pytest.approx(0.0, abs=1e-6) and first["distance_kind"] == "cosine"
    assert first["placed_by"] == "record_vectors"
    assert {"record_vectors", "fulltext"} <= set(first["found_by"])
    assert first["tags"] == ["invoice", "project apollo"] and first["windows"] == []
    assert page["total_candidates"] >= 2 and page["pipeline_profile"]["record_vectors"] == 40


def test_a_role_that_reads_one_lane_sees_only_that_lane(sales_server: StdioServerParameters, memory: Memory) -> None:
    async def scenario(client: Client) -> tuple[Any, ...]:
        found = await client.call_tool("find", {"question": "Which invoice mentions INV-9 or INV-2031?"})
        timeline = await client.call_tool("timeline", {"from_time": "2024-01-01", "to_time": "2024-12-31"})
        explained = await client.call_tool("explain", {"question": "payroll invoice INV-9"})
        other_lane = await client.call_tool("remember", {"content": "Into hr", "lane": "hr"})
        link_to_hr = await client.call_tool(
            "link", {"from_record_id": memory.ids["invoice"], "to_record_id": memory.ids["salary"], "relation": "x"}
        )
        return answer(found), answer(timeline), answer(explained), error_text(other_lane), error_text(link_to_hr)

    found, timeline, explained, other_lane, link_to_hr = over_stdio(sales_server, scenario)
    assert {row["lane"] for row in found["rows"]} == {"sales"}
    assert memory.ids["salary"] not in {row["record_id"] for row in found["rows"]}
    assert found["total_candidates"] == 3  # page_filter: totals count every lane
    assert [record["record_id"] for record in timeline["records"]] == [memory.ids["invoice"], memory.ids["meeting"]]
    assert "lookups" not in explained  # counts across lanes are the owner's
    assert explained["question"]["unknown_terms"] == ["INV-9"]
    assert "lane 'hr' is not a lane this role may write" in other_lane and "SQLSTATE 42501" in other_lane
    assert f"unknown to record {memory.ids['salary']}" in link_to_hr


def test_the_role_option_makes_every_call_act_as_that_role(dsn: Callable[..., str], memory: Memory) -> None:
    server = stdio_server("--dsn", dsn(), "--role", memory.roles["hr"], *memory.gateway_options)
    page = answer(over_stdio(server, lambda client: client.call_tool("find", {"question": "invoice"})))
    assert {row["record_id"] for row in page["rows"]} == {memory.ids["salary"]}


def test_timeline_lists_records_by_date_with_kinds_and_tags(
    sales_server: StdioServerParameters, memory: Memory
) -> None:
    async def scenario(client: Client) -> tuple[Any, ...]:
        tagged = await client.call_tool(
            "timeline",
            {"from_time": "2024-03-01", "to_time": "2024-03-31T23:59", "kinds": ["note"], "tags": ["meeting"]},
        )
        until_now = await client.call_tool("timeline", {"from_time": "2024-03-01T09:00:00+00:00", "page_size": 1})
        return answer(tagged), answer(until_now)

    tagged, until_now = over_stdio(sales_server, scenario)
    assert [record["content"] for record in tagged["records"]] == [MEETING]
    assert tagged["from_time"] == "2024-03-01T00:00:00Z" and tagged["to_time"] == "2024-03-31T23:59:00Z"
    assert [record["record_id"] for record in until_now["records"]] == [memory.ids["invoice"]]
    assert until_now["to_time"] is None  # no upper bound, as on the command line


def test_remember_embeds_through_the_gateway_and_find_reaches_it_by_meaning(
    sales_server: StdioServerParameters, db: psycopg.Connection
) -> None:
    note = "The Acme contract renewal is due on 30 June"

    async def scenario(client: Client) -> tuple[Any, Any]:
        stored = await client.call_tool(
            "remember", {"content": note, "tags": ["contract", "customer:acme"], "metadata": {"source": "chat"}}
        )
        return answer(stored), answer(await client.call_tool("find", {"question": note}))

    stored, page = over_stdio(sales_server, scenario)
    assert (stored["kind"], stored["lane"], stored["embedded"], stored["embedding_problem"]) == (
        "note",
        "sales",
        True,
        None,
    )
    assert (page["rows"][0]["record_id"], page["rows"][0]["distance_kind"]) == (stored["record_id"], "cosine")
    assert page["rows"][0]["tags"] == ["contract", "customer:acme"]
    assert db.execute(
        "select r.metadata, count(v.*) from emem.records r left join emem.record_vectors v using (record_id)"
        " where r.record_id = %s group by r.metadata",
        (stored["record_id"],),
    ).fetchone() == ({"source": "chat"}, 1)


def test_remember_appends_conversation_turns_with_windows_over_the_latest(
    sales_server: StdioServerParameters, db: psycopg.Connection
) -> None:
    turns = ["Maya: the finance export failed again", "Tomás: it runs on the replica now", "Maya: thanks, closing it"]

    async def scenario(client: Client) -> list[Any]:
        stored = []
        for turn in turns:
            arguments = {"content": turn, "kind": "conversation", "thread_id": "standup-7", "tags": ["ops"]}
            stored.append(answer(await client.call_tool("remember", arguments)))
        taken = await client.call_tool(
            "remember", {"content": "again", "kind": "conversation", "thread_id": "standup-7", "thread_position": 1}
        )
        no_thread = await client.call_tool("remember", {"content": "orphan turn", "kind": "conversation"})
        return [*stored, error_text(taken), error_text(no_thread)]

    *stored, taken, no_thread = over_stdio(sales_server, scenario)
    assert [turn["thread_position"] for turn in stored] == [0, 1, 2]
    assert stored[0]["window_id"] is None and None not in [turn["window_id"] for turn in stored[1:]]
    members = db.execute(
        "select w.window_id, array_agg(m.record_id order by m.record_id) from emem.windows w"
        " join emem.window_members m using (window_id) group by w.window_id order by w.window_id"
    ).fetchall()
    ids = [turn["record_id"] for turn in stored]
    assert members == [(stored[1]["window_id"], ids[:2]), (stored[2]["window_id"], ids)]
    assert "already has a turn at position 1: leave thread_position out" in taken
    assert "conversation and file records need a thread_id" in no_thread and "SQLSTATE 22023" in no_thread


def test_remember_while_the_gateway_is_down_stores_without_a_vector_and_says_so(
    dsn: Callable[..., str], memory: Memory, db: psycopg.Connection
) -> None:
    server = stdio_server("--dsn", dsn(memory.roles["sales"]), "--lane", "sales", "--gateway", "openai",
                          "--openai-base-url", DOWN_GATEWAY_URL)  # fmt: skip

    async def scenario(client: Client) -> tuple[Any, Any, Any]:
        stored = await client.call_tool("remember", {"content": "Call Acme about the renewal", "tags": ["todo"]})
        page = await client.call_tool("find", {"question": "any todo for Acme?"})
        return answer(stored), answer(page), answer(await client.call_tool("health", {}))

    stored, page, health = over_stdio(server, scenario)
    assert (stored["embedded"], stored["embedding_problem"]) == (False, "gateway_down")
    assert "stored without a vector (gateway_down)" in stored["message"]
    assert (page["degraded"], page["degraded_reason"]) == (True, "gateway_down")
    assert page["rows"][0]["record_id"] == stored["record_id"]
    assert page["rows"][0]["distance_kind"] == "placeholder"
    assert (health["status"], health["gateway_reason"]) == ("degraded", "gateway_down")
    vectors = db.execute("select count(*) from emem.record_vectors where record_id = %s", (stored["record_id"],))
    assert vectors.fetchone() == (0,)


def test_link_relates_two_records_and_find_matches_its_properties(
    sales_server: StdioServerParameters, memory: Memory, db: psycopg.Connection
) -> None:
    async def scenario(client: Client) -> tuple[Any, Any]:
        linked = await client.call_tool(
            "link",
            {
                "from_record_id": memory.ids["meeting"],
                "to_record_id": memory.ids["invoice"],
                "relation": "discussed",
                "properties": {"quarter": "Q3", "amount": "1200 EUR"},
            },
        )
        return answer(linked), answer(await client.call_tool("find", {"question": "What was discussed for Q3?"}))

    linked, page = over_stdio(sales_server, scenario)
    assert db.execute("select from_record_id, to_record_id, relation, properties from emem.edges").fetchall() == [
        (memory.ids["meeting"], memory.ids["invoice"], "discussed", {"quarter": "Q3", "amount": "1200 EUR"})
    ]
    assert linked == {
        "edge_id": linked["edge_id"],
        "from_record_id": memory.ids["meeting"],
        "to_record_id": memory.ids["invoice"],
        "relation": "discussed",
    }
    by_tags = {row["record_id"] for row in page["rows"] if "tags" in row["found_by"]}
    assert by_tags == {memory.ids["meeting"], memory.ids["invoice"]}


def test_explain_counts_only_for_roles_that_read_every_lane_and_health(
    sales_server: StdioServerParameters, dsn: Callable[..., str], memory: Memory
) -> None:
    question = {"question": "Which invoices did Kowalski send?"}

    async def scenario(client: Client) -> tuple[Any, Any]:
        return answer(await client.call_tool("explain", question)), answer(await client.call_tool("health", {}))

    explained, health = over_stdio(sales_server, scenario)
    assert explained["question"]["unknown_terms"] == ["Kowalski"] and explained["degraded"] is False
    assert "lookups" not in explained and all("list_ranks" not in row for row in explained["rows"])
    assert (health["status"], health["reasons"], health["declared"]["model_name"]) == ("ok", [], MODEL)
    owner = stdio_server("--dsn", dsn(), *memory.gateway_options)
    everything = answer(over_stdio(owner, lambda client: client.call_tool("explain", question)))
    assert everything["lookups"]["tags"]["candidates"] == 2


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("find", {"question": "invoice", "page_size": 5000}, "less than or equal to 1000"),
    ("find", {"question": "invoice", "page": 0}, "greater than or equal to 1"),
    ("find", {"question": "invoice", "page": 2**40}, "less than or equal to 100000"),
    ("find", {"question": "invoice", "page": 50000, "page_size": 3}, "bad_input: page 50000 of 3 reaches record"),
    ("find", {"question": "invoice", "limit": 5}, "limit"),
    ("find", {"question": "invoice", "k": 5, "filters": {}}, "Extra inputs are not permitted"),
    ("find", {"question": "invoice", "page": "second"}, "page"),
    ("find", {}, "question"),
    ("timeline", {"from_time": "2024-03-05", "to_time": "2024-03-01"}, "the timeline needs from_time <= to_time"),
    ("timeline", {"from_time": "yesterday"}, "from_time"),
    (
        "timeline",
        {"from_time": "2024-03-01", "kinds": ["memo"]},
        "Input should be 'note', 'conversation', 'file' or 'entity'",
    ),
    ("remember", {"content": "   "}, "content must be a non-empty text"),
    ("remember", {"content": "x", "kind": "memo"}, "kind"),
    ("remember", {"content": "x", "tags": [""]}, "at least 1 character"),
    (
        "remember",
        {"content": "x", "lane": "nowhere"},
        "forbidden: item 1: lane 'nowhere' is not a lane this role may write",
    ),
    ("link", {"from_record_id": 999999, "to_record_id": 1, "relation": "x"}, "unknown from record 999999"),
    ("link", {"from_record_id": 1, "to_record_id": 2, "relation": " "}, "relation must be a text of 1 to 200"),
    ("recall", {"question": "x"}, "Unknown tool"),
]


def test_bad_input_is_a_tool_error_with_the_reason_and_the_server_goes_on(
    sales_server: StdioServerParameters,
) -> None:
    async def scenario(client: Client) -> list[tuple[str, str]]:
        messages = []
        for tool, arguments, _ in BAD_CALLS:
            messages.append(
                (
                    error_text(await client.call_tool(tool, arguments)),
                    answer(await client.call_tool("health", {}))["status"],
                )
            )
        return messages

    for (tool, arguments, expected), (message, health) in zip(
        BAD_CALLS, over_stdio(sales_server, scenario), strict=True
    ):
        assert expected.lower() in message.lower(), (tool, arguments, message)
        assert health == "ok"


def test_the_server_refuses_to_start_as_a_role_it_cannot_act_as(dsn: Callable[..., str], memory: Memory) -> None:
    done = subprocess.run(
        [str(EMEM), "mcp", "--dsn", dsn(memory.roles["sales"]), "--role", memory.roles["hr"]],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=server_environment(),
    )
    assert done.returncode == 1
    assert f'permission denied to set role "{memory.roles["hr"]}"' in done.stderr
    assert done.stdout == ""  # stdout belongs to the protocol


def test_failures_of_the_server_itself_reach_the_agent_without_their_text(db: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as internal:
        db.execute("do $$ begin raise exception 'disk /srv/pg/secret is full' using errcode = 'XX000'; end $$")
    assert classify(internal.value).text() == (
        "internal database error; the server's log has the details (SQLSTATE XX000)"
    )
    with pytest.raises(psycopg.OperationalError) as unreachable:
        psycopg.connect("host=127.0.0.1 port=9 user=nobody dbname=nothing connect_timeout=3")
    assert classify(unreachable.value).text().startswith("the database cannot be reached")
    with pytest.raises(psycopg.Error) as refused:
        db.execute("select emem.put_record('memo', 'x', 'nowhere')")
    assert classify(refused.value).text().startswith("item 1: kind must be one of note, conversation, file, entity")


# ---- streamable HTTP: a real server process, bearer tokens mapped to roles -------------------------


@dataclass(frozen=True)
class HttpServer:
    url: str
    tokens: dict[str, str]  # lane -> a token whose role reads that lane


@contextmanager
def running(*args: str) -> Iterator[str]:
    """`emem mcp --transport http ARGS` on a free loopback port, until the block ends; its /mcp URL."""
    port = free_port()
    command = [str(EMEM), "mcp", "--transport", "http", "--port", str(port), *args]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server_environment()
    )
    try:
        deadline = time.monotonic() + 60
        while not accepts_connections(port):
            assert process.poll() is None, process.communicate()[1].decode()
            assert time.monotonic() < deadline, "emem mcp did not start listening"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.communicate(timeout=20)


def accepts_connections(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def tokens_file(path: Path, roles: dict[str, str]) -> dict[str, str]:
    """A tokens file granting each role a fresh token (stored as its SHA-256); the tokens by key."""
    tokens = {key: secrets.token_urlsafe(32) for key in roles}
    path.write_text(
        "".join(
            f'[[token]]\nrole = "{role}"\nsha256 = "{hashlib.sha256(tokens[key].encode()).hexdigest()}"\n'
            for key, role in roles.items()
        )
    )
    path.chmod(0o600)
    return tokens


@pytest.fixture
def http_server(
    db: psycopg.Connection, dsn: Callable[..., str], make_role: Callable[..., str], memory: Memory, tmp_path: Path
) -> Iterator[HttpServer]:
    """The server logs in as a role of its own that reads nothing but may SET ROLE to each agent's role."""
    service = make_role("mcp_service")
    for role in memory.roles.values():
        db.execute(sql.SQL("grant {} to {}").format(sql.Identifier(role), sql.Identifier(service)))
    tokens = tokens_file(tmp_path / "tokens.toml", memory.roles)
    with running("--dsn", dsn(service), "--tokens", str(tmp_path / "tokens.toml"), *memory.gateway_options) as url:
        yield HttpServer(url, tokens)


@asynccontextmanager
async def http_client(url: str, token: str) -> AsyncIterator[Client]:
    """The SDK's client on the SDK's streamable HTTP transport, sending `token`."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def over_http(url: str, token: str, scenario: Callable[[Client], Awaitable[T]]) -> T:
    async def main() -> T:
        async with http_client(url, token) as client:
            return await scenario(client)

    return asyncio.run(main())


def test_http_each_token_acts_as_its_own_role(http_server: HttpServer, memory: Memory) -> None:
    async def as_hr(client: Client) -> tuple[Any, ...]:
        tools = await client.list_tools()
        found = answer(await client.call_tool("find", {"question": "Which invoice mentions INV-9 or INV-2031?"}))
        stored = answer(await client.call_tool("remember", {"content": "Anna accepted the offer", "lane": "hr"}))
        refused = error_text(await client.call_tool("remember", {"content": "Into sales", "lane": "sales"}))
        return {tool.name for tool in tools.tools}, found, stored, refused

    tools, found, stored, refused = over_http(http_server.url, http_server.tokens["hr"], as_hr)
    assert tools == TOOLS
    assert [row["record_id"] for row in found["rows"]] == [memory.ids["salary"]]
    assert (stored["lane"], stored["embedded"]) == ("hr", True)
    assert "lane 'sales' is not a lane this role may write" in refused

    async def as_sales(client: Client) -> tuple[Any, Any]:
        found = answer(await client.call_tool("find", {"question": "Anna accepted the offer"}))
        timeline = answer(await client.call_tool("timeline", {"from_time": "2024-01-01"}))
        return found, timeline

    found, timeline = over_http(http_server.url, http_server.tokens["sales"], as_sales)
    assert {row["lane"] for row in found["rows"]} == {"sales"}
    assert stored["record_id"] not in {row["record_id"] for row in found["rows"]}
    assert {record["lane"] for record in timeline["records"]} == {"sales"}


def test_http_interleaved_callers_never_borrow_each_others_role(http_server: HttpServer, memory: Memory) -> None:
    async def lanes_seen(token: str) -> set[str]:
        async with http_client(http_server.url, token) as client:
            seen: set[str] = set()
            for _ in range(5):
                page = answer(await client.call_tool("find", {"question": "invoice INV-9 INV-2031"}))
                seen |= {row["lane"] for row in page["rows"]}
            return seen

    async def main() -> list[set[str]]:
        return list(await asyncio.gather(*(lanes_seen(http_server.tokens[lane]) for lane in ["sales", "hr"] * 3)))

    assert asyncio.run(main()) == [{"sales"}, {"hr"}] * 3


def test_http_refuses_requests_without_a_token_or_from_another_host(http_server: HttpServer) -> None:
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=10) as http:
        for authorization in [None, "Bearer not-a-token", f"Basic {http_server.tokens['sales']}"]:
            sent = headers | ({"Authorization": authorization} if authorization else {})
            refused = http.post(http_server.url, json=listing, headers=sent)
            assert refused.status_code == 401, authorization
            assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        with_token = headers | {"Authorization": f"Bearer {http_server.tokens['sales']}"}
        for other in [{"Host": "attacker.example"}, {"Origin": "http://attacker.example"}]:
            refused = http.post(http_server.url, json=listing, headers=with_token | other)
            assert refused.status_code == 421, other
        assert http.post(http_server.url, json=listing, headers=with_token | {"Host": "localhost:1"}).status_code != 421


def test_http_refuses_to_start_without_tokens_or_as_a_role_it_cannot_act_as(
    dsn: Callable[..., str], memory: Memory, tmp_path: Path
) -> None:
    def emem_mcp(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(EMEM), "mcp", *args, "--port", str(free_port())],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env=server_environment(),
        )

    tokens = str(tmp_path / "tokens.toml")
    tokens_file(Path(tokens), {"hr": memory.roles["hr"]})
    cannot = emem_mcp("--transport", "http", "--dsn", dsn(memory.roles["sales"]), "--tokens", tokens)
    assert cannot.returncode == 1
    assert f'permission denied to set role "{memory.roles["hr"]}"' in cannot.stderr
    no_tokens = emem_mcp("--transport", "http", "--dsn", dsn())
    assert (no_tokens.returncode, no_tokens.stderr) == (
        2,
        "emem: error: --transport http needs --tokens FILE (bearer tokens mapped to database roles)\n",
    )
    (tmp_path / "tokens.toml").chmod(0o666)
    writable = emem_mcp("--transport", "http", "--dsn", dsn(), "--tokens", tokens)
    assert writable.returncode == 1 and "is writable by its group or others" in writable.stderr
    stdio_with_tokens = emem_mcp("--dsn", dsn(), "--tokens", tokens)
    assert (stdio_with_tokens.returncode, stdio_with_tokens.stderr) == (
        2,
        "emem: error: --tokens and --allowed-host are for --transport http\n",
    )


def test_without_the_mcp_extra_the_command_says_what_to_install() -> None:
    probe = "import sys; sys.modules['mcp'] = None; from emem_client import cli; sys.exit(cli.main(['mcp']))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith(f"emem: error: emem mcp needs the mcp extra: {extra_install_command('mcp')} (")
