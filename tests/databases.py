"""The test server's databases: login roles made for a test or a corpus, and corpora built once.

pytest-postgresql fills the session's template (CREATE EXTENSION emem) and gives a test a fresh
clone of it (conftest's `db`). A corpus that several tests need is built once, into a database
cloned from that template, and then serves two kinds of test (`@pytest.mark.corpus(build, read_only)`):
- a test that writes (read_only=False) gets its own clone of the built corpus (a copy, not a rebuild);
- a test that only reads (read_only=True) gets a session of its own on the built corpus itself,
  and fails if anything it holds changed afterwards (rows, sequences, statistics): a test that
  writes needs a clone.

(PYTEST_DONT_REWRITE: a helper module; its checks raise their own errors.)
"""

import itertools
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from pytest_postgresql.janitor import DatabaseJanitor

# A corpus's build function: fills the database it is given (its owner's connection), making the
# login roles it binds with `make_role`; what it returns reaches the tests (conftest's `built`).
MakeRole = Callable[..., str]
Build = Callable[[psycopg.Connection, MakeRole], Any]


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    user: str

    def conninfo(self, dbname: str, user: str | None = None) -> str:
        return f"host={self.host} port={self.port} dbname={dbname} user={user or self.user}"

    def connect(self, dbname: str, user: str | None = None) -> psycopg.Connection:
        return psycopg.connect(self.conninfo(dbname, user), autocommit=True)


@dataclass
class Roles:
    """Login roles with unique names, bound to agent profiles of `db`'s database when asked."""

    db: psycopg.Connection
    created: list[str] = field(default_factory=list)

    def make(self, prefix: str = "agent", profile: str | None = None) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        self.db.execute(sql.SQL("create role {} login").format(sql.Identifier(name)))
        if profile is not None:
            self.db.execute("select emem.bind_role(%s, %s)", (name, profile))
        self.created.append(name)
        return name

    def drop(self) -> None:
        """Drops the roles, and first what they own or were granted in `db`'s database."""
        for name in self.created:
            self.db.execute(sql.SQL("drop owned by {}").format(sql.Identifier(name)))
            self.db.execute(sql.SQL("drop role {}").format(sql.Identifier(name)))
        self.created.clear()


# What a corpus holds, read after every test that only reads it: each emem table's rows (their
# count and newest xmin), each sequence's last value and each table's analyses.
FINGERPRINT = """
    select c.oid::regclass::text, c.relkind::text,
           pg_catalog.pg_stat_get_last_analyze_time(c.oid)::text,
           pg_catalog.pg_stat_get_last_autoanalyze_time(c.oid)::text
    from pg_catalog.pg_class c
    where c.relnamespace = 'emem'::regnamespace and c.relkind in ('r', 'p', 'S')
    order by 1"""


def fingerprint(conn: psycopg.Connection) -> list[tuple[Any, ...]]:
    """What a test that only reads must leave as it found it."""
    relations = conn.execute(FINGERPRINT).fetchall()
    held = []
    for name, kind, analysed, autoanalysed in relations:
        relation = sql.SQL(name)  # regclass text: a quoted, qualified name
        if kind == "S":
            query = sql.SQL("select last_value, is_called from {}").format(relation)
        else:
            query = sql.SQL("select count(*), max(xmin::text::bigint) from {}").format(relation)
        row = conn.execute(query).fetchone()
        held.append((name, analysed, autoanalysed, *(row or ())))
    return held


def keep_statistics(conn: psycopg.Connection) -> None:
    """Autovacuum would analyse a corpus at some moment of the session, and the planner's
    estimates (which lists are broad, which totals an estimate decides) would change under the
    tests that read it or its clones: a corpus keeps the statistics it was built with, as the
    database of a single test does."""
    tables = conn.execute(
        "select c.oid::regclass::text from pg_catalog.pg_class c"
        " where c.relnamespace = 'emem'::regnamespace and c.relkind in ('r', 'p')"
    ).fetchall()
    for (table,) in tables:
        conn.execute(sql.SQL("alter table {} set (autovacuum_enabled = false)").format(sql.SQL(table)))


@dataclass
class Corpus:
    dbname: str
    value: Any
    fingerprint: list[tuple[Any, ...]]
    roles: list[str]


@dataclass
class Corpora:
    """The session's corpora, each built once into a database cloned from `template`, dropped (with
    the roles they made) at the end of the session. A test's clone is named `test_dbname`, as
    pytest-postgresql names a test's database."""

    server: Server
    template: str
    test_dbname: str
    built: dict[Build, Corpus] = field(default_factory=dict)
    numbers: Iterator[int] = field(default_factory=itertools.count)

    def get(self, build: Build) -> Corpus:
        """The corpus `build` makes, built the first time it is asked for."""
        if build not in self.built:
            self.built[build] = self.make(build)
        return self.built[build]

    def make(self, build: Build) -> Corpus:
        dbname = f"{self.test_dbname}_c{next(self.numbers)}_{build.__name__}"[:63]
        janitor = self.janitor(dbname, self.template)
        janitor.init()
        try:
            with self.server.connect(dbname) as owner:
                roles = Roles(owner)
                try:
                    value = build(owner, roles.make)
                    keep_statistics(owner)
                    return Corpus(dbname, value, fingerprint(owner), roles.created)
                except BaseException:
                    roles.drop()
                    raise
        except BaseException:
            janitor.drop()
            raise

    def janitor(self, dbname: str, template: str) -> DatabaseJanitor:
        """pytest-postgresql's: clones `template` into `dbname` (init) and drops it."""
        server = self.server
        return DatabaseJanitor(
            user=server.user, host=server.host, port=server.port, dbname=dbname, template_dbname=template
        )

    @contextmanager
    def reading(self, build: Build, test: str) -> Iterator[psycopg.Connection]:
        """A session of its own on the corpus; afterwards the corpus must hold what it held (else
        the test fails, and the corpus is built anew for the tests after it)."""
        corpus = self.get(build)
        with self.server.connect(corpus.dbname) as conn:
            yield conn
        with self.server.connect(corpus.dbname) as owner:
            after = fingerprint(owner)
        if after != corpus.fingerprint:
            self.forget(build)
            changed = [row for row in after if row not in corpus.fingerprint]
            raise AssertionError(
                f"{test} changed the corpus {build.__name__} it was to read only: {changed}."
                " A test that writes gets a clone: @pytest.mark.corpus(build, read_only=False)."
            )

    @contextmanager
    def clone(self, build: Build) -> Iterator[psycopg.Connection]:
        """A test's database holding a copy of the corpus, dropped afterwards."""
        dbname = self.test_dbname
        with self.janitor(dbname, self.get(build).dbname), self.server.connect(dbname) as conn:
            yield conn

    def forget(self, build: Build) -> None:
        """Drops the corpus with the roles it made."""
        corpus = self.built.pop(build)
        with self.server.connect(corpus.dbname) as owner:
            Roles(owner, corpus.roles).drop()
        with self.server.connect("postgres") as maintenance:
            maintenance.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(corpus.dbname)))

    def close(self) -> None:
        for build in list(self.built):
            self.forget(build)
