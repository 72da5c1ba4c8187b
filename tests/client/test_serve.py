"""Starting the HTTP service: `emem serve` and the app factory under uvicorn, as real processes.

What it refuses to start with (a busy port, a database without emem, a tokens file others may
write or read, a role it cannot act as, --no-auth off loopback), what it starts with, and that
a restart of the database under a running service costs no failed request (on a throwaway
cluster of its own, built from the test server's binaries).
"""

import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from clusters import Cluster, free_port, throwaway_cluster
from http_service import ServiceProcess

from emem_client.access import new_token, token_hash
from emem_client.gateways import extra_install_command

DOWN_GATEWAY = ["--gateway", "openai", "--openai-base-url", "http://127.0.0.1:9"]  # nothing listens on port 9


def emem_serve(*args: str) -> list[str]:
    return [sys.executable, "-m", "emem_client.cli", "serve", *DOWN_GATEWAY, *args]


def run_until_exit(command: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """Runs a command that must stop by itself (a service that refuses to start)."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def agent(db: psycopg.Connection, make_role: Callable[..., str]) -> str:
    db.execute("select emem.create_lane('notes')")
    db.execute("select emem.create_agent_profile('notes-agent', array['notes'])")
    db.execute("select emem.put_record('note', 'Kowalski billed INV-2031', 'notes')")
    return make_role("agent", profile="notes-agent")


@pytest.fixture
def login_role(db: psycopg.Connection, make_role: Callable[..., str], agent: str) -> str:
    role = make_role("service")
    db.execute(f"alter role {role} noinherit")
    db.execute(f"grant {agent} to {role}")
    return role


def tokens_file(directory: Path, role: str, entry: str, mode: int = 0o600) -> Path:
    path = directory / "tokens.toml"
    path.write_text(f'[[token]]\nrole = "{role}"\n{entry}\n')
    path.chmod(mode)
    return path


# ---- refusing to start --------------------------------------------------------------------------------


def test_serve_on_a_busy_port_says_so_and_exits_1(dsn: Callable[..., str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output = run_until_exit(emem_serve("--dsn", dsn(), "--no-auth", "--port", str(port)))
    assert code == 1
    assert f"emem: error: port {port} on 127.0.0.1 is in use by another process" in output
    assert "Traceback" not in output


@pytest.fixture
def bare_database(db: psycopg.Connection, dsn: Callable[..., str]) -> Iterator[tuple[str, str]]:
    """A database of the test server without the emem extension: (its name, its DSN)."""
    name = f"emem_bare_{uuid.uuid4().hex[:8]}"
    db.execute(f"create database {name}")
    yield name, dsn().replace(f"dbname={db.info.dbname}", f"dbname={name}")
    db.execute(f"drop database {name} with (force)")


def test_a_database_without_emem_gets_one_clear_message_and_no_service(bare_database: tuple[str, str]) -> None:
    name, bare_dsn = bare_database
    message = f'the emem extension is not installed in database "{name}" on 127.0.0.1:'  # then the port
    code, output = run_until_exit(emem_serve("--dsn", bare_dsn, "--no-auth", "--port", str(free_port())))
    assert code == 1
    assert f"emem: error: {message}" in output
    assert "Traceback" not in output
    # The app factory under any ASGI server: the server does not start either.
    factory = [sys.executable, "-m", "uvicorn", "--factory", "emem_client.http:app_from_environment"]
    code, output = run_until_exit(
        [*factory, "--port", str(free_port())],
        {"EMEM_DSN": bare_dsn, "EMEM_NO_AUTH": "1", "EMEM_GATEWAY": "openai", "OPENAI_BASE_URL": "http://127.0.0.1:9"},
    )
    assert code != 0
    assert message in output


def test_a_tokens_file_others_may_write_or_read_plain_tokens_from_is_refused(
    dsn: Callable[..., str], login_role: str, agent: str, tmp_path: Path
) -> None:
    plain = f'token = "{new_token()}"'
    hashed = f'sha256 = "{token_hash(new_token())}"'
    for entry, mode, message in (
        (hashed, 0o620, "is writable by its group or others"),
        (hashed, 0o602, "is writable by its group or others"),
        (plain, 0o640, "holds plain tokens and is readable by its group or others"),
        ('token = "short"', 0o600, "token must be at least 32 characters"),
        ('sha256 = "abc"', 0o600, "sha256 must be 64 hexadecimal characters"),
        (f'{hashed}\nrole_name = "x"', 0o600, "has unknown keys ['role_name']"),
    ):
        path = tokens_file(tmp_path, agent, entry, mode)
        code, output = run_until_exit(emem_serve("--dsn", dsn(login_role), "--tokens", str(path)))
        assert code == 1, (entry, mode, output)
        assert message in output, (entry, mode)
        assert "Traceback" not in output


def test_a_token_for_a_role_the_service_cannot_act_as_is_refused_at_start(
    dsn: Callable[..., str], make_role: Callable[..., str], login_role: str, tmp_path: Path
) -> None:
    stranger = make_role("stranger")
    path = tokens_file(tmp_path, stranger, f'sha256 = "{token_hash(new_token())}"')
    code, output = run_until_exit(emem_serve("--dsn", dsn(login_role), "--tokens", str(path)))
    assert code == 1
    assert (
        f'cannot act as (permission denied to set role "{stranger}"): create the role, '
        f'or GRANT "{stranger}" TO "{login_role}"' in output
    )


def test_serve_without_the_server_extra_says_how_to_install_it() -> None:
    without_fastapi = "import sys; sys.modules['fastapi'] = None; from emem_client.cli import main; sys.exit(main())"
    code, output = run_until_exit([sys.executable, "-c", without_fastapi, "serve", "--no-auth"])
    assert code == 1
    assert (
        f"the HTTP service needs the server extra (fastapi is not installed): {extra_install_command('server')}"
        in output
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--no-auth", "--host", "0.0.0.0"], "--no-auth (EMEM_NO_AUTH) is accepted only on a loopback address"),
        (["--no-auth", "--host", "::"], "--no-auth (EMEM_NO_AUTH) is accepted only on a loopback address"),
        ([], "the service needs a tokens file, --tokens (EMEM_TOKENS_FILE)"),
        (
            ["--no-auth", "--tokens", "t.toml"],
            "choose --tokens (EMEM_TOKENS_FILE) or --no-auth (EMEM_NO_AUTH), not both",
        ),
        (["--no-auth", "--allowed-host", "evil.com:80"], "'evil.com:80' is not a host name or IP address"),
        (["--no-auth", "--statement-timeout", "0"], "--statement-timeout (EMEM_STATEMENT_TIMEOUT) must be a number"),
        (["--no-auth", "--port", "70000"], "70000 is not a port number"),
    ],
)
def test_serve_usage_errors_exit_2(args: list[str], message: str) -> None:
    code, output = run_until_exit(emem_serve("--dsn", "host=127.0.0.1 port=9", *args))
    assert code == 2
    assert message in output


# ---- starting -------------------------------------------------------------------------------------------


def test_serve_with_tokens_acts_as_the_role_of_each_token(
    dsn: Callable[..., str], login_role: str, agent: str, tmp_path: Path
) -> None:
    token = new_token()
    path = tokens_file(tmp_path, agent, f'sha256 = "{token_hash(token)}"', 0o644)  # hashes may be readable
    port = free_port()
    with ServiceProcess(
        emem_serve("--dsn", dsn(login_role), "--tokens", str(path), "--port", str(port)), {}, port
    ) as service:
        service.started()
        page = service.http.get("/find", params={"q": "INV-2031"}, headers={"Authorization": f"Bearer {token}"})
        assert page.status_code == 200
        assert (page.json()["degraded_reason"], len(page.json()["rows"])) == ("gateway_down", 1)
        assert service.http.get("/find", params={"q": "INV-2031"}).status_code == 401


def test_no_auth_on_loopback_answers_as_the_login_role(dsn: Callable[..., str], agent: str) -> None:
    port = free_port()
    with ServiceProcess(emem_serve("--dsn", dsn(agent), "--no-auth", "--port", str(port)), {}, port) as service:
        service.started()
        page = service.http.get("/find", params={"q": "INV-2031"})
        assert (page.status_code, len(page.json()["rows"])) == (200, 1)
        assert service.http.get("/health", headers={"Host": "attacker.example"}).status_code == 421


def non_loopback_address() -> str | None:
    """An address of this machine other than loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a route lookup only: nothing is sent
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_no_auth_answers_nothing_that_arrives_off_loopback(dsn: Callable[..., str], agent: str, tmp_path: Path) -> None:
    """The factory cannot see where its server listens: with EMEM_NO_AUTH it refuses every request
    that arrives on an address other than loopback, even with an allowed Host header."""
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no address besides loopback")
    env = {"EMEM_DSN": dsn(agent), "EMEM_NO_AUTH": "1", "EMEM_TEST_GATEWAY_SWITCH": str(tmp_path / "down")}
    with ServiceProcess.uvicorn(env, host="0.0.0.0") as service:
        assert service.http.get("/find", params={"q": "INV-2031"}).status_code == 200
        remote = httpx.get(
            f"http://{address}:{service.port}/find", params={"q": "INV-2031"}, headers={"Host": "localhost"}, timeout=10
        )
        assert remote.status_code == 403
        assert "loopback only" in remote.json()["detail"]
        assert "INV-2031" not in remote.text


def test_the_factory_takes_its_settings_from_the_environment(
    dsn: Callable[..., str], login_role: str, agent: str, tmp_path: Path
) -> None:
    token = new_token()
    path = tokens_file(tmp_path, agent, f'sha256 = "{token_hash(token)}"')
    env = {
        "EMEM_DSN": dsn(login_role),
        "EMEM_TOKENS_FILE": str(path),
        "EMEM_MAX_QUESTION_CHARS": "50",
        "EMEM_GATEWAY": "openai",
        "OPENAI_BASE_URL": "http://127.0.0.1:9",
    }
    with ServiceProcess.uvicorn(env, factory="emem_client.http:app_from_environment") as service:
        headers = {"Authorization": f"Bearer {token}"}
        page = service.http.get("/find", params={"q": "INV-2031"}, headers=headers)
        assert (page.status_code, page.json()["degraded_reason"]) == (200, "gateway_down")
        assert service.http.get("/find", params={"q": "x" * 51}, headers=headers).status_code == 400


# ---- a database restart ------------------------------------------------------------------------------


@pytest.fixture
def own_cluster(db: psycopg.Connection) -> Iterator[Cluster]:
    """A throwaway cluster with database `emem`: a lane, a space and records; removed afterwards."""
    with throwaway_cluster(db, "restart") as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("create database emem")
        with psycopg.connect(cluster.dsn("emem"), autocommit=True) as conn:
            conn.execute("set client_min_messages = warning")
            conn.execute("create extension emem cascade")
            conn.execute("select emem.create_lane('notes')")
            conn.execute("select emem.create_embedding_space('test-hash-8', 8, 'hash-8', true)")
            for n in range(20):
                conn.execute("select emem.put_record('note', %s, 'notes', array['ops'])", (f"note {n} INV-{n}",))
        yield cluster


def test_a_database_restart_costs_no_failed_request(own_cluster: Cluster, tmp_path: Path) -> None:
    env = {
        "EMEM_DSN": own_cluster.dsn("emem"),
        "EMEM_NO_AUTH": "1",
        "EMEM_POOL_SIZE": "4",
        "EMEM_TEST_GATEWAY_SWITCH": str(tmp_path / "gateway-down"),
    }
    with ServiceProcess.uvicorn(env) as service:

        def ask_at_once(count: int) -> list[httpx.Response]:
            answers: list[httpx.Response] = []
            askers = [
                threading.Thread(target=lambda: answers.append(service.http.get("/find", params={"q": "ops INV-3"})))
                for _ in range(count)
            ]
            for asker in askers:
                asker.start()
            for asker in askers:
                asker.join(60)
            return answers

        assert {answer.status_code for answer in ask_at_once(8)} == {200}  # the pool holds several connections
        own_cluster.stop()
        own_cluster.start()
        after = [service.http.get("/find", params={"q": "ops INV-3"}) for _ in range(6)]
        after += [service.http.get("/health"), *ask_at_once(8)]
        assert [answer.status_code for answer in after] == [200] * len(after), [a.text for a in after if a.is_error]
        assert all(answer.json().get("total_candidates", 20) == 20 for answer in after)
