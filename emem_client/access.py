"""Who may call emem's network services, and as which database role.

Two checks, shared by every service that listens on a socket (the HTTP service, the MCP server):

- **Bearer tokens mapped to database roles**, read from a TOML file. Each caller acts as its
  role (the service does `SET ROLE`), so the database's own rules (lanes, row-level security)
  decide what it reads and writes::

      # emem tokens: each [[token]] lets the holder of one bearer token act as one role.
      [[token]]
      role = "agent_sales"                    # a database role the service's login role may SET ROLE to
      sha256 = "5e884898da28047151d0e56f..."  # SHA-256 (hex) of the token: recommended
      name = "sales assistant"                # optional: who holds it

      [[token]]
      role = "agent_support"
      token = "..."                           # the plain token: only in a file its owner alone can read

  The file must not be writable by its group or others (whoever writes it chooses roles), and a
  file holding plain tokens must not be readable by them either. `python -m emem_client.access
  new-token ROLE` prints a fresh token and its `[[token]]` entry.

- **An allow-list of Host header names**, against DNS rebinding: a browser page on another
  site must not reach a service on loopback through a name it controls.

    tokens = AccessTokens.load(path)
    role = tokens.role_for(bearer_token(request.headers.get("authorization")))   # None: refuse (401)
    hosts = HostAllowList.for_bind_address("127.0.0.1", extra=["emem.internal"])
    hosts.allows(request.headers.get("host"))                                    # False: refuse (421)
"""

import argparse
import hashlib
import ipaddress
import os
import re
import secrets
import stat
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A plain token shorter than this is guessable by a patient caller.
MIN_PLAIN_TOKEN_CHARS = 32
# PostgreSQL's NAMEDATALEN - 1.
MAX_ROLE_NAME_BYTES = 63
TOKEN_KEYS = frozenset({"role", "sha256", "token", "name"})
LOCALHOST_NAMES = ("localhost", "127.0.0.1", "::1")
ANY_HOST = "*"
# Letters, digits, - and _ in dot-separated labels (IPv4 addresses included), ASCII only.
HOST_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*", re.ASCII)


class AccessConfigError(ValueError):
    """The tokens file cannot be used; the message names the file and what to change."""


@dataclass(frozen=True)
class TokenGrant:
    """What one token grants: acting as `role`. `name` says who holds it (for logs)."""

    role: str
    name: str | None = None


def token_hash(token: str) -> str:
    """The SHA-256 (hex) of a token, as the tokens file stores it."""
    if not isinstance(token, str) or not token:
        raise ValueError("a token must be a non-empty string")
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header value; None when there is none."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        return None
    return token


