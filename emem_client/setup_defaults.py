"""Where the command line and the HTTP service connect when no DSN is given.

scripts/setup.sh records its local cluster as the libpq service `emem` in the system service file
(`pg_config --sysconfdir`/pg_service.conf: /etc/postgresql-common/pg_service.conf on Debian), so a
first `emem find` in a new shell reaches it without a variable. What a user says still wins:
--dsn over everything (the caller's business), then EMEM_DSN, then any libpq connection variable
(libpq then decides, as for psql), and only then the service entry, where libpq looks for it.
"""

import os
import re
from collections.abc import Mapping
from pathlib import Path

SERVICE_NAME = "emem"
# The variables that tell libpq where to connect, or as whom (libpq's "Environment Variables").
CONNECTION_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")
# libpq's compiled-in system configuration directory: Debian's libpq5 and the libpq inside
# psycopg's binary wheels both read /etc/postgresql-common (PGSYSCONFDIR overrides it).
COMPILED_SYSCONFDIR = "/etc/postgresql-common"
SECTION = re.compile(r"^\s*\[(?P<name>[^\]]*)\]\s*$")


def default_conninfo(environ: Mapping[str, str] = os.environ) -> str:
    """EMEM_DSN if set; else "" when a libpq connection variable is set (libpq decides); else
    "service=emem" when that service entry exists where libpq looks; else "" (libpq's defaults)."""
    if "EMEM_DSN" in environ:
        return environ["EMEM_DSN"]
    if any(environ.get(name) for name in CONNECTION_VARIABLES):
        return ""
    if any(defines_service(path, SERVICE_NAME) for path in service_files(environ)):
        return f"service={SERVICE_NAME}"
    return ""


def service_files(environ: Mapping[str, str]) -> list[Path]:
    """The service files libpq reads, in its order: the user's (PGSERVICEFILE, else
    ~/.pg_service.conf), then the system's (PGSYSCONFDIR, else the compiled-in directory)."""
    user_file = environ.get("PGSERVICEFILE") or (home(environ) / ".pg_service.conf")
    system_directory = environ.get("PGSYSCONFDIR") or COMPILED_SYSCONFDIR
    return [Path(user_file), Path(system_directory) / "pg_service.conf"]


def home(environ: Mapping[str, str]) -> Path:
    """The home directory as libpq finds it: HOME, else the user database."""
    return Path(environ["HOME"]) if environ.get("HOME") else Path.home()


def defines_service(path: Path, name: str) -> bool:
    """Whether the service file holds a `[name]` section (an unreadable file holds none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any((match := SECTION.match(line)) and match["name"].strip() == name for line in text.splitlines())
