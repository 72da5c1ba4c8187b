"""Fixtures: a real PostgreSQL (the cluster scripts/setup.sh starts) with the real extension.

pytest-postgresql fills a template database once per session (CREATE EXTENSION emem) and
hands each test a fresh clone, so tests are isolated and fast.
"""

import os
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from pytest_postgresql import factories

HOST = os.environ.get("EMEM_PGHOST", "127.0.0.1")
PORT = int(os.environ.get("EMEM_PGPORT", "5433"))
USER = os.environ.get("EMEM_PGUSER", "postgres")


def install_emem(host: str, port: int, user: str, dbname: str, password: str | None = None, **_: object) -> None:
    with psycopg.connect(host=host, port=port, user=user, dbname=dbname, password=password, autocommit=True) as conn:
        conn.execute("set client_min_messages = warning")
        conn.execute("create extension emem cascade")


def server_problem() -> str | None:
    """Why the test server cannot be used, or None."""
    try:
        psycopg.connect(host=HOST, port=PORT, user=USER, dbname="postgres", connect_timeout=5).close()
    except psycopg.OperationalError as error:
        return (
            f"no PostgreSQL at {HOST}:{PORT} as {USER} ({error}). Run the README's test command "
            "(bash scripts/test.sh), which starts the local cluster."
        )
    return None


@pytest.fixture(scope="session")
def server() -> None:
    """Tests that need the server skip without one (the pure modules still test), except where a
    server is required (EMEM_REQUIRE_SERVER=1, as the test command sets): there they fail."""
    problem = server_problem()
    if problem is not None:
        if os.environ.get("EMEM_REQUIRE_SERVER") == "1":
            pytest.fail(problem)
        pytest.skip(problem)


# One template per pytest process, so that concurrent runs do not share it.
postgresql_noproc = factories.postgresql_noproc(
    host=HOST, port=PORT, user=USER, dbname=f"emem_test_{os.getpid()}", load=[install_emem]
)
postgresql = factories.postgresql("postgresql_noproc")


@pytest.fixture
def db(server: None, postgresql: psycopg.Connection) -> psycopg.Connection:
    """A superuser connection (autocommit) to a fresh database with emem installed."""
    postgresql.autocommit = True
    return postgresql


@pytest.fixture
def dsn(db: psycopg.Connection) -> Callable[..., str]:
    """The DSN of the test database, for further sessions (optionally as another user)."""
    info = db.info

    def make(user: str = USER) -> str:
        return f"host={info.host} port={info.port} dbname={info.dbname} user={user}"

    return make


@pytest.fixture
def make_role(db: psycopg.Connection) -> Iterator[Callable[..., str]]:
    """Creates login roles with unique names; drops them (and what they own here) afterwards."""
    created: list[str] = []

    def make(prefix: str = "agent", profile: str | None = None) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        db.execute(f"create role {name} login")
        if profile is not None:
            db.execute("select emem.bind_role(%s, %s)", (name, profile))
        created.append(name)
        return name

    yield make
    for name in created:
        db.execute(f"drop owned by {name}")
        db.execute(f"drop role {name}")


@pytest.fixture(params=["an empty database", "a database with pgvector only"])
def database_without_emem(request: pytest.FixtureRequest, db: psycopg.Connection) -> Iterator[tuple[str, str]]:
    """(name, DSN) of a database on the test server without the emem extension."""
    name = f"no_emem_{uuid.uuid4().hex[:8]}"
    db.execute(f"create database {name} template template0")
    info = db.info
    conninfo = f"host={info.host} port={info.port} dbname={name} user={info.user}"
    if request.param == "a database with pgvector only":
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute("create extension vector")
    yield name, conninfo
    db.execute(f"drop database {name} with (force)")
