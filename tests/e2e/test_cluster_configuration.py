"""The local cluster's port lives in its own configuration, so that a restart and every later
command use it without EMEM_PGPORT (scripts/setup.sh, scripts/cluster.sh, docs/setup.md)."""

import os
import subprocess
from pathlib import Path

import psycopg
import pytest
from queries import scalar

ROOT = Path(__file__).resolve().parents[2]


def recorded_cluster() -> tuple[Path, int]:
    """The data directory and port test.sh and main_job.sh compute from what set-up recorded, with
    no EMEM_PGPORT."""
    environment = {name: value for name, value in os.environ.items() if name not in {"EMEM_PGPORT", "EMEM_PGDATA"}}
    found = subprocess.run(
        ["bash", "-c", '. scripts/cluster.sh; pgdata=$(cluster_pgdata); echo "$pgdata"; cluster_port "$pgdata"'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
    )
    assert found.returncode == 0, found.stderr
    pgdata, port = found.stdout.split()
    return Path(pgdata).resolve(), int(port)


@pytest.fixture
def setups_cluster(db: psycopg.Connection) -> int:
    """The port set-up recorded; the test is skipped where the test server is another cluster."""
    data_directory = Path(scalar(db, "show data_directory")).resolve()
    pgdata, port = recorded_cluster()
    if pgdata != data_directory:
        pytest.skip(f"the test server ({data_directory}) is not the cluster set-up recorded ({pgdata})")
    return port


def test_the_clusters_configuration_holds_its_port(db: psycopg.Connection, setups_cluster: int) -> None:
    port = scalar(db, "show port")
    configured = db.execute(
        "select setting, sourcefile from pg_file_settings where name = 'port' and applied and error is null"
    ).fetchall()
    assert [(setting, Path(sourcefile).name) for setting, sourcefile in configured] == [
        (port, "postgresql.auto.conf")
    ], "set-up writes the port into postgresql.auto.conf (alter system), so a restart keeps it"


def test_the_scripts_find_the_port_without_the_variable(db: psycopg.Connection, setups_cluster: int) -> None:
    assert setups_cluster == db.info.port
