"""The settings of emem's HTTP service, given in code, on the command line (`emem serve`) or in
the environment (`uvicorn --factory emem_client.http:app_from_environment`).

Kept apart from emem_client.http so that the command line shows them without loading the
server stack (FastAPI and uvicorn, the `server` extra).
"""

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from emem_client.access import HostAllowList, is_loopback
from emem_client.service import DEFAULT_CONNECT_TIMEOUT
from emem_client.setup_defaults import default_conninfo


@dataclass(frozen=True)
class Limit:
    """A numeric setting: its type, accepted range, unit and what it bounds."""

    kind: type[int] | type[float]
    low: float
    high: float
    unit: str
    meaning: str

    def describe(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        return f"{what} from {self.low:g} to {self.high:g}"


LIMITS = {
    "statement_timeout": Limit(float, 0.001, 3600, "SECONDS", "longest a statement of a request may run (then 503)"),
    "pool_size": Limit(int, 1, 1000, "N", "database connections at most"),
    "pool_timeout": Limit(float, 0.001, 3600, "SECONDS", "longest a request waits for a free connection (then 503)"),
    "max_question_chars": Limit(int, 1, 1_000_000, "N", "longest question accepted, in characters (then 400)"),
    "max_body_bytes": Limit(int, 1024, 1 << 30, "N", "largest request body accepted, in bytes (then 413)"),
}


@dataclass(frozen=True)
class ServiceSettings:
    """How the service runs; `spelled(name)` says how a setting is given on the command line and
    in the environment. Times are in seconds.

    `bind_host` is the address the server listens on: the Host allow-list starts from it (plus
    the names of localhost and `allowed_hosts`), and `no_auth` is refused unless it is a loopback
    address. Exactly one of `tokens_file` and `no_auth` is required.
    """

    conninfo: str = ""
    tokens_file: Path | None = None
    no_auth: bool = False
    bind_host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()
    statement_timeout: float = 5.0
    pool_size: int = 8
    pool_timeout: float = DEFAULT_CONNECT_TIMEOUT  # fail fast: a database that is down answers within 2 s
    max_question_chars: int = 2000
    max_body_bytes: int = 1_048_576

    def __post_init__(self) -> None:
        if self.tokens_file is not None and self.no_auth:
            raise ValueError(f"choose {spelled('tokens_file')} or {spelled('no_auth')}, not both")
        if self.tokens_file is None and not self.no_auth:
            raise ValueError(
                f"the service needs a tokens file, {spelled('tokens_file')}: bearer tokens mapped to database "
                f"roles; or {spelled('no_auth')} on a loopback address (127.0.0.1 or ::1)"
            )
        if self.no_auth and not is_loopback(self.bind_host):
            raise ValueError(
                f"{spelled('no_auth')} is accepted only on a loopback address (127.0.0.1 or ::1), not on "
                f"{self.bind_host!r}: give callers tokens instead"
            )
        if not isinstance(self.conninfo, str) or not isinstance(self.bind_host, str) or not self.bind_host:
            raise ValueError("conninfo and bind_host must be texts (bind_host not empty)")
        try:
            self.host_allow_list()
        except ValueError as error:
            raise ValueError(f"{spelled('allowed_hosts')}: {error}") from None
        for name, limit in LIMITS.items():
            value = getattr(self, name)
            kinds = int if limit.kind is int else int | float
            if isinstance(value, bool) or not isinstance(value, kinds) or not limit.low <= value <= limit.high:
                raise ValueError(f"{spelled(name)} must be {limit.describe()}, got {value!r}")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> "ServiceSettings":
        """Settings from the variables of ENVIRONMENT; unset ones keep their defaults, but for the
        database, which is found as the command line finds it (setup_defaults.default_conninfo)."""
        values = {
            setting.name: parse_setting(setting.name, environ[ENVIRONMENT[setting.name]])
            for setting in fields(cls)
            if ENVIRONMENT[setting.name] in environ
        }
        return cls(**({"conninfo": default_conninfo(environ)} | values))

    def host_allow_list(self) -> HostAllowList:
        return HostAllowList.for_bind_address(self.bind_host, self.allowed_hosts)


ENVIRONMENT = {
    "conninfo": "EMEM_DSN",
    "tokens_file": "EMEM_TOKENS_FILE",
    "no_auth": "EMEM_NO_AUTH",
    "bind_host": "EMEM_HOST",
    "allowed_hosts": "EMEM_ALLOWED_HOSTS",
    "statement_timeout": "EMEM_STATEMENT_TIMEOUT",
    "pool_size": "EMEM_POOL_SIZE",
    "pool_timeout": "EMEM_POOL_TIMEOUT",
    "max_question_chars": "EMEM_MAX_QUESTION_CHARS",
    "max_body_bytes": "EMEM_MAX_BODY_BYTES",
}
COMMAND_LINE = {
    "conninfo": "--dsn",
    "tokens_file": "--tokens",
    "bind_host": "--host",
    "allowed_hosts": "--allowed-host",
}


def default_setting(name: str) -> Any:
    return next(setting.default for setting in fields(ServiceSettings) if setting.name == name)


def flag(name: str) -> str:
    """The `emem serve` option of a setting."""
    return COMMAND_LINE.get(name, "--" + name.replace("_", "-"))


def spelled(name: str) -> str:
    """A setting as `emem serve` and the environment spell it, for messages."""
    return f"{flag(name)} ({ENVIRONMENT[name]})"


def _yes_or_no(text: str) -> bool:
    answers = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False, "": False}
    return answers[text.strip().lower()]


PARSERS: dict[str, Callable[[str], Any]] = {
    "tokens_file": lambda text: Path(text) if text else None,
    "no_auth": _yes_or_no,
    "allowed_hosts": lambda text: tuple(name.strip() for name in text.split(",") if name.strip()),
    **{name: limit.kind for name, limit in LIMITS.items()},
}


def parse_setting(name: str, text: str) -> Any:
    """A setting's value from the text of its environment variable; ValueError saying what is accepted."""
    try:
        return PARSERS.get(name, str)(text)
    except (KeyError, ValueError):
        accepted = LIMITS[name].describe() if name in LIMITS else "1, true, yes, 0, false or no"
        raise ValueError(f"{ENVIRONMENT[name]}={text!r} is not valid: give {accepted}") from None
