"""Fixtures: a real PostgreSQL (the cluster scripts/setup.sh starts) with the real extension.

pytest-postgresql fills a template database once per session (CREATE EXTENSION emem) and
hands each test a fresh clone, so tests are isolated and fast. A corpus several tests need is
built once (tests/databases.py): `@pytest.mark.corpus(build, read_only=False)` gives each test a
clone of it as `db`, `@pytest.mark.corpus(build, read_only=True)` a session on the corpus itself.
"""

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from databases import Corpora, Roles, Server
from pytest_postgresql import factories
from pytest_postgresql.executors import NoopExecutor

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


@pytest.fixture(scope="session")
def corpora(server: None, postgresql_noproc: NoopExecutor) -> Iterator[Corpora]:
    """The corpora built this session, each into a database cloned from the session's template."""
    template = postgresql_noproc.template_dbname
    built = Corpora(Server(HOST, PORT, USER), template, test_dbname=postgresql_noproc.dbname)
    yield built
    built.close()


BUILT = pytest.StashKey[Any]()


@pytest.fixture
def db(request: pytest.FixtureRequest, server: None) -> Iterator[psycopg.Connection]:
    """A superuser connection (autocommit) to a fresh database with emem installed; with a corpus
    marker, to a clone of the corpus, or (read_only) to the corpus itself."""
    marker = request.node.get_closest_marker("corpus")
    if marker is None:
        postgresql: psycopg.Connection = request.getfixturevalue("postgresql")
        postgresql.autocommit = True
        yield postgresql
        return
    (build,), read_only = marker.args, marker.kwargs["read_only"]  # required: a lone callable would be marked
    corpora: Corpora = request.getfixturevalue("corpora")
    request.node.stash[BUILT] = corpora.get(build).value
    if read_only:
        with corpora.reading(build, request.node.nodeid) as conn:
            yield conn
    else:
        with corpora.clone(build) as conn:
            yield conn


@pytest.fixture
def built(db: psycopg.Connection, request: pytest.FixtureRequest) -> Any:
    """What the build function of the test's corpus returned."""
    return request.node.stash[BUILT]


@pytest.fixture
def dsn(db: psycopg.Connection) -> Callable[..., str]:
    """The DSN of the test database, for further sessions (optionally as another user)."""
    info = db.info

    def make(user: str = USER) -> str:
        return f"host={info.host} port={info.port} dbname={info.dbname} user={user}"

    return make


@pytest.fixture
def make_role(db: psycopg.Connection) -> Iterator[Callable[..., str]]:
    """Creates login roles with unique names (bound to a profile when asked); drops them (and what
    they own here) afterwards."""
    roles = Roles(db)
    yield roles.make
    roles.drop()


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
