"""Connections to the benchmark's server and database."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import psycopg

# A statement's text, and its parameters: positional (%s) or named (%(name)s).
Query = str | psycopg.sql.SQL | psycopg.sql.Composed
Params = tuple[Any, ...] | dict[str, Any]


@dataclass(frozen=True)
class Server:
    host: str = os.environ.get("EMEM_PGHOST", "127.0.0.1")
    port: int = int(os.environ.get("EMEM_PGPORT", "5433"))
    user: str = os.environ.get("EMEM_PGUSER", "postgres")

    def conninfo(self, dbname: str) -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={dbname}"

    def connect(self, dbname: str) -> psycopg.Connection:
        return psycopg.connect(self.conninfo(dbname), autocommit=True)


@contextmanager
def connection(server: Server, dbname: str) -> Iterator[psycopg.Connection]:
    conn = server.connect(dbname)
    try:
        yield conn
    finally:
        conn.close()


def vector_text(vector: np.ndarray) -> str:
    """pgvector's text form of a vector."""
    return "[" + ",".join(f"{x:.6f}" for x in vector.tolist()) + "]"


def timed(conn: psycopg.Connection, sql: Query, params: Params | None = None) -> tuple[float, list[tuple[Any, ...]]]:
    """Runs a statement and fetches every row; (milliseconds, rows), measured at the client."""
    started = time.perf_counter()
    cursor = conn.execute(sql, params)
    rows = cursor.fetchall() if cursor.description else []
    return (time.perf_counter() - started) * 1000, rows


def one_row(cursor: psycopg.Cursor[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The row of a statement that returns exactly one (an aggregate, `select exists`): what
    cursor.fetchone() gives, which psycopg types as maybe None."""
    return cast(tuple[Any, ...], cursor.fetchone())


def install_script_md5(conn: psycopg.Connection) -> str | None:
    """md5 of the emem install script this server would run now (it changes with `make install`)."""
    script = scalar(
        conn,
        """
        select md5(pg_read_binary_file(c.setting || '/extension/emem--' || e.default_version || '.sql'))
        from pg_config as c, pg_available_extensions as e where c.name = 'SHAREDIR' and e.name = 'emem'""",
    )
    return str(script) if script else None


def emem_version(conn: psycopg.Connection) -> str:
    return str(scalar(conn, "select extversion from pg_extension where extname = 'emem'"))


def emem_module(conn: psycopg.Connection) -> str:
    """The package of in-database modules this database's emem imports: emem_db_<version> from
    0.3.0 on (each release its own), emem_db before."""
    module = scalar(
        conn,
        """select substring(p.prosrc from 'from ([A-Za-z0-9_]+)[.]entry import') from pg_proc as p
           where p.oid = 'emem.analyse_question(text)'::regprocedure""",
    )
    return str(module or "emem_db")


def modules_md5(conn: psycopg.Connection) -> str | None:
    """md5 of the emem modules PL/Python imports for this database, where plpython3u exists."""
    notices: list[str] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        notices.append(diagnostic.message_primary or "")

    conn.add_notice_handler(keep)
    try:
        conn.execute(
            f"""do language plpython3u $$
import hashlib, importlib, pathlib
package = importlib.import_module({emem_module(conn)!r})
digest = hashlib.md5()
for path in sorted(pathlib.Path(package.__file__).parent.rglob("*.py")):
    digest.update(path.read_bytes())
plpy.notice(digest.hexdigest())
$$"""
        )
    except psycopg.Error:
        pass
    finally:
        conn.remove_notice_handler(keep)
    return notices[-1] if notices else None


def vacuum_analyze_emem(conn: psycopg.Connection) -> None:
    """Every table of emem as autovacuum leaves them after a load (visibility map and statistics),
    whichever tables the installed release has."""
    tables = conn.execute("select tablename from pg_tables where schemaname = 'emem' order by tablename").fetchall()
    for (table,) in tables:
        conn.execute(psycopg.sql.SQL("vacuum analyze emem.{}").format(psycopg.sql.Identifier(table)))


def scalar(conn: psycopg.Connection, sql: str, params: Params | None = None) -> Any:
    """The first column of the statement's first row (None without rows), as psycopg gives it."""
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None
