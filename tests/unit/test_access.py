"""emem_client.access (tokens mapped to roles, the Host allow-list) and the service's settings:
pure functions, tested without a server."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emem_client.access import (
    AccessConfigError,
    AccessTokens,
    HostAllowList,
    TokenGrant,
    bearer_token,
    host_name,
    is_loopback,
    new_token,
    token_hash,
)
from emem_client.service_settings import ServiceSettings


def write_tokens(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "tokens.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.DEF-123_~+/=", "abc.DEF-123_~+/="),
        ("bearer abc", "abc"),
        ("  Bearer   abc  ", "abc"),
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer a b", None),
        ("Basic dXNlcjpwdw==", None),
        ("Token abc", None),
        ("abc", None),
    ],
)
def test_bearer_token_reads_only_the_bearer_scheme(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_tokens_map_to_roles_by_hash_or_plain(tmp_path: Path) -> None:
    hashed, plain = new_token(), new_token()
    path = write_tokens(
        tmp_path,
        f'[[token]]\nrole = "agent_a"\nsha256 = "{token_hash(hashed).upper()}"\nname = "bot a"\n\n'
        f'[[token]]\nrole = "Agent B"\ntoken = "{plain}"\n',
    )
    tokens = AccessTokens.load(path)
    assert tokens.role_for(hashed) == "agent_a"
    assert tokens.grant_for(hashed) == TokenGrant("agent_a", "bot a")
    assert tokens.role_for(plain) == "Agent B"
    assert tokens.roles == {"agent_a", "Agent B"}
    for wrong in (None, "", hashed + "x", hashed[:-1], token_hash(hashed), plain.upper()):
        assert tokens.role_for(wrong) is None


def test_a_hashed_tokens_file_may_be_readable_but_never_writable_by_others(tmp_path: Path) -> None:
    entry = f'[[token]]\nrole = "a"\nsha256 = "{token_hash(new_token())}"\n'
    assert len(AccessTokens.load(write_tokens(tmp_path, entry, 0o644))) == 1
    for mode in (0o664, 0o646, 0o666):
        with pytest.raises(AccessConfigError, match=r"writable by its group or others.*chmod go-w"):
            AccessTokens.load(write_tokens(tmp_path, entry, mode))
    plain = f'[[token]]\nrole = "a"\ntoken = "{new_token()}"\n'
    for mode in (0o640, 0o604):
        with pytest.raises(AccessConfigError, match="holds plain tokens and is readable"):
            AccessTokens.load(write_tokens(tmp_path, plain, mode))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "has no \\[\\[token\\]\\] entries"),
        ("token = 5", "has no \\[\\[token\\]\\] entries"),
        ("[tokens]\n", "unknown keys \\['tokens'\\]"),
        ("[[token]]\nrole = 'a'\n", "needs exactly one of sha256 \\(recommended\\) or token"),
        (f"[[token]]\nrole = 'a'\nsha256 = '{'0' * 64}'\ntoken = '{'x' * 40}'\n", "needs exactly one of"),
        ("[[token]]\nrole = 'a'\nsha256 = 'abc'\n", "sha256 must be 64 hexadecimal characters"),
        (f"[[token]]\nrole = 'a'\nsha256 = '{'g' * 64}'\n", "sha256 must be 64 hexadecimal characters"),
        ("[[token]]\nrole = 'a'\ntoken = 'short'\n", "token must be at least 32 characters"),
        (f"[[token]]\nrole = 'a'\ntoken = '{'x' * 20} {'y' * 20}'\n", "without white space"),
        (f"[[token]]\nsha256 = '{'0' * 64}'\n", "role None is not a role name"),
        (f"[[token]]\nrole = ''\nsha256 = '{'0' * 64}'\n", "role '' is not a role name"),
        (f"[[token]]\nrole = '{'r' * 64}'\nsha256 = '{'0' * 64}'\n", "1 to 63 bytes"),
        (f"[[token]]\nrole = \"a\\u0000\"\nsha256 = '{'0' * 64}'\n", "no NUL"),
        (f"[[token]]\nrole = 'a'\nsha256 = '{'0' * 64}'\nname = 5\n", "name must be a string"),
        (f"[[token]]\nrole = 'a'\nsha256 = '{'0' * 64}'\nrights = 'all'\n", "unknown keys \\['rights'\\]"),
        (
            f"[[token]]\nrole = 'a'\nsha256 = '{'0' * 64}'\n[[token]]\nrole = 'b'\nsha256 = '{'0' * 64}'\n",
            "number 2: the same token appears in an earlier entry",
        ),
        ("[[token]\n", "is not valid TOML"),
    ],
)
def test_a_bad_tokens_file_says_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(AccessConfigError, match=message):
        AccessTokens.load(write_tokens(tmp_path, text))


def test_a_tokens_file_that_is_missing_or_not_a_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AccessConfigError, match="cannot read the tokens file"):
        AccessTokens.load(tmp_path / "missing.toml")
    with pytest.raises(AccessConfigError, match="is not a regular file"):
        AccessTokens.load(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(AccessConfigError, match="is not a regular file"):
        AccessTokens.load(fifo)
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b"[[token]]\nrole = '\xe9'\n")
    latin1.chmod(0o600)
    with pytest.raises(AccessConfigError, match=r"cannot read the tokens file .*utf-8"):
        AccessTokens.load(latin1)


def test_new_token_prints_an_entry_the_tokens_file_accepts(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "emem_client.access", "new-token", "agent_x", "--name", 'bot "1"'],
        capture_output=True,
        text=True,
        check=True,
    )
    token = done.stderr.rsplit(" ", 1)[1].strip()
    assert token not in done.stdout  # only its hash is meant for the file
    tokens = AccessTokens.load(write_tokens(tmp_path, done.stdout, 0o644))
    assert tokens.grant_for(token) == TokenGrant("agent_x", 'bot "1"')
    assert hashlib.sha256(token.encode()).hexdigest() in done.stdout


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("localhost", "localhost"),
        ("LocalHost:8000", "localhost"),
        ("emem.internal.", "emem.internal"),
        ("127.0.0.1:80", "127.0.0.1"),
        ("[::1]:8000", "::1"),
        ("[::1]", "::1"),
        ("::1", None),  # IPv6 in a Host header needs brackets
        ("[localhost]", None),
        ("localhost:", None),
        ("localhost:99999", None),
        ("localhost:80:80", None),
        ("a b", None),
        ("évil.com", None),
        ("", None),
    ],
)
def test_host_name_of_a_host_header(header: str, host: str | None) -> None:
    assert host_name(header) == host


def test_host_allow_list_defaults_to_the_bound_address_and_localhost() -> None:
    hosts = HostAllowList.for_bind_address("10.1.2.3", extra=["emem.internal", "[fe80::1]"])
    assert hosts.names == {"localhost", "127.0.0.1", "::1", "10.1.2.3", "emem.internal", "fe80::1"}
    for allowed in ("localhost:8000", "10.1.2.3", "EMEM.internal:443", "[fe80::1]:80", "[::1]"):
        assert hosts.allows(allowed), allowed
    for refused in (None, "", "attacker.example", "10.1.2.3.nip.io", "emem.internal.attacker.example", "0.0.0.0"):
        assert not hosts.allows(refused), refused
    assert HostAllowList.for_bind_address("0.0.0.0").names == {"localhost", "127.0.0.1", "::1"}
    assert HostAllowList(["*"]).allows("anything.example")
    for bad in ("evil.com:80", "http://evil.com", "a b", ""):
        with pytest.raises(ValueError, match="is not a host name or IP address"):
            HostAllowList([bad])


def test_loopback_means_loopback_addresses_only() -> None:
    assert all(is_loopback(a) for a in ("127.0.0.1", "127.8.9.10", "::1", "[::1]"))
    assert not any(is_loopback(a) for a in ("localhost", "0.0.0.0", "::", "10.0.0.1", "", "::ffff:10.0.0.1"))


def test_service_settings_refuse_what_does_not_go_together(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    assert ServiceSettings(no_auth=True).bind_host == "127.0.0.1"
    assert ServiceSettings(no_auth=True, bind_host="::1").no_auth
    refused: tuple[tuple[dict[str, Any], str], ...] = (
        ({}, "needs a tokens file, --tokens \\(EMEM_TOKENS_FILE\\)"),
        ({"no_auth": True, "tokens_file": tokens}, "not both"),
        ({"no_auth": True, "bind_host": "0.0.0.0"}, "accepted only on a loopback address"),
        ({"no_auth": True, "bind_host": "localhost"}, "accepted only on a loopback address"),
        ({"tokens_file": tokens, "allowed_hosts": ("evil.com:80",)}, "--allowed-host"),
        ({"tokens_file": tokens, "statement_timeout": 0}, "--statement-timeout .* must be a number from 0.001"),
        ({"tokens_file": tokens, "statement_timeout": float("nan")}, "must be a number"),
        ({"tokens_file": tokens, "pool_size": 2.5}, "--pool-size .* must be an integer"),
        ({"tokens_file": tokens, "pool_size": True}, "--pool-size .* must be an integer"),
        ({"tokens_file": tokens, "max_body_bytes": 10}, "--max-body-bytes .* from 1024"),
    )
    for arguments, message in refused:
        with pytest.raises(ValueError, match=message):
            ServiceSettings(**arguments)


def test_service_settings_from_the_environment(tmp_path: Path) -> None:
    settings = ServiceSettings.from_environment(
        {
            "EMEM_DSN": "dbname=x",
            "EMEM_TOKENS_FILE": str(tmp_path / "t.toml"),
            "EMEM_HOST": "0.0.0.0",
            "EMEM_ALLOWED_HOSTS": "emem.internal, 10.0.0.5",
            "EMEM_STATEMENT_TIMEOUT": "2.5",
            "EMEM_POOL_SIZE": "3",
            "UNRELATED": "x",
        }
    )
    assert (settings.conninfo, settings.tokens_file, settings.bind_host) == ("dbname=x", tmp_path / "t.toml", "0.0.0.0")
    assert (settings.allowed_hosts, settings.statement_timeout, settings.pool_size) == (
        ("emem.internal", "10.0.0.5"),
        2.5,
        3,
    )
    assert ServiceSettings.from_environment({"EMEM_NO_AUTH": "yes"}).no_auth
    for environment, message in (
        ({"EMEM_NO_AUTH": "maybe"}, "EMEM_NO_AUTH='maybe' is not valid: give 1, true, yes, 0, false or no"),
        ({"EMEM_NO_AUTH": "1", "EMEM_POOL_SIZE": "many"}, "EMEM_POOL_SIZE='many' is not valid: give an integer"),
        ({"EMEM_NO_AUTH": "0"}, "needs a tokens file"),
    ):
        with pytest.raises(ValueError, match=message):
            ServiceSettings.from_environment(environment)
