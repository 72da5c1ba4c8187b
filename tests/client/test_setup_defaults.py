"""Where `emem` connects without --dsn: EMEM_DSN, else libpq's variables, else the service `emem`
that set-up records where libpq looks for it (emem_client/setup_defaults.py)."""

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from emem_client import cli
from emem_client.service_settings import ServiceSettings
from emem_client.setup_defaults import CONNECTION_VARIABLES, default_conninfo

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "[emem]\nhost=127.0.0.1\nport=5433\nuser=postgres\ndbname=emem_demo\n"


def write_entry(path: Path, text: str = ENTRY) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def nowhere(tmp_path: Path) -> dict[str, str]:
    """An environment where libpq finds no service file at all: an empty home and system directory."""
    (tmp_path / "home").mkdir()
    (tmp_path / "etc").mkdir()
    return {"HOME": str(tmp_path / "home"), "PGSYSCONFDIR": str(tmp_path / "etc")}


def test_without_anything_libpq_keeps_its_defaults(nowhere: dict[str, str]) -> None:
    assert default_conninfo(nowhere) == ""


@pytest.mark.parametrize("where", ["PGSERVICEFILE", "~/.pg_service.conf", "PGSYSCONFDIR"])
def test_the_service_entry_is_found_where_libpq_looks(tmp_path: Path, nowhere: dict[str, str], where: str) -> None:
    environ = dict(nowhere)
    if where == "PGSERVICEFILE":
        environ["PGSERVICEFILE"] = str(write_entry(tmp_path / "elsewhere" / "services.conf"))
    elif where == "~/.pg_service.conf":
        write_entry(Path(nowhere["HOME"]) / ".pg_service.conf")
    else:
        write_entry(Path(nowhere["PGSYSCONFDIR"]) / "pg_service.conf")
    assert default_conninfo(environ) == "service=emem"


def test_other_services_are_not_emem(nowhere: dict[str, str]) -> None:
    write_entry(Path(nowhere["PGSYSCONFDIR"]) / "pg_service.conf", "[emem2]\nport=1\n[ emem_old ]\nport=2\n# [emem]\n")
    assert default_conninfo(nowhere) == ""


def test_emem_dsn_wins_over_everything(nowhere: dict[str, str]) -> None:
    write_entry(Path(nowhere["PGSYSCONFDIR"]) / "pg_service.conf")
    environ = {**nowhere, "PGHOST": "db.example", "EMEM_DSN": "dbname=mine"}
    assert default_conninfo(environ) == "dbname=mine"
    assert default_conninfo({**environ, "EMEM_DSN": ""}) == ""  # set, though empty: libpq's defaults


@pytest.mark.parametrize("variable", CONNECTION_VARIABLES)
def test_a_libpq_variable_leaves_the_choice_to_libpq(nowhere: dict[str, str], variable: str) -> None:
    write_entry(Path(nowhere["PGSYSCONFDIR"]) / "pg_service.conf")
    assert default_conninfo({**nowhere, variable: "x"}) == ""
    assert default_conninfo({**nowhere, variable: ""}) == "service=emem"  # an empty variable says nothing
    assert default_conninfo({**nowhere, "PGPASSWORD": "secret"}) == "service=emem"  # how, not where


def test_the_http_service_finds_the_database_as_the_command_line_does(nowhere: dict[str, str]) -> None:
    write_entry(Path(nowhere["PGSYSCONFDIR"]) / "pg_service.conf")
    assert ServiceSettings.from_environment({**nowhere, "EMEM_NO_AUTH": "1"}).conninfo == "service=emem"
    explicit = {**nowhere, "EMEM_NO_AUTH": "1", "EMEM_DSN": "dbname=x"}
    assert ServiceSettings.from_environment(explicit).conninfo == "dbname=x"


def service_entry_for(db: psycopg.Connection) -> str:
    info = db.info
    return f"[emem]\nhost={info.host}\nport={info.port}\nuser={info.user}\ndbname={info.dbname}\n"


def without_connection_variables() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in {*CONNECTION_VARIABLES, "EMEM_DSN"}}


def test_emem_in_a_new_shell_reaches_the_recorded_cluster(
    db: psycopg.Connection, tmp_path: Path, nowhere: dict[str, str]
) -> None:
    """No --dsn, no variable: the `emem` command (real libpq) connects through the service entry."""
    write_entry(Path(nowhere["PGSYSCONFDIR"]) / "pg_service.conf", service_entry_for(db))
    environment = {**without_connection_variables(), **nowhere}

    def emem(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "emem_client.cli", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment, cwd=tmp_path)

    version = emem("--version")
    assert version.returncode == 0, version.stderr
    assert f'database "{db.info.dbname}" on {db.info.host}:{db.info.port}' in version.stdout
    assert "not installed" not in version.stdout
    elsewhere = emem("--dsn", "host=127.0.0.1 port=9 user=nobody dbname=nothing connect_timeout=3", "--version")
    assert elsewhere.returncode == 1 and "cannot connect to PostgreSQL" in elsewhere.stderr  # --dsn wins


def test_the_connection_error_shows_libpq_hints_without_escaped_tabs(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["--dsn", "host=127.0.0.1 port=9 user=nobody dbname=nothing connect_timeout=3", "health"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("emem: error: cannot connect to PostgreSQL")
    assert "\\t" not in err and "\t" not in err
    assert "\n  Is the server running on that host and accepting TCP/IP connections?" in err
    assert "the libpq service emem that scripts/setup.sh records" in err


def write_service_entry(file: Path, port: int, dbname: str) -> None:
    """set-up's own function (scripts/cluster.sh), run as set-up runs it."""
    script = f'. scripts/cluster.sh; write_service_entry "{file}" {port} {dbname}'
    subprocess.run(["bash", "-c", script], cwd=ROOT, check=True, capture_output=True, timeout=60)


def test_set_up_replaces_its_entry_and_keeps_the_others(db: psycopg.Connection, tmp_path: Path) -> None:
    services = write_entry(
        tmp_path / "pg_service.conf", "# mine\n[billing]\nhost=db.example\n\n[emem]\nport=1\n[zz]\nport=2\n"
    )
    write_service_entry(services, db.info.port, db.info.dbname)
    write_service_entry(services, db.info.port, db.info.dbname)  # idempotent
    text = services.read_text()
    assert text.count("[emem]") == 1 and "port=1\n" not in text
    assert text.startswith("# mine\n[billing]\nhost=db.example\n") and "[zz]\nport=2\n" in text
    environment = {**without_connection_variables(), "PGSERVICEFILE": str(services)}
    probe = "import psycopg; print(psycopg.connect('service=emem').info.dbname)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=environment)
    assert done.returncode == 0, done.stderr  # real libpq reads the file set-up wrote
    assert done.stdout.strip() == db.info.dbname