class AccessTokens:
    """Bearer tokens, each granting one database role; only their SHA-256 is kept in memory."""

    def __init__(self, grants: Mapping[str, TokenGrant]) -> None:
        """`grants` maps the SHA-256 (hex, lower case) of each token to what it grants."""
        for digest, grant in grants.items():
            if not isinstance(digest, str) or not _is_sha256_hex(digest):
                raise ValueError(f"{digest!r} is not a SHA-256 digest (64 hexadecimal characters)")
            if not isinstance(grant, TokenGrant):
                raise ValueError(f"the grant of {digest[:12]}... is not a TokenGrant")
            check_role_name(grant.role)
        self._grants = {digest.lower(): grant for digest, grant in grants.items()}

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "AccessTokens":
        """Reads a tokens file (format in the module's doc); AccessConfigError says what is wrong."""
        path = Path(path)
        try:
            mode = path.stat().st_mode
        except OSError as error:
            raise AccessConfigError(f"cannot read the tokens file {path}: {error}") from None
        if not stat.S_ISREG(mode):  # checked before reading: a FIFO would block
            raise AccessConfigError(f"the tokens file {path} is not a regular file")
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise AccessConfigError(
                f"the tokens file {path} is writable by its group or others, who could grant themselves any "
                f"role: chmod go-w {path}"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise AccessConfigError(f"cannot read the tokens file {path}: {error}") from None
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise AccessConfigError(f"the tokens file {path} is not valid TOML: {error}") from None
        grants, has_plain_tokens = _grants_of(document, path)
        if has_plain_tokens and mode & (stat.S_IRGRP | stat.S_IROTH):
            raise AccessConfigError(
                f"the tokens file {path} holds plain tokens and is readable by its group or others: "
                f"chmod go-rwx {path}, or store each token's sha256 instead"
            )
        return cls(grants)

    def role_for(self, token: str | None) -> str | None:
        """The role a token acts as, or None for no token or an unknown one."""
        grant = self.grant_for(token)
        return grant.role if grant else None

    def grant_for(self, token: str | None) -> TokenGrant | None:
        # Looking up the token's digest times nothing an attacker can use: finding a known
        # digest's token is a SHA-256 preimage.
        return self._grants.get(token_hash(token)) if token else None

    @property
    def roles(self) -> frozenset[str]:
        """Every role some token grants (for checking at start-up that the service may act as each)."""
        return frozenset(grant.role for grant in self._grants.values())

    def __len__(self) -> int:
        return len(self._grants)


def check_role_name(role: Any) -> str:
    """`role` if it can name a PostgreSQL role, else ValueError saying what is accepted."""
    if (
        not isinstance(role, str)
        or not role
        or "\x00" in role
        or len(role.encode()) > MAX_ROLE_NAME_BYTES
        or role != role.strip()
    ):
        raise ValueError(
            f"{role!r} is not a role name: 1 to {MAX_ROLE_NAME_BYTES} bytes, no NUL, no surrounding white space"
        )
    return role


def _grants_of(document: dict[str, Any], path: Path) -> tuple[dict[str, TokenGrant], bool]:
    unknown_tables = set(document) - {"token"}
    if unknown_tables:
        raise AccessConfigError(
            f"the tokens file {path} has unknown keys {sorted(unknown_tables)}; accepted: [[token]]"
        )
    entries = document.get("token", [])
    if not isinstance(entries, list) or not entries:
        raise AccessConfigError(f"the tokens file {path} has no [[token]] entries")
    grants: dict[str, TokenGrant] = {}
    has_plain_tokens = False
    for number, entry in enumerate(entries, start=1):
        where = f"the tokens file {path}, [[token]] number {number}"
        digest = _entry_digest(entry, where)
        has_plain_tokens = has_plain_tokens or "token" in entry
        try:
            grant = TokenGrant(check_role_name(entry.get("role")), _entry_name(entry, where))
        except ValueError as error:
            raise AccessConfigError(f"{where}: role {error}") from None
        if digest in grants:
            raise AccessConfigError(f"{where}: the same token appears in an earlier entry")
        grants[digest] = grant
    return grants, has_plain_tokens


def _entry_digest(entry: Any, where: str) -> str:
    if not isinstance(entry, dict):
        raise AccessConfigError(f"{where} is not a table")
    unknown = set(entry) - TOKEN_KEYS
    if unknown:
        raise AccessConfigError(f"{where} has unknown keys {sorted(unknown)}; accepted: {sorted(TOKEN_KEYS)}")
    if ("sha256" in entry) == ("token" in entry):
        raise AccessConfigError(f"{where} needs exactly one of sha256 (recommended) or token")
    if "sha256" in entry:
        digest = entry["sha256"]
        if not isinstance(digest, str) or not _is_sha256_hex(digest):
            raise AccessConfigError(f"{where}: sha256 must be 64 hexadecimal characters (sha256sum of the token)")
        return digest.lower()
    token = entry["token"]
    if not isinstance(token, str) or len(token) < MIN_PLAIN_TOKEN_CHARS or bearer_token(f"Bearer {token}") != token:
        raise AccessConfigError(
            f"{where}: token must be at least {MIN_PLAIN_TOKEN_CHARS} characters without white space "
            "(python -m emem_client.access new-token ROLE makes one)"
        )
    return token_hash(token)


def _entry_name(entry: dict[str, Any], where: str) -> str | None:
    name = entry.get("name")
    if name is not None and not isinstance(name, str):
        raise AccessConfigError(f"{where}: name must be a string")
    return name


def _is_sha256_hex(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)


# ---- addresses and Host names ---------------------------------------------------------------------


def is_loopback(address: str) -> bool:
    """True for loopback IP addresses (127.0.0.0/8, ::1); names, even localhost, are not addresses."""
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(address: str) -> bool:
    return address.strip("[]") in ("", "0.0.0.0", "::")


def host_name(host_header: str) -> str | None:
    """The host of a Host header value (`name`, `name:port`, `[IPv6]:port`): lower case, without
    port, brackets or trailing dot; None when the value is none of those."""
    value = host_header.strip().lower()
    if value.startswith("["):
        address, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and _is_port(rest[1:]))):
            return None
        return address if _is_ip(address) else None
    name, colon, port = value.partition(":")
    if colon and not _is_port(port):
        return None
    name = name.removesuffix(".")
    return name if HOST_NAME.fullmatch(name) else None


def allowed_name(name: str) -> str:
    """A name for the allow-list in the form host_name gives: a host name, an IP address (IPv6
    with or without brackets) or `*`; ValueError otherwise."""
    if name == ANY_HOST:
        return name
    value = name.strip().lower().removeprefix("[").removesuffix("]").removesuffix(".") if isinstance(name, str) else ""
    if _is_ip(value) or HOST_NAME.fullmatch(value):
        return value
    raise ValueError(f"{name!r} is not a host name or IP address (without port), or * for any")


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and int(text) <= 65535


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class HostAllowList:
    """The Host header names a service answers to; `*` among them turns the check off."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(allowed_name(name) for name in names)
        if not self.names:
            raise ValueError("a Host allow-list needs at least one name")

    @classmethod
    def for_bind_address(cls, bind_address: str, extra: Sequence[str] = ()) -> "HostAllowList":
        """The default: the address the service listens on (unless a wildcard such as 0.0.0.0),
        the names of localhost, and `extra` (the names clients use to reach it)."""
        names = [*LOCALHOST_NAMES, *extra]
        if not is_wildcard(bind_address):
            names.append(bind_address)
        return cls(names)

    def allows(self, host_header: str | None) -> bool:
        """True when the Host header names a host of the list (any port)."""
        if ANY_HOST in self.names:
            return True
        if not host_header:
            return False
        return host_name(host_header) in self.names


# ---- python -m emem_client.access new-token ROLE -----------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emem_client.access", description="Make bearer tokens for emem's services."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("new-token", help="print a new token and its [[token]] entry for the tokens file")
    make.add_argument("role", help="the database role the token acts as")
    make.add_argument("--name", help="who holds the token (stored in the entry)")
    args = parser.parse_args(argv)
    try:
        role = check_role_name(args.role)
    except ValueError as error:
        parser.error(str(error))
    token = new_token()
    entry = [
        "[[token]]",
        f"role = {_toml_string(role)}",
        f'sha256 = "{token_hash(token)}"',
        *([f"name = {_toml_string(args.name)}"] if args.name else []),
    ]
    print(f"token (give it to the caller; it is not stored anywhere): {token}", file=sys.stderr)
    print("\n".join(entry))
    return 0


def _toml_string(text: str) -> str:
    escaped = "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in text)
    return f'"{escaped}"'


if __name__ == "__main__":
    sys.exit(main())
