"""The `emem` command end to end against the real database.

Most tests call cli.main() in this process with the embedded gateway swapped for HashGateway
(deterministic 8-dimension vectors); one runs the real command with the real embedded model.
"""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_ingest import CONVERSATIONS, HashGateway

from emem_client import cli

DOWN_GATEWAY = ["--gateway", "openai", "--openai-base-url", "http://127.0.0.1:9"]  # nothing listens on port 9
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "conversations.json"


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
        "lanes": ["team", "docs"],
        "profiles": {"reader": ["team", "docs"]},
        "bindings": {role: "reader"},
    }
    assert db.execute("select model_name, dimension, is_active from emem.embedding_spaces").fetchall() == [
        ("test-hash-8", 8, True)
    ]
    assert db.execute(
        "select profile_name from emem.role_profiles where role_id = %s::regrole", (role,)
    ).fetchone() == ("reader",)
    code, out, _ = emem("init", "--lane", "team")  # again: nothing new, still fine
    assert (code, out.splitlines()[0]) == (0, "embedding space 1: test-hash-8 (8 dimensions), active")


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
    assert code == 0 and "DEGRADED (gateway_down)" in out.splitlines()[0]
    code, out, _ = emem(*DOWN_GATEWAY, "health")
    assert (code, out.splitlines()[0]) == (0, "status: degraded (declaration_unreadable, gateway_down)")


def test_ingest_reports_skipped_items_and_exits_1(emem: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    emem("init", "--lane", "team")
    good, bad = tmp_path / "good.txt", tmp_path / "bad.json"
    good.write_text("A good note about WAL.")
    bad.write_text("{")
    code, out, _ = emem("ingest", "files", "--lane", "team", "--no-progress", str(good), str(tmp_path / "absent.md"))
    assert code == 1
    assert out.splitlines()[0] == "records: 1 written, 0 already stored"
    assert out.splitlines()[-2:] == ["skipped 1 item(s):", f"  {tmp_path / 'absent.md'}: no such file or folder"]
    code, out, _ = emem("ingest", "conversations", "--no-progress", "--json", str(bad))
    assert code == 1 and as_json(out)["problems"][0]["reason"].startswith("invalid JSON")


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["find"],
        ["find", "x", "--page", "0"],
        ["timeline", "--from", "yesterday"],
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


def test_errors_exit_1_with_a_message_that_says_what_to_do(
    emem: Callable[..., tuple[int, str, str]], conversations: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = emem("ingest", "conversations", "--no-progress", str(conversations))
    assert code == 1 and "run `emem init`" in err
    emem("init", "--lane", "main")
    code, _, err = emem("find", "anything", "--page-size", "5000")
    assert code == 1
    assert err.startswith("emem: error: ") and "page_size 5000 is out of range (SQLSTATE 22023)" in err
    assert err.splitlines()[1:] == ["hint: Accepted: 1 to 1000."]
    code, _, err = emem("init", "--profile", "reader=nowhere")
    assert code == 1 and "unknown lane(s) {nowhere} for agent profile reader" in err
    code = cli.main(["--dsn", "host=127.0.0.1 port=9 user=nobody dbname=nothing connect_timeout=3", "health"])
    assert code == 1 and capsys.readouterr().err.startswith("emem: error: cannot connect to PostgreSQL")


def test_the_emem_command_with_the_embedded_model(dsn: Callable[..., str]) -> None:
    """The one test with the real all-MiniLM-L6-v2: init, ingest the shipped examples, find by meaning."""

    def emem(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "emem_client.cli", "--dsn", dsn(), *args],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "sentence-transformers/all-MiniLM-L6-v2 (384 dimensions), active" in emem("init", "--lane", "team")
    assert emem("ingest", "conversations", "--lane", "team", "--no-progress", str(EXAMPLES)).startswith(
        "records: 12 written"
    )
    page = json.loads(emem("find", "Why does the finance export on the replica keep failing?", "--json"))
    assert not page["degraded"]
    assert page["rows"][0]["content"].startswith(("Maya:", "Tomás:"))
    assert page["rows"][0]["distance_kind"] == "cosine"
    assert any(row["windows"] for row in page["rows"])
