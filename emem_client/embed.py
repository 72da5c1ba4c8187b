"""The embedding worker behind `emem embed`: drains one space's embedding queue through the
gateway of that space's model.

Each batch is one transaction: claim entries (they stay locked, so other workers skip them),
embed their texts through the gateway, store the vectors, commit. A worker killed at any point
loses at most its batch's gateway work: the transaction rolls back and the entries are queued as
before, for it or another worker; nothing is stored twice. A gateway that is down or slow is tried
again with exponential backoff (a one-shot run gives up after `retries` failures in a row, a
following one never); a text the gateway refuses (a bad answer) is put back with its error for
later, so the rest goes on.

Who may run it: the extension's owner works every lane; an agent's role the lanes its agent
profile both reads and writes (the database decides).
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_never, wait_exponential
from tqdm import tqdm

from emem_client import calls
from emem_client.client import Client, run_on
from emem_client.gateways import GATEWAY_BAD_ANSWER, GATEWAY_TIMEOUT, GatewayError
from emem_client.types import EmbeddingCoverage, EmbeddingSpace

logger = logging.getLogger(__name__)
T = TypeVar("T")

MAX_REASON_CHARS = 1000  # what emem.defer_embeddings keeps of why a text was refused
GATEWAY_SLICE = 64  # texts per gateway call: a failure costs at most one slice's work


class PartialBatch(Exception):
    """The gateway failed midway through a batch: what it embedded before, and the failure."""

    def __init__(
        self,
        vectors: dict[int, list[float]],
        refused: list[tuple[calls.EmbeddingWork, GatewayError]],
        failure: GatewayError,
    ) -> None:
        super().__init__(str(failure))
        self.vectors = vectors
        self.refused = refused
        self.failure = failure


def gave_up(error: GatewayError, tries: int) -> str:
    """Why the worker stopped, in words that fit the failure: a slow gateway is not a gateway that is down."""
    if error.reason == GATEWAY_TIMEOUT:
        return (
            f"the embedding gateway did not answer in time {tries} times in a row ({error.message}); what was "
            "embedded is stored, the rest stays queued: run emem embed again with a longer --openai-timeout or "
            "a smaller --batch-size"
        )
    return (
        f"the embedding gateway failed {tries} times in a row ({error}); what was embedded is stored, the rest "
        "stays queued: run emem embed again when the gateway is back"
    )


class EmbedError(Exception):
    """The worker cannot go on: no space for the gateway's model, a gateway of another model, or a
    gateway that kept failing. The message says what to do."""


@dataclass(frozen=True)
class EmbedOptions:
    space_id: int | None = None  # None: the space of the gateway's model
    batch_size: int = 64  # texts per claim, gateway call and store
    follow: bool = False  # keep draining as new work arrives, until stopped
    poll_interval: float = 2.0  # seconds between looks at an empty queue (follow)
    retries: int = 5  # failed gateway calls in a row before a one-shot run gives up
    backoff: float = 1.0  # seconds before the first retry; doubled for each further one
    max_backoff: float = 60.0
    progress: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 1000:
            raise ValueError(f"the batch size must be from 1 to 1000, got {self.batch_size}")
        if not self.poll_interval > 0:
            raise ValueError(f"the poll interval must be more than 0 seconds, got {self.poll_interval}")
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, got {self.retries}")
        if not 0 <= self.backoff <= self.max_backoff <= 86400:
            raise ValueError(
                f"the backoff must be from 0 to the longest backoff, at most 86400 seconds; "
                f"got {self.backoff} and {self.max_backoff}"
            )

    def delay(self, failures: int) -> float:
        """Seconds to wait after `failures` failures in a row (1 or more)."""
        return min(self.max_backoff, self.backoff * 2.0 ** (failures - 1))


@dataclass
class EmbedReport:
    space_id: int
    model_name: str
    records_embedded: int = 0
    windows_embedded: int = 0
    refused: int = 0  # texts the gateway refused in this run: queued again for later
    refusal: str | None = None  # why the last of them was refused
    seconds: float = 0.0
    coverage: EmbeddingCoverage | None = None  # after the run, in the lanes the caller reads


def embed_queue(
    client: Client, options: EmbedOptions | None = None, stop: threading.Event | None = None
) -> EmbedReport:
    """Drains the queue of the space (see EmbedOptions) through the client's gateway; returns what
    it did. A following worker ends with KeyboardInterrupt once `stop` is set (between batches)."""
    return EmbedWorker(client, options or EmbedOptions(), stop or threading.Event()).run()


class EmbedWorker:
    def __init__(self, client: Client, options: EmbedOptions, stop: threading.Event) -> None:
        self.client = client
        self.options = options
        self.stop = stop

    def run(self) -> EmbedReport:
        space = self.with_retries(self.target_space)
        self.client.run(calls.queue_missing_embeddings(space.space_id))
        report = EmbedReport(space.space_id, space.model_name)
        started = time.monotonic()
        missing = self.client.embedding_coverage(space.space_id).missing
        bar = tqdm(total=missing, unit="text", desc=f"embed {space.model_name}", disable=not self.options.progress)
        with bar:
            while True:
                done = self.with_retries(lambda: self.one_batch(space, report))
                if done:
                    bar.update(done)
                    continue
                if not self.options.follow:
                    break
                if self.stop.wait(self.options.poll_interval):
                    raise KeyboardInterrupt
                if self.options.progress:
                    bar.total = bar.n + self.client.embedding_coverage(space.space_id).missing
                    bar.refresh()
        report.seconds = time.monotonic() - started
        report.coverage = self.client.embedding_coverage(space.space_id)
        return report

    def with_retries(self, attempt: Callable[[], T]) -> T:
        """The attempt's answer; a gateway failure is tried again after a growing pause (tenacity), for
        ever when following, else `retries` times."""
        retrying = Retrying(
            stop=stop_never if self.options.follow else stop_after_attempt(self.options.retries + 1),
            wait=wait_exponential(multiplier=self.options.backoff, max=self.options.max_backoff),
            retry=retry_if_exception_type(GatewayError),
            sleep=self.pause,
            before_sleep=lambda state: logger.warning(
                "the embedding gateway failed (%s); trying again in %.1f s",
                state.outcome.exception() if state.outcome else "?",
                state.upcoming_sleep,
            ),
            reraise=True,
        )
        try:
            return retrying(attempt)
        except GatewayError as error:
            raise EmbedError(gave_up(error, self.options.retries + 1)) from error

    def pause(self, seconds: float) -> None:
        """Waits between tries; a following worker stopped meanwhile ends at once."""
        if self.stop.wait(seconds):
            raise KeyboardInterrupt

    def target_space(self) -> EmbeddingSpace:
        """The space to fill, checked against the gateway's model (its vectors belong nowhere else)."""
        declaration = self.client.gateway.declaration()
        if self.options.space_id is None:
            space = self.client.run(calls.space_of_model(declaration))
            if space is None:
                raise EmbedError(
                    f"there is no embedding space for the gateway's model {declaration.model_name} "
                    f"({declaration.dimension} dimensions): create it first with emem init (the extension's owner)"
                )
        else:
            space = self.client.run(calls.embedding_space(self.options.space_id))
            if space is None:
                raise EmbedError(f"there is no embedding space {self.options.space_id} (see emem.embedding_spaces)")
        self.check_gateway(space)
        return space

    def check_gateway(self, space: EmbeddingSpace) -> None:
        """Before each batch too: a gateway whose model changed must not fill this space."""
        problem = calls.declaration_problem(self.client.gateway.declaration(), space)
        if problem is not None:
            raise EmbedError(f"{problem.message}: embed with the gateway of that space's model")

    def one_batch(self, space: EmbeddingSpace, report: EmbedReport) -> int:
        """Claims, embeds and stores one batch in one transaction; returns how many entries it took."""
        self.check_gateway(space)
        with self.client.transaction() as connection:
            work = run_on(connection, calls.claim_embeddings(space.space_id, self.options.batch_size))
            if not work:
                return 0
            failure: GatewayError | None = None
            try:
                vectors, refused = self.embed(work)
            except PartialBatch as partial:
                vectors, refused, failure = partial.vectors, partial.refused, partial.failure
            embedded = [item for item in work if item.queue_id in vectors]
            if embedded:
                run_on(
                    connection,
                    calls.store_embeddings(
                        [item.queue_id for item in embedded], [vectors[item.queue_id] for item in embedded]
                    ),
                )
            for item, error in refused:
                run_on(
                    connection,
                    calls.defer_embeddings(
                        [item.queue_id],
                        error.message[:MAX_REASON_CHARS] or error.reason,
                        self.options.delay(item.attempts + 1),
                    ),
                )
        report.records_embedded += sum(1 for item in embedded if item.record_id is not None)
        report.windows_embedded += sum(1 for item in embedded if item.record_id is None)
        report.refused += len(refused)
        if refused:
            report.refusal = refused[-1][1].message
        if failure is not None:  # what was embedded is stored; the rest waits in the queue for the next try
            raise failure
        return len(work)

    def embed(
        self, work: list[calls.EmbeddingWork]
    ) -> tuple[dict[int, list[float]], list[tuple[calls.EmbeddingWork, GatewayError]]]:
        """Vectors by queue id, and the items the gateway refused with why. A batch it refuses is
        tried text by text, so one bad text costs only itself; a gateway that fails (down, slow)
        midway is a PartialBatch: what it embedded before is stored, the rest tried again."""
        vectors: dict[int, list[float]] = {}
        refused: list[tuple[calls.EmbeddingWork, GatewayError]] = []
        for start in range(0, len(work), GATEWAY_SLICE):
            part = work[start : start + GATEWAY_SLICE]
            try:
                part_vectors, part_refused = self.embed_part(part)
            except GatewayError as error:
                if not vectors and not refused:
                    raise
                raise PartialBatch(vectors, refused, error) from error
            vectors |= part_vectors
            refused += part_refused
        return vectors, refused

    def embed_part(
        self, work: list[calls.EmbeddingWork]
    ) -> tuple[dict[int, list[float]], list[tuple[calls.EmbeddingWork, GatewayError]]]:
        try:
            return dict(zip([item.queue_id for item in work], self.vectors(work), strict=True)), []
        except GatewayError as error:
            if error.reason != GATEWAY_BAD_ANSWER:
                raise
            if len(work) == 1:
                return {}, [(work[0], error)]
        vectors: dict[int, list[float]] = {}
        refused: list[tuple[calls.EmbeddingWork, GatewayError]] = []
        for item in work:
            one_vectors, one_refused = self.embed_part([item])
            vectors |= one_vectors
            refused += one_refused
        return vectors, refused

    def vectors(self, work: list[calls.EmbeddingWork]) -> list[list[float]]:
        vectors = self.client.embed([item.text for item in work])
        if len(vectors) != len(work):
            raise GatewayError(GATEWAY_BAD_ANSWER, f"expected {len(work)} vectors, got {len(vectors)}")
        return vectors
