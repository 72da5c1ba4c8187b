"""The three front ends say the same thing for the same situation (docs/clients.md's table, made
from emem_client.service.SITUATIONS): once per situation, the command line's exit code, the HTTP
service's status and error body, and the MCP server's answer, each against the real database.

All three run in this process on one database made for the module: the command line through
cli.main, the HTTP service through Starlette's TestClient (the real app and lifespan), the MCP
server through the SDK's in-memory Client. The embedding gateway is the tests' OpenAI-compatible
service on loopback (or a port where nothing listens, for a gateway that is down); a database that
is down is a loopback proxy to the real one, switched off.
"""

import asyncio
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from front_ends import DOWN_GATEWAY, MODEL, Proxy, Said, World, http_call, http_service, mcp_call, mcp_session, run_cli
from mcp_types import CallToolResult

from emem_client import OpenAIGateway
from emem_client.mcp_server import serve_stdio
from emem_client.service import SITUATIONS, Limits, StartupError


def said_as(situation: str, cli_said: Said | None, http_said: Said | None, mcp_said: Said | None) -> None:
    """Each front end said what SITUATIONS says for `situation` (None: that front end cannot meet it)."""
    expected = SITUATIONS[situation]
    if cli_said is not None:
        assert cli_said.code == expected.exit_code, cli_said.stderr
    if http_said is not None:
        assert expected.http_status is not None, f"{situation} cannot happen over HTTP"
        assert http_said.status == expected.http_status, http_said.body
        if expected.http_status >= 400:
            assert http_said.body["situation"] == situation
    if mcp_said is not None and mcp_said.tool is not None:
        if expected.mcp == "tool error":
            assert mcp_said.tool.is_error and mcp_said.mcp_text.startswith(f"{situation}: "), mcp_said.mcp_text
        else:
            assert not mcp_said.tool.is_error, mcp_said.mcp_text


# ---- once per situation ------------------------------------------------------------------------------


