"""A real OpenAI-compatible embeddings service on 127.0.0.1, for the tests of the gateway and of
the embedding worker.

It speaks the OpenAI embeddings API and answers each text with a deterministic vector (or with
the vectors of `Behaviour.embedder`), so a record whose content is the question sits at distance
0. Tests change its Behaviour while it runs: a delay, failures, garbage, texts it refuses; it
records every request, with the Authorization header that tells workers apart.
"""

import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def vector_for(text: str, dimension: int, variant: str) -> list[float]:
    generator = random.Random(f"{variant}|{text}")
    return [generator.uniform(-1, 1) for _ in range(dimension)]


@dataclass
class Behaviour:
    """How the fake embeddings service answers; tests change it while it runs."""

    dimension: int = 8
    variant: str = "model-a"
    delay: float = 0.0
    failures_left: int = 0  # answer 503 this many times first
    garbage: bool = False
    refused: set[str] = field(default_factory=set)  # answer 400 to a request holding one of these
    embedder: Callable[[list[str]], list[list[float]]] | None = None  # vectors other than vector_for's
    arrived: threading.Event = field(default_factory=threading.Event)  # set as each request arrives
    requests: list[dict[str, Any]] = field(default_factory=list)

    def texts_embedded(self, authorization: str | None = None) -> list[str]:
        """Every text the service was asked to embed (by the bearer of this header), in order."""
        return [
            text
            for request in self.requests
            if authorization is None or request["authorization"] == authorization
            for text in request["body"]["input"]
        ]


class EmbeddingsHandler(BaseHTTPRequestHandler):
    behaviour: Behaviour

    def do_POST(self) -> None:
        behaviour = self.behaviour
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        behaviour.requests.append({"path": self.path, "body": body, "authorization": self.headers["Authorization"]})
        behaviour.arrived.set()
        time.sleep(behaviour.delay)
        if behaviour.failures_left > 0:
            behaviour.failures_left -= 1
            return self._answer(503, {"error": {"message": "warming up"}})
        if behaviour.garbage:
            return self._answer(200, {"data": "not a list of embeddings"})
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if behaviour.refused & set(texts):
            return self._answer(400, {"error": {"message": "this text cannot be embedded"}})
        vectors = (
            behaviour.embedder(texts)
            if behaviour.embedder
            else [vector_for(text, behaviour.dimension, behaviour.variant) for text in texts]
        )
        data = [{"object": "embedding", "index": n, "embedding": vector} for n, vector in enumerate(vectors)]
        data.reverse()  # the API does not promise order; the gateway sorts by index
        self._answer(200, {"object": "list", "model": body["model"], "data": data, "usage": {"prompt_tokens": 0}})

    def _answer(self, status: int, payload: dict[str, Any]) -> None:
        encoded = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(encoded)))
        self.end_headers()
        self.wfile.write(encoded)

    def log_message(self, *_: Any) -> None:
        pass


@dataclass
class FakeService:
    base_url: str
    behaviour: Behaviour


@contextmanager
def serving() -> Iterator[FakeService]:
    """The service on a free loopback port while the block runs."""
    behaviour = Behaviour()
    handler = type("Handler", (EmbeddingsHandler,), {"behaviour": behaviour})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.block_on_close = False  # a handler still sleeping for a timeout test must not hold up teardown
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeService(f"http://127.0.0.1:{server.server_port}/v1", behaviour)
    finally:
        server.shutdown()
        server.server_close()
