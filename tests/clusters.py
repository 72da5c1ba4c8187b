"""Throwaway PostgreSQL clusters for tests that restart, kill or limit a server: built from the
test server's binaries and run by the postgres user when the tests run as root, with emem's
PL/Python modules found where the test server finds them (PYTHONPATH). PYTEST_DONT_REWRITE."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from queries import scalar

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Cluster:
    """A throwaway PostgreSQL cluster, run by the postgres user when the tests run as root."""

    bindir: Path
    datadir: Path
    port: int
    # What the postmaster runs under: a prefix such as prlimit, and PYTHONPATH for emem_db.
    launcher: list[str] = field(default_factory=list)
    python_path: str | None = None

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        env = {**os.environ, **({"PYTHONPATH": self.python_path} if self.python_path else {})}
        done = subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=180, env=env)
        if check and done.returncode != 0:
            log = self.datadir / "server.log"
            tail = log.read_text()[-3000:] if log.exists() else ""
            raise AssertionError(f"{' '.join(command)} failed: {done.stdout}{done.stderr}\nserver log:\n{tail}")
        return done

    def initdb(self) -> None:
        self.run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.datadir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        settings = (ROOT / "control" / "emem.conf").read_text()
        with (self.datadir / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\n{settings}\nfsync = on\nsynchronous_commit = on\nmax_connections = 20\nshared_buffers = 32MB\n"
            )

    def start(self) -> None:
        self.run(
            *self.launcher,
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.datadir),
            "-l",
            str(self.datadir / "server.log"),
            "-w",
            "-t",
            "120",
            "-o",
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.datadir}",
            "start",
        )

    def stop(self) -> None:
        self.run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "-w", "stop", check=False)

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} connect_timeout=10"

    def postmaster_pid(self) -> int:
        return int((self.datadir / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        """SIGKILL to the postmaster, then to every process it started: the server dies at once,
        as in a crash, with no shutdown checkpoint."""
        postmaster = self.postmaster_pid()
        children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == postmaster]
        os.kill(postmaster, signal.SIGKILL)
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(_state(pid) not in ("gone", "Z") for pid in [postmaster, *children]):
            assert time.monotonic() < deadline, "the killed server did not go away"
            time.sleep(0.05)
        if _state(postmaster) == "Z":  # nobody reaps it here: its lock files would look alive
            for lock in (self.datadir / "postmaster.pid", self.datadir / f".s.PGSQL.{self.port}.lock"):
                lock.unlink(missing_ok=True)


def _parent(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def plpython_modules(db: psycopg.Connection) -> str:
    """Where the test server's PL/Python finds emem's modules (this release's package), for a
    cluster of the same install."""
    version: str = scalar(db, "select extversion from pg_extension where extname = 'emem'")
    package = "emem_db_" + version.replace(".", "_")
    db.execute(
        "create or replace function pg_temp.emem_modules() returns text language plpython3u as"
        f" $$ import {package}, os; return os.path.dirname(os.path.dirname({package}.__file__)) $$"
    )
    modules: str = scalar(db, "select pg_temp.emem_modules()")
    return modules


@contextlib.contextmanager
def throwaway_cluster(db: psycopg.Connection, prefix: str, launcher: list[str] | None = None) -> Iterator[Cluster]:
    """A running cluster of its own, like the test server's, with emem in database postgres."""
    bindir = Path(scalar(db, "select setting from pg_config where name = 'BINDIR'"))
    datadir = Path(tempfile.mkdtemp(prefix=f"emem-{prefix}-"))
    if os.geteuid() == 0:
        shutil.chown(datadir, "postgres", "postgres")
    cluster = Cluster(bindir, datadir, free_port(), launcher or [], plpython_modules(db))
    try:
        cluster.initdb()
        cluster.start()
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("set client_min_messages = warning")
            conn.execute("create extension emem cascade")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(datadir, ignore_errors=True)
