"""The `emem` command end to end against the real database.

Most tests call cli.main() in this process with the embedded gateway swapped for HashGateway
(deterministic 8-dimension vectors); some run the real command in a fresh Python, one of them
with the real embedded model.
"""

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
import pytest
from doubles import CONVERSATIONS, HashGateway, missing_extension_message
from queries import scalar
from test_embedded_model import MODEL as EMBEDDED_MODEL
from test_embedded_model import MODEL_FINGERPRINT as EMBEDDED_FINGERPRINT

from emem_client import cli

DOWN_GATEWAY = ["--gateway", "openai", "--openai-base-url", "http://127.0.0.1:9"]  # nothing listens on port 9
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "conversations.json"


@pytest.fixture
def emem(
    dsn: Callable[..., str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """Runs `emem --dsn <test database> ARGS...`; returns (exit code, stdout, stderr)."""
    real_gateway = cli.make_gateway
    monkeypatch.setattr(
        cli,
        "make_gateway",
        lambda args: HashGateway() if cli.option(args, "gateway") == "embedded" else real_gateway(args),
    )

    def run(*args: str) -> tuple[int, str, str]:
        code = cli.main(["--dsn", dsn(), *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def conversations(tmp_path: Path) -> Path:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(CONVERSATIONS))
    return path


@pytest.fixture
def ingested(emem: Callable[..., tuple[int, str, str]], conversations: Path) -> None:
    assert emem("init", "--lane", "team", "--lane", "docs")[0] == 0
    assert emem("ingest", "conversations", "--lane", "team", "--no-progress", str(conversations))[0] == 0


def as_json(out: str) -> Any:
    return json.loads(out)


def test_init_creates_the_space_lanes_profiles_and_bindings(
    db: psycopg.Connection, emem: Callable[..., tuple[int, str, str]], make_role: Callable[..., str]
) -> None:
    role = make_role("agent")
    code, out, _ = emem(
        "init",
        "--lane",
        "team",
        "--lane",
        "docs",
        "--profile",
        "reader=team,docs",
        "--bind",
        f"{role}=reader",
        "--json",
    )
    assert code == 0
    assert as_json(out) == {
        "space_id": 1,
        "model_name": "test-hash-8",
        "dimension": 8,
        "active": True,
        "lanes": ["team", "docs"],
        "profiles": {"reader": ["team", "docs"]},
        "bindings": {role: "reader"},
        "active_space_id": 1,
        "isolation": {"reader": "page_filter"},
    }
    assert db.execute("select model_name, dimension, is_active from emem.embedding_spaces").fetchall() == [
        ("test-hash-8", 8, True)
    ]
    assert db.execute(
        "select profile_name from emem.role_profiles where role_id = %s::regrole", (role,)
    ).fetchone() == ("reader",)
    code, out, _ = emem("init", "--lane", "team")  # again: nothing new, still fine
    assert (code, out.splitlines()[0]) == (0, "embedding space 1: test-hash-8 (8 dimensions), active")


def test_init_sets_a_profiles_lane_isolation_and_health_shows_it(
    db: psycopg.Connection, emem: Callable[..., tuple[int, str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    emem("init", "--lane", "hr", "--lane", "team", "--profile", "hr=hr", "--profile", "team=team")
    code, out, _ = emem("init", "--lane", "hr", "--isolation", "hr=strict")
    assert code == 0 and "agent profile hr: lane isolation strict\n" in out
    assert db.execute(
        "select settings->>'emem.lane_isolation' from emem.agent_profiles where profile_name = 'hr'"
    ).fetchone() == ("strict",)
    code, out, _ = emem("health")
    assert "agent profile hr: lane isolation strict\n" in out
    assert "agent profile team: lane isolation page_filter (other lanes show through; for secrets: " in out
    with pytest.raises(SystemExit) as exit_info:
        emem("init", "--isolation", "hr=private")
    assert exit_info.value.code == 2
    assert "the lane isolation is one of page_filter, strict" in capsys.readouterr().err
    assert db.execute(
        "select settings->>'emem.lane_isolation' from emem.agent_profiles where profile_name = 'hr'"
    ).fetchone() == ("strict",)


def test_ingest_find_timeline_and_health(
    emem: Callable[..., tuple[int, str, str]], ingested: None, tmp_path: Path
) -> None:
    (tmp_path / "guide.md").write_text("# Replication\n\nSet max_wal_senders before you start the standby.")
    code, out, _ = emem("ingest", "files", "--lane", "docs", "--tag", "handbook", "--no-progress", str(tmp_path))
    assert (code, out.splitlines()[0]) == (0, "records: 1 written, 0 already stored")

    code, out, _ = emem("find", "Who filed OPS-1432?", "--json")
    page = as_json(out)
    assert (code, page["degraded"], page["page"], page["page_size"]) == (0, False, 1, 30)
    ops = [row for row in page["rows"] if "OPS-1432" in row["content"]]
    assert [row["kind"] for row in ops] == ["conversation"] and "fulltext" in ops[0]["found_by"]

    code, out, _ = emem("find", "max_wal_senders", "--page-size", "5")
    assert code == 0
    assert out.startswith("page 1 of 2, 7 candidates, from vector, tags, window, fulltext\nrank  id")
    assert "Set max_wal_senders before you start the standby." in out

    code, out, _ = emem(
        "timeline",
        "--from",
        "2024-03-04",
        "--to",
        "2024-03-04T09:01",
        "--kind",
        "conversation",
        "--tag",
        "ops",
        "--json",
    )
    assert code == 0
    assert [(r["thread_id"], r["thread_position"]) for r in as_json(out)] == [("standup-1", n) for n in (0, 1, 3)]
    code, out, _ = emem("timeline", "--from", "2024-03-04")
    assert code == 0 and "Tomás: It runs on the replica now." in out

    code, out, _ = emem("health", "--json")
    assert (code, as_json(out)["status"], as_json(out)["reasons"]) == (0, "ok", [])
    code, out, _ = emem("health")
    assert out.splitlines()[:2] == ["status: ok", "gateway model: test-hash-8 (8 dimensions)"]


def test_find_answers_degraded_while_the_gateway_is_down(
    emem: Callable[..., tuple[int, str, str]], ingested: None
) -> None:
    code, out, _ = emem(*DOWN_GATEWAY, "find", "Who filed OPS-1432?", "--json")
    page = as_json(out)
    assert (code, page["degraded"], page["degraded_reason"]) == (0, True, "gateway_down")
    assert {row["record_id"] for row in page["rows"]} and all(
        row["distance_kind"] == "placeholder" and "fulltext" in row["found_by"] for row in page["rows"]
    )
    code, out, _ = emem(*DOWN_GATEWAY, "find", "Who filed OPS-1432?")
    assert code == 0  # a degraded answer is an answer
    assert out.splitlines()[1] == (
        "DEGRADED (gateway_down): no question vector, so vector, window did not run and distances are placeholders"
    )
    assert out.splitlines()[2].startswith("  http://127.0.0.1:9/embeddings is unreachable")
    code, out, _ = emem(*DOWN_GATEWAY, "health")
    assert (code, out.splitlines()[0]) == (3, "status: degraded (declaration_unreadable, gateway_down)")
    code, out, _ = emem(*DOWN_GATEWAY, "health", "--json")
    assert (code, as_json(out)["status"]) == (3, "degraded")


def test_ingest_reports_skipped_items_and_exits_4(emem: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    emem("init", "--lane", "team")
    good, bad = tmp_path / "good.txt", tmp_path / "bad.json"
    good.write_text("A good note about WAL.")
    bad.write_text("{")
    code, out, _ = emem("ingest", "files", "--lane", "team", "--no-progress", str(good), str(tmp_path / "absent.md"))
    assert code == 4
    assert out.splitlines()[0] == "records: 1 written, 0 already stored"
    assert out.splitlines()[-2:] == ["skipped 1 item(s):", f"  {tmp_path / 'absent.md'}: no such file or folder"]
    code, out, _ = emem("ingest", "conversations", "--no-progress", "--json", str(bad))
    assert code == 4 and as_json(out)["problems"][0]["reason"].startswith("invalid JSON")


def test_ingest_of_hostile_notes_reports_each_and_exits_4_without_a_traceback(
    emem: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    emem("init", "--lane", "team")
    notes = tmp_path / "notes.jsonl"
    hostile = [
        '{"id": "a", "content": "x", "links": 5}',
        '{"content": "x", "authority": NaN}',
        '{"content": "x", "metadata": {"v": Infinity}}',
        "[" * 200_000 + "]" * 200_000,
        json.dumps({"id": "i" * 3000, "content": "x"}),
    ]
    notes.write_text("\n".join(['{"content": "A good note."}', *hostile, '{"content": "Another good note."}']))
    code, out, err = emem("ingest", "notes", "--lane", "team", "--no-progress", str(notes))
    assert (code, err) == (4, "")
    assert out.splitlines()[0] == "records: 2 written, 0 already stored"
    assert [line.split(": ", 1)[0] for line in out.splitlines()[-5:]] == [f"  {notes}:{n}" for n in range(2, 7)]


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["find"],
        ["find", "x", "--page", "0"],
        ["timeline", "--from", "yesterday"],
        ["timeline", "--to", "2024-13-01"],
        ["explain"],
        ["--dsn", "x"],
        ["init", "--profile", "reader"],
        ["--gateway", "elsewhere", "health"],
        ["ingest", "files"],
        ["ingest", "pictures", "x.png"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2


def test_ingest_options_that_do_not_go_together_exit_2(emem: Callable[..., tuple[int, str, str]]) -> None:
    code, _, err = emem("ingest", "files", "--window-size", "2", "--window-stride", "3", "doc.md")
    assert (code, err) == (2, "emem: error: the window stride must be from 1 to the size (2), got 3\n")


def test_errors_exit_with_their_situations_code_and_a_message_that_says_what_to_do(
    emem: Callable[..., tuple[int, str, str]], conversations: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = emem("ingest", "conversations", "--no-progress", str(conversations))
    assert code == 1 and "run `emem init`" in err
    emem("init", "--lane", "main")
    code, _, err = emem("find", "anything", "--page-size", "5000")
    assert code == 2  # bad input, as the database says: the service layer's bad_input
    assert err.startswith("emem: error: ") and "page_size 5000 is out of range (SQLSTATE 22023)" in err
    assert err.splitlines()[1:] == ["hint: Accepted: 1 to 1000."]
    code, _, err = emem("init", "--profile", "reader=nowhere")
    assert code == 2 and "unknown lane(s) {nowhere} for agent profile reader" in err
    code = cli.main(["--dsn", "host=127.0.0.1 port=9 user=nobody dbname=nothing connect_timeout=3", "health"])
    assert code == 1 and capsys.readouterr().err.startswith("emem: error: cannot connect to PostgreSQL")


@pytest.mark.embedded_model
def test_the_emem_command_with_the_embedded_model(dsn: Callable[..., str]) -> None:
    """The real all-MiniLM-L6-v2: init, ingest the shipped examples, find by meaning, explain; each
    command loads the model once."""

    def emem(*args: str) -> str:
        run = observe(dsn(), *args)
        assert (run.code, run.model_loads) == (0, 1), run.err
        return run.out

    assert "sentence-transformers/all-MiniLM-L6-v2 (384 dimensions), active" in emem("init", "--lane", "team")
    assert emem("ingest", "conversations", "--lane", "team", "--no-progress", str(EXAMPLES)).startswith(
        "records: 12 written"
    )
    page = json.loads(emem("find", "Why does the finance export on the replica keep failing?", "--json"))
    assert not page["degraded"]
    assert page["rows"][0]["content"].startswith(("Maya:", "Tomás:"))
    assert page["rows"][0]["distance_kind"] == "cosine"
    assert any(row["windows"] for row in page["rows"])
    assert "record_vectors  vector" in emem("explain", "Why does the finance export keep failing?")


# The `emem` command in a fresh Python that reports, on the last line of stderr, how often the
# embedded model was loaded and whether torch was imported at all.
OBSERVED_EMEM = """
import sys
from emem_client import cli, gateways

loads = []
real_load = gateways.load_embedded_model
gateways.load_embedded_model = lambda *args: loads.append(args) or real_load(*args)
try:
    code = cli.main(sys.argv[1:])
finally:
    print(f"model loads: {len(loads)}, torch imported: {'torch' in sys.modules}", file=sys.stderr)
sys.exit(code)
"""


@dataclass(frozen=True)
class Observed:
    code: int
    out: str
    err: str
    model_loads: int
    torch_imported: bool


def observe(dsn: str, *args: str) -> Observed:
    done = subprocess.run(
        [sys.executable, "-c", OBSERVED_EMEM, "--dsn", dsn, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    *err, report = done.stderr.splitlines()
    found = re.fullmatch(r"model loads: (\d+), torch imported: (True|False)", report)
    assert found, done.stderr
    return Observed(done.returncode, done.stdout, "\n".join(err), int(found[1]), found[2] == "True")


def test_commands_that_do_not_embed_do_not_load_the_model(
    db: psycopg.Connection, dsn: Callable[..., str], tmp_path: Path
) -> None:
    db.execute("select emem.create_lane('main')")
    db.execute("select emem.create_embedding_space(%s, 384, %s, true)", (EMBEDDED_MODEL, EMBEDDED_FINGERPRINT))
    db.execute("select emem.put_record('note', 'Kowalski sent INV-2031', 'main')")
    nothing_to_embed = tmp_path / "empty-notes.jsonl"
    nothing_to_embed.write_text('{"content": ""}\n{"content": "   "}\n')
    for args, code in (
        (["timeline"], 0),
        (["--version"], 0),
        (["ingest", "notes", "--no-progress", str(nothing_to_embed)], 4),
    ):
        run = observe(dsn(), *args)
        assert (run.code, run.model_loads, run.torch_imported) == (code, 0, False), (args, run.err)


@pytest.fixture
def many_notes(db: psycopg.Connection) -> None:
    """A thousand long notes: more output than a pipe holds (64 KiB), so the command is still writing when
    its reader has gone."""
    db.execute("select emem.create_lane('main')")
    db.execute(
        "select emem.put_record('note', repeat('Invoice INV-2031 is overdue. ', 20) || n, 'main', array['invoice'])"
        " from generate_series(1, 1000) as n"
    )


@pytest.mark.parametrize(
    ("command", "lines"),
    [
        (f"{' '.join(DOWN_GATEWAY)} find 'Which invoice is overdue?' --page-size 1000 --json | head -3", 3),
        ("timeline --page-size 1000 | head -2", 2),
    ],
)
def test_output_closed_early_ends_quietly(dsn: Callable[..., str], many_notes: None, command: str, lines: int) -> None:
    emem = f"{shlex.quote(sys.executable)} -m emem_client.cli --dsn {shlex.quote(dsn())}"
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {emem} {command}"], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr, len(done.stdout.splitlines())) == (cli.ExitCode.OUTPUT_CLOSED, "", lines)


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    codes = out[out.index("exit codes:") :].splitlines()[1:]
    assert [line.split()[0] for line in codes] == ["0", "1", "2", "3", "4", "130", "141"]
    assert "health: degraded" in codes[3] and "ingest: written, but some items were skipped" in codes[4]


def test_version_names_the_client_and_the_extension_in_the_database(
    db: psycopg.Connection, emem: Callable[..., tuple[int, str, str]]
) -> None:
    extension = scalar(db, "select extversion from pg_extension where extname = 'emem'")
    client = version("emem-client")
    where = f'database "{db.info.dbname}" on {db.info.host}:{db.info.port}'
    assert emem("--version") == (0, f"emem-client {client}\nemem extension {extension} in {where}\n", "")
    code, out, _ = emem("--version", "--json")
    assert (code, as_json(out)) == (0, {"client": client, "extension": extension, "database": db.info.dbname})


def test_version_says_when_the_extension_is_not_installed(
    database_without_emem: tuple[str, str], db: psycopg.Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    name, conninfo = database_without_emem
    assert cli.main(["--dsn", conninfo, "--version"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        f'emem extension: not installed in database "{name}" on {db.info.host}:{db.info.port}'
        " (CREATE EXTENSION emem CASCADE)"
    )
    code = cli.main(["--dsn", "host=127.0.0.1 port=9 user=nobody dbname=nothing connect_timeout=3", "--version"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, f"emem-client {version('emem-client')}\n")
    assert err.startswith("emem: error: cannot connect to PostgreSQL")


@pytest.mark.parametrize("command", [["find", "anything"], ["init"], ["timeline"], ["health"], ["explain", "x"]])
def test_a_database_without_the_extension_gets_one_clear_message(
    database_without_emem: tuple[str, str],
    db: psycopg.Connection,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    name, conninfo = database_without_emem
    assert cli.main(["--dsn", conninfo, *command]) == 1
    assert capsys.readouterr() == ("", f"emem: error: {missing_extension_message(name, db)}\n")


def use_the_recommended_profile(db: psycopg.Connection) -> list[tuple[str, str, bool]]:
    """Sets control/exact_first.conf's profile for the test database; (name, label, needs_vector) of its
    lookups as the database's registry lists them, in tie order."""
    recommended = (Path(__file__).resolve().parents[2] / "control" / "exact_first.conf").read_text()
    setting = re.search(r"^emem\.pipeline_profile\s*=\s*'([^']+)'", recommended, re.MULTILINE)
    assert setting, "control/exact_first.conf sets emem.pipeline_profile"
    profile = setting[1]
    db.execute(f"alter database {db.info.dbname} set emem.pipeline_profile = '{profile}'")
    names = [entry.split(":")[0].strip() for entry in profile.split(",")]
    lookups = db.execute(
        "select name, label, needs_vector from emem.lookup_registry() where name = any(%s) order by tie_order",
        (names,),
    ).fetchall()
    assert len(lookups) == len(names) == 7
    return lookups


def test_explain_shows_how_find_reads_the_question(
    db: psycopg.Connection, emem: Callable[..., tuple[int, str, str]], ingested: None
) -> None:
    lookups = use_the_recommended_profile(db)
    for gateway, degraded in (([], False), (DOWN_GATEWAY, True)):
        code, out, _ = emem(*gateway, "explain", "Who filed OPS-1432?")
        assert code == 0
        lines = out.splitlines()
        assert lines[:3] == ["terms: file, ops-1432", "words WordNet knows: file", "terms for full text: OPS-1432"]
        assert ("DEGRADED (gateway_down): the vector lookups do not run" in lines) == degraded
        table = lines[lines.index("") + 2 :][: len(lookups)]  # under the blank line and the header
        for (name, label, needs_vector), line in zip(lookups, table, strict=True):
            figures = r"-\s+skipped" if degraded and needs_vector else r"\d+\s+\d+\.\d"
            assert re.fullmatch(rf"{name}\s+{label}\s+\d+\s+{figures}", line), line
        ranks_header = lines[next(n for n, line in enumerate(lines) if line.startswith("rank of each row")) + 1]
        assert re.split(r"\s{2,}", ranks_header) == ["rank", "id", "placed by", *(label for _, label, _ in lookups)]

    code, out, _ = emem("explain", "Who filed OPS-1432?", "--json", "--page-size", "2")
    explanation = as_json(out)
    assert code == 0 and set(explanation) >= {"question", "pipeline_profile", "lookups", "rows", "total_candidates"}
    assert [row["rank"] for row in explanation["rows"]] == [1, 2]


def test_find_names_every_lookup_of_the_profile_as_the_database_lists_them(
    db: psycopg.Connection, emem: Callable[..., tuple[int, str, str]], ingested: None
) -> None:
    lookups = use_the_recommended_profile(db)
    code, out, _ = emem("find", "Who filed OPS-1432?")
    assert code == 0 and out.splitlines()[0].endswith(f", from {', '.join(label for _, label, _ in lookups)}")
    code, out, _ = emem(*DOWN_GATEWAY, "find", "Who filed OPS-1432?")
    first, second = out.splitlines()[:2]
    assert code == 0
    assert first.endswith(f", from {', '.join(label for _, label, needs_vector in lookups if not needs_vector)}")
    skipped = ", ".join(label for _, label, needs_vector in lookups if needs_vector)
    assert second.startswith(f"DEGRADED (gateway_down): no question vector, so {skipped} did not run")
    page = as_json(emem(*DOWN_GATEWAY, "find", "Who filed OPS-1432?", "--json")[1])
    assert [(lookup["name"], lookup["label"], lookup["ran"]) for lookup in page["lookups"]] == [
        (name, label, not needs_vector) for name, label, needs_vector in lookups
    ]


# Window title, clipboard write (OSC 52), bell, an 8-bit CSI, a right-to-left override.
HOSTILE = "Invoice \x1b]0;owned\x07 \x1b]52;c;ZWNobyBvd25lZA==\x07 \x9b2J \u202eevil"
RAW_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_record_content_reaches_the_terminal_with_its_controls_escaped(
    db: psycopg.Connection, emem: Callable[..., tuple[int, str, str]]
) -> None:
    db.execute("select emem.create_lane('main')")
    db.execute("select emem.put_record('note', %s, 'main', array['invoice'])", (HOSTILE,))
    for args in (["timeline"], [*DOWN_GATEWAY, "find", "Which invoice?"]):
        code, out, _ = emem(*args)
        assert code == 0 and not RAW_CONTROLS.search(out), out
        assert "Invoice \\x1b]0;owned\\x07 \\x1b]52;c;ZWNobyBvd25lZA==\\x07 \\x9b2J \\u202eevil" in out
    for args in (["timeline", "--json"], [*DOWN_GATEWAY, "find", "Which invoice?", "--json"]):
        code, out, _ = emem(*args)
        assert code == 0 and not RAW_CONTROLS.search(out), out
        records = as_json(out)
        assert (records if isinstance(records, list) else records["rows"])[0]["content"] == HOSTILE


def test_timeline_json_dates_are_iso_8601_and_to_is_optional(
    db: psycopg.Connection, emem: Callable[..., tuple[int, str, str]]
) -> None:
    db.execute("select emem.create_lane('main')")
    for content, moment in (("Kick-off", "2024-03-04 09:00:00+00"), ("Renew the domain", "2999-01-01 00:00:00+00")):
        db.execute("select emem.put_record('note', %s, 'main', occurred_at => %s::timestamptz)", (content, moment))
    code, out, _ = emem("timeline", "--from", "2024-01-01", "--json")
    records = as_json(out)
    assert code == 0 and [record["content"] for record in records] == ["Kick-off", "Renew the domain"]
    assert [record["occurred_at"] for record in records] == ["2024-03-04T09:00:00+00:00", "2999-01-01T00:00:00+00:00"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00", records[0]["created_at"])
    code, out, _ = emem("timeline", "--to", "2024-12-31", "--json")
    assert [record["content"] for record in as_json(out)] == ["Kick-off"]


def test_find_says_when_its_totals_are_a_lower_bound(
    emem: Callable[..., tuple[int, str, str]], ingested: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = "Why does the finance export keep failing?"
    code, out, _ = emem("find", question)
    assert code == 0 and re.search(r"^page 1 of \d+, \d+ candidates, ", out)
    monkeypatch.setenv("PGOPTIONS", "-c emem.exact_totals_up_to=1")  # the owner's session may set it
    code, out, _ = emem("find", question)
    assert code == 0 and re.search(r"^page 1 of \d+, at least \d+ candidates, ", out)
    assert as_json(emem("find", question, "--json")[1])["totals_exact"] is False


def test_explain_shows_an_agent_its_rows_provenance_only(
    db: psycopg.Connection,
    emem: Callable[..., tuple[int, str, str]],
    ingested: None,
    make_role: Callable[..., str],
    dsn: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Under page_filter the lookups' counts and ranks span every lane: an agent's explain
    shows its rows and what found them, and says where the rest is shown."""
    db.execute("select emem.create_agent_profile('clerk', array['team'])")
    code = cli.main(["--dsn", dsn(make_role("clerk", "clerk")), "explain", "Why does the finance export keep failing?"])
    out = capsys.readouterr().out
    assert code == 0
    assert "each lookup's counts and ranks are shown to the extension's owner, or under strict isolation" in out
    assert re.search(r"^rank\s+id\s+placed by\s+found by$", out, re.MULTILINE)
    assert "merged in" not in out


def test_explain_shows_an_agent_under_strict_isolation_its_counts_and_ranks_without_times(
    db: psycopg.Connection,
    emem: Callable[..., tuple[int, str, str]],
    ingested: None,
    make_role: Callable[..., str],
    dsn: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Under strict isolation an agent gets each lookup's counts and each row's ranks (its lanes alone), but
    no times, plans or statements (those are the owner's): explain shows what it is given."""
    db.execute("select emem.create_agent_profile('clerk', array['team'])")
    db.execute("select emem.set_agent_setting('clerk', 'emem.lane_isolation', 'strict')")
    code = cli.main(["--dsn", dsn(make_role("clerk", "clerk")), "explain", "Why does the finance export keep failing?"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    note = lines.index("times, plans and statements are shown to the extension's owner only")
    assert re.split(r"\s{2,}", lines[note + 1]) == ["lookup", "label", "weight", "candidates"]
    assert all(re.fullmatch(r"\S+\s+\S.*\s+\d+\s+(\d+|skipped)", line) for line in lines[note + 2 : note + 4])
    assert any(line.startswith("rank of each row") for line in lines)
    assert not any("merged in" in line for line in lines)