def test_ok(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    dsn = world.dsn(world.agent)
    gateway = ["--gateway", "openai", "--openai-base-url", world.embeddings_url, "--openai-model", MODEL]
    cli_said = run_cli(capsys, "--dsn", dsn, *gateway, "find", "INV-2031")
    with http_service(world, world.dsn(world.login), world.embeddings_url) as http:
        http_said = http_call(http, world, "GET", "/find", world.agent, params={"q": "INV-2031"})
    mcp_said = mcp_call(world.dsn(world.login), world.embeddings_url, world.agent, "find", {"question": "INV-2031"})
    said_as("ok", cli_said, http_said, mcp_said)
    assert http_said.body["rows"][0]["content"] == mcp_said.tool_result.structured_content["rows"][0]["content"]


def test_degraded(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    cli_said = run_cli(capsys, "--dsn", world.dsn(world.agent), "--gateway", "openai", "--openai-base-url",
                       DOWN_GATEWAY, "--openai-model", MODEL, "health")  # fmt: skip
    with http_service(world, world.dsn(world.login), DOWN_GATEWAY) as http:
        http_said = http_call(http, world, "GET", "/health", world.agent)
    mcp_said = mcp_call(world.dsn(world.login), DOWN_GATEWAY, world.agent, "health", {})
    said_as("degraded", cli_said, http_said, mcp_said)
    assert http_said.body["status"] == mcp_said.tool_result.structured_content["status"] == "degraded"


def test_bad_input(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    """Arguments the database refuses (page 50,000 of 3 reaches past the deepest record a find reads)."""
    dsn, login = world.dsn(world.agent), world.dsn(world.login)
    cli_said = run_cli(capsys, "--dsn", dsn, "--gateway", "openai", "--openai-base-url", DOWN_GATEWAY,
                       "find", "INV-2031", "--page", "50000", "--page-size", "3")  # fmt: skip
    with http_service(world, login, DOWN_GATEWAY) as http:
        http_said = http_call(
            http, world, "GET", "/find", world.agent, params={"q": "x", "page": 50000, "page_size": 3}
        )
    mcp_said = mcp_call(login, DOWN_GATEWAY, world.agent, "find", {"question": "x", "page": 50000, "page_size": 3})
    said_as("bad_input", cli_said, http_said, mcp_said)
    message = "page 50000 of 3 reaches record 150000"
    assert message in cli_said.stderr and message in http_said.body["detail"] and message in mcp_said.mcp_text
    assert http_said.body["sqlstate"] == "22023" and "SQLSTATE 22023" in mcp_said.mcp_text


def test_bad_input_of_the_front_ends_own_checks_and_unknown_arguments(world: World) -> None:
    with http_service(world, world.dsn(world.login), DOWN_GATEWAY) as http:
        http_said = http_call(http, world, "GET", "/find", world.agent, params={"q": "x", "page_size": 5000})
    mcp_said = mcp_call(world.dsn(world.login), DOWN_GATEWAY, world.agent, "find", {"question": "x", "limit": 5})
    assert (http_said.status, http_said.body["situation"]) == (400, "bad_input")
    assert mcp_said.tool_result.is_error and "limit" in mcp_said.mcp_text and "Extra inputs" in mcp_said.mcp_text


def test_unauthenticated(world: World) -> None:
    with http_service(world, world.dsn(world.login), DOWN_GATEWAY) as http:
        http_said = http_call(http, world, "GET", "/find", None, params={"q": "x"})
    said_as("unauthenticated", None, http_said, None)


def test_forbidden(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    """A lane the role may not write: the command line's init, remember over HTTP and MCP."""
    cli_said = run_cli(capsys, "--dsn", world.dsn(world.agent), "--gateway", "openai", "--openai-base-url",
                       world.embeddings_url, "--openai-model", MODEL, "init", "--lane", "work")  # fmt: skip
    with http_service(world, world.dsn(world.login), world.embeddings_url) as http:
        http_said = http_call(
            http, world, "POST", "/records", world.agent, json={"kind": "note", "content": "x", "lane": "other"}
        )
    mcp_said = mcp_call(
        world.dsn(world.login), world.embeddings_url, world.agent, "remember", {"content": "x", "lane": "other"}
    )
    said_as("forbidden", cli_said, http_said, mcp_said)
    assert "SQLSTATE 42501" in cli_said.stderr and http_said.body["sqlstate"] == "42501"


def test_remember_without_a_lane_goes_to_the_callers_own_lane_or_says_which_to_name(world: World) -> None:
    stored = mcp_call(world.dsn(world.login), world.embeddings_url, world.agent, "remember", {"content": "mine"})
    assert stored.tool_result.structured_content["lane"] == "work"
    refused = mcp_call(world.dsn(world.login), world.embeddings_url, world.reader, "remember", {"content": "x"})
    assert refused.mcp_text.startswith(f"forbidden: role {world.reader} may write no lane: agent profile looker")
    lanes = mcp_call(world.dsn(world.login), world.embeddings_url, world.reader, "lanes", {})
    assert lanes.tool_result.structured_content | {"explanation": ""} == {
        "role": world.reader,
        "reads_every_lane": False,
        "agent_profile": "looker",
        "reads": ["work"],
        "writes": [],
        "lane_isolation": "page_filter",
        "explanation": "",
    }
    with http_service(world, world.dsn(world.login), world.embeddings_url) as http:
        http_lanes = http_call(http, world, "GET", "/lanes", world.reader)
    assert http_lanes.body == lanes.tool_result.structured_content


def test_duplicate(world: World) -> None:
    """A conversation turn at a position another turn holds."""
    turn = {"kind": "conversation", "content": "first", "thread_id": f"t-{uuid.uuid4().hex}", "thread_position": 0}
    with http_service(world, world.dsn(world.login), world.embeddings_url) as http:
        assert http_call(http, world, "POST", "/records", world.agent, json=turn).status == 201
        http_said = http_call(http, world, "POST", "/records", world.agent, json=turn | {"content": "other"})
    mcp_said = mcp_call(world.dsn(world.login), world.embeddings_url, world.agent, "remember", turn | {"content": "3"})
    said_as("duplicate", None, http_said, mcp_said)


def test_too_large_and_host_not_allowed(world: World) -> None:
    with http_service(world, world.dsn(world.login), DOWN_GATEWAY, max_body_bytes=1024) as http:
        too_large = http_call(
            http, world, "POST", "/records", world.agent, json={"kind": "note", "content": "x" * 2000}
        )
        off_list = http_call(http, world, "GET", "/health", world.agent, headers={"Host": "evil.example"})
    said_as("too_large", None, too_large, None)
    said_as("host_not_allowed", None, off_list, None)


def test_unavailable_when_the_database_goes_down_within_two_seconds(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy = Proxy(world.host, world.port)
    through_proxy = world.dsn(world.login, port=proxy.port)

    async def mcp_after_the_database_went_down() -> tuple[CallToolResult, float]:
        async with mcp_session(through_proxy, DOWN_GATEWAY, world.agent) as client:
            assert not (await client.call_tool("health", {})).is_error
            proxy.down()
            began = time.monotonic()
            result = await client.call_tool("find", {"question": "INV-2031"})
            return result, time.monotonic() - began

    second = Proxy(world.host, world.port)
    with http_service(world, world.dsn(world.login, port=second.port), DOWN_GATEWAY) as http:
        assert http_call(http, world, "GET", "/health", world.agent).status == 200
        second.down()
        began = time.monotonic()
        http_said = http_call(http, world, "GET", "/find", world.agent, params={"q": "INV-2031"})
        http_seconds = time.monotonic() - began
    tool, mcp_seconds = asyncio.run(mcp_after_the_database_went_down())
    cli_said = run_cli(capsys, "--dsn", world.dsn(world.agent, port=proxy.port), "timeline")
    said_as("unavailable", cli_said, http_said, Said(tool=tool))
    assert mcp_seconds <= 2.0 and http_seconds <= 2.0, (mcp_seconds, http_seconds)
    assert "cannot connect to PostgreSQL" in cli_said.stderr


def test_unavailable_after_the_statement_timeout(world: World) -> None:
    """A statement that waits for a lock longer than the statement timeout (1 s here)."""
    with psycopg.connect(world.dsn()) as locker:
        locker.execute("lock table emem.records in access exclusive mode")
        with http_service(world, world.dsn(world.login), DOWN_GATEWAY) as http:
            http_said = http_call(http, world, "GET", "/find", world.agent, params={"q": "INV-2031"})
        mcp_said = mcp_call(world.dsn(world.login), DOWN_GATEWAY, world.agent, "find", {"question": "INV-2031"})
        locker.rollback()
    said_as("unavailable", None, http_said, mcp_said)
    assert http_said.body["detail"] in mcp_said.mcp_text


def test_extension_missing(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    """The command line answers with it; both network services refuse to start, with the same words."""
    bare = f"bare_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(world.dsn(dbname="postgres"), autocommit=True) as admin:
        admin.execute(f"create database {bare}")
    try:
        conninfo = world.dsn(dbname=bare)
        cli_said = run_cli(capsys, "--dsn", conninfo, "timeline")
        with pytest.raises(StartupError) as http_refused, http_service(world, conninfo, DOWN_GATEWAY):
            pass
        with pytest.raises(StartupError) as mcp_refused:
            asyncio.run(
                serve_stdio(conninfo, OpenAIGateway(DOWN_GATEWAY, MODEL), role=None, lane=None, limits=Limits())
            )
    finally:
        with psycopg.connect(world.dsn(dbname="postgres"), autocommit=True) as admin:
            admin.execute(f"drop database {bare} with (force)")
    said_as("extension_missing", cli_said, None, None)
    message = f'the emem extension is not installed in database "{bare}"'
    assert message in cli_said.stderr and str(http_refused.value) == str(mcp_refused.value)
    assert str(http_refused.value).startswith(message)


def test_the_documented_table_is_the_service_layers() -> None:
    """docs/clients.md shows SITUATIONS as they are (every row, in order)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "clients.md").read_text()
    for situation in SITUATIONS.values():
        cells = [
            f"`{situation.name}`",
            situation.meaning,
            "-" if situation.exit_code is None else str(situation.exit_code),
            "-" if situation.http_status is None else str(situation.http_status),
            situation.mcp,
        ]
        assert f"| {' | '.join(cells)} |" in text, situation.name
