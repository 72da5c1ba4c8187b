"""The three front ends in this process, for tests that compare them: the command line (cli.main),
the HTTP service (Starlette's TestClient on the real app and lifespan) and the MCP server (the SDK's
in-memory Client), on one database made for a test module (`World`, the `world` fixture of
tests/client/conftest.py). The embedding gateway is the tests' OpenAI-compatible service on
loopback, or a port where nothing listens; a database that is down is a loopback proxy to the real
one, switched off."""

import asyncio
import hashlib
import re
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from embeddings_service import serving
from fastapi.testclient import TestClient
from mcp import Client as McpClient
from mcp_types import CallToolResult

from emem_client import Client, OpenAIGateway, cli
from emem_client.access import new_token
from emem_client.http import create_app
from emem_client.mcp_server import EmemTools, create_server
from emem_client.service import Limits, Service, open_pool
from emem_client.service_settings import ServiceSettings

MODEL = "situations-8d"
DOWN_GATEWAY = "http://127.0.0.1:9/v1"  # nothing listens on port 9


@dataclass
class World:
    """The module's database, its roles and tokens, and the embeddings service."""

    host: str
    port: int
    user: str
    dbname: str
    agent: str  # reads and writes lane work
    reader: str  # reads lane work, writes nothing
    login: str  # the services' login role, may SET ROLE to both
    tokens_file: Path
    tokens: dict[str, str]
    embeddings_url: str

    def dsn(self, user: str | None = None, port: int | None = None, dbname: str | None = None) -> str:
        return f"host={self.host} port={port or self.port} dbname={dbname or self.dbname} user={user or self.user}"


@contextmanager
def made_world(host: str, port: int, user: str, directory: Path) -> Iterator[World]:
    """A database of its own for a test module (its tests only read, or write records of their own)."""
    dbname = f"situations_{uuid.uuid4().hex[:8]}"
    suffix = uuid.uuid4().hex[:6]
    agent, reader, login = f"agent_{suffix}", f"reader_{suffix}", f"service_{suffix}"
    with psycopg.connect(host=host, port=port, user=user, dbname="postgres", autocommit=True) as admin:
        admin.execute(f"create database {dbname}")
        with psycopg.connect(host=host, port=port, user=user, dbname=dbname, autocommit=True) as fresh:
            fresh.execute("set client_min_messages = warning")
            fresh.execute("create extension emem cascade")
        for role in (agent, reader, login):
            admin.execute(f"create role {role} login")
        admin.execute(f"grant {agent}, {reader} to {login}")
    tokens = {agent: new_token(), reader: new_token()}
    tokens_file = directory / "tokens.toml"
    tokens_file.write_text(
        "".join(
            f'[[token]]\nrole = "{role}"\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
            for role, token in tokens.items()
        )
    )
    tokens_file.chmod(0o600)
    with serving() as embeddings, psycopg.connect(host=host, port=port, user=user, dbname=dbname) as owner:
        owner.autocommit = True
        owner.execute("select emem.create_lane('work'), emem.create_lane('other')")
        owner.execute("select emem.create_agent_profile('worker', array['work'])")
        owner.execute("select emem.create_agent_profile('looker', array['work'], array[]::text[])")
        owner.execute("select emem.bind_role(%s, 'worker'), emem.bind_role(%s, 'looker')", (agent, reader))
        with OpenAIGateway(embeddings.base_url, MODEL) as gateway:
            client = Client(owner, gateway)
            client.ensure_space()
            client.put_record("note", "Kowalski billed INV-2031", "work", ["invoice"])
        yield World(host, port, user, dbname, agent, reader, login, tokens_file, tokens, embeddings.base_url)
    with psycopg.connect(host=host, port=port, user=user, dbname="postgres", autocommit=True) as admin:
        admin.execute(f"drop database {dbname} with (force)")
        for role in (agent, reader, login):
            admin.execute(f"drop role {role}")


# ---- a database that goes down: a loopback proxy to the real one ------------------------------------


class Proxy:
    """Forwards 127.0.0.1:`port` to the test server until `down()`: then every connection is cut and new
    ones are refused, as by a database that stopped."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.running = True
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while self.running:
            try:
                near, _ = self.listener.accept()
            except OSError:
                return
            far = socket.create_connection(self.target)
            self.sockets += [near, far]
            for source, target in ((near, far), (far, near)):
                threading.Thread(target=self.pipe, args=(source, target), daemon=True).start()

    @staticmethod
    def pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass

    def down(self) -> None:
        self.running = False
        with suppress(OSError):  # wakes the accepting thread (close alone would leave it listening)
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for connection in self.sockets:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()


# ---- the three front ends ----------------------------------------------------------------------------


@dataclass
class Said:
    """What a front end answered: the CLI's exit code, the HTTP status and body, the MCP result."""

    code: int | None = None
    stderr: str = ""
    status: int | None = None
    body: Any = None
    tool: CallToolResult | None = None

    @property
    def mcp_text(self) -> str:
        """The tool error's text, without the SDK's "Error executing tool NAME: " before it."""
        assert self.tool is not None
        text = " ".join(block.text for block in self.tool.content if block.type == "text")
        return re.sub(r"^Error executing tool \w+: ", "", text)

    @property
    def tool_result(self) -> CallToolResult:
        """The MCP result, which every answer of the MCP server has."""
        assert self.tool is not None
        return self.tool


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> Said:
    capsys.readouterr()
    code = cli.main(list(args))
    return Said(code=code, stderr=capsys.readouterr().err)


@contextmanager
def http_service(world: World, conninfo: str, gateway_url: str, **settings: Any) -> Iterator[TestClient]:
    options = {"tokens_file": world.tokens_file, "statement_timeout": 1.0, **settings}
    app = create_app(ServiceSettings(conninfo, **options), OpenAIGateway(gateway_url, MODEL, retries=0))
    with TestClient(app, base_url="http://127.0.0.1") as http:
        yield http


def http_call(http: TestClient, world: World, method: str, path: str, role: str | None, **request: Any) -> Said:
    headers = {"Authorization": f"Bearer {world.tokens[role]}"} if role else {}
    answer = http.request(method, path, headers=headers | request.pop("headers", {}), **request)
    return Said(status=answer.status_code, body=answer.json())


@asynccontextmanager
async def mcp_session(conninfo: str, gateway_url: str, role: str) -> AsyncIterator[McpClient]:
    limits = Limits(statement_timeout=1.0)
    async with open_pool(conninfo, limits) as pool:
        service = Service(pool, OpenAIGateway(gateway_url, MODEL, retries=0), limits)
        async with McpClient(create_server(EmemTools(service, role))) as client:
            yield client


def mcp_call(conninfo: str, gateway_url: str, role: str, tool: str, arguments: dict[str, Any]) -> Said:
    async def scenario() -> CallToolResult:
        async with mcp_session(conninfo, gateway_url, role) as client:
            return await client.call_tool(tool, arguments)

    return Said(tool=asyncio.run(scenario()))
