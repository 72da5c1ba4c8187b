"""Ingest notes, conversations and files into emem through the bulk path, with vectors and windows:
the writing side (emem_client.sources reads the input into units, emem_client.units describes them).

- Notes (JSON Lines or a JSON array of objects) become `note` or `entity` records; their `links`
  become edges between notes of the same input.
- Conversations (JSON) become one `conversation` record per turn, in order: thread_id is the
  conversation's id, thread_position the turn's index.
- Files (text, Markdown, MDX, HTML) become `file` records, one per chunk of about `chunk_chars`
  characters (a code block whole): thread_id is the file's absolute path.
- Windows cover `size` consecutive turns or chunks every `stride` records, never crossing a
  conversation or a file (nor a skipped turn); a window's vector is the embedding of its
  records' texts joined.

Records are written in batches through put_records with their vectors. Every record carries a
source_key (kind, thread or note id, position, hash of the content), unique in its lane, so
ingesting the same input into a lane again writes nothing new and embeds nothing again: the
records, threads and windows a lane holds are looked up first, and the database decides what is
new (put_records and link_records write a key or a link once, whoever else writes it at the same
time). The same input ingested into another lane is written there whole, with its vectors and
windows. When a conversation or file changed since it was stored in the lane, its stored records
are kept and the new version becomes a thread of its own, `<id>@<hash>`. A deadlock or a
serialization failure (concurrent ingests) is retried with backoff (tenacity).

Bad input is reported per item in the IngestReport and skipped, and the rest is written. An item
is written whole or not at all: a note with its links checked, a conversation or file with all its
turns or chunks (a turn the input itself spoils is skipped and reported; windows do not cross it).
Vectors embedded before the gateway failed are written with their records; the rest go without,
for the embedding queue.
"""

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from tenacity import (
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)
from tqdm import tqdm

from emem_client import calls
from emem_client.client import Client
from emem_client.gateways import GATEWAY_DOWN, GATEWAY_TIMEOUT, GATEWAY_UNAVAILABLE, GatewayError
from emem_client.sources import Parsed, read_conversations, read_files, read_notes
from emem_client.units import (
    IngestError,
    IngestOptions,
    IngestReport,
    Link,
    Planned,
    Problem,
    Unit,
    first_items,
    record_key,
)

T = TypeVar("T")
EMBED_SLICE = 64  # texts per gateway call: the progress bar moves after each
# A gateway that cannot answer now: records are written without vectors, for the embedding queue.
GATEWAY_FAILURES = frozenset({GATEWAY_DOWN, GATEWAY_TIMEOUT, GATEWAY_UNAVAILABLE})
# What the database says about bad input (22023, 22007, 42501, 23505 ...): reported per item. A lost
# connection or a server failure is not the input's fault and stops the ingest.
REFUSED = (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError)
# Concurrent writers of the same keys may meet a deadlock or a serialization failure: the call is
# tried again seven times, after random pauses growing from 0.05 to 3.2 seconds (about 10 s in all),
# then the error stops the ingest.
RETRIED = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
RETRY_ATTEMPTS = 8
RETRY_FIRST_DELAY = 0.05
RETRY_LONGEST_DELAY = 3.2
ITEM_NUMBER = re.compile(r"^item (\d+): ")  # how put_records names the item it refuses (from 1)


# ---- what a lane holds already ---------------------------------------------------------------
# Each lookup is scoped by lane: a key, thread or window of one lane says nothing about another's.
# It reads what the acting role can read (row-level security); what it cannot see is written
# again and the database keeps the stored record.


def stored_records(keys: Sequence[tuple[str, str]]) -> calls.Call[set[tuple[str, str]]]:
    """The (lane, source_key) pairs of these that their lanes hold."""
    return calls.Call(
        "select r.lane_name, r.source_key from emem.records as r"
        " join unnest(%s::text[], %s::text[]) as k (lane_name, source_key)"
        " on r.lane_name = k.lane_name and r.source_key = k.source_key"
        " where r.source_key is not null",
        ([lane for lane, _ in keys], [key for _, key in keys]),
        lambda rows: {(row["lane_name"], row["source_key"]) for row in rows},
    )


ThreadKey = tuple[str, str, str]  # lane, kind, thread id


def stored_threads(threads: Sequence[ThreadKey]) -> calls.Call[dict[ThreadKey, dict[int, str | None]]]:
    """(lane, kind, thread id) -> {position: source_key} of the stored records of these threads."""

    def read(rows: calls.Rows) -> dict[ThreadKey, dict[int, str | None]]:
        stored: dict[ThreadKey, dict[int, str | None]] = {}
        for row in rows:
            thread = (row["lane_name"], row["kind"], row["thread_id"])
            stored.setdefault(thread, {})[row["thread_position"]] = row["source_key"]
        return stored

    return calls.Call(
        "select r.lane_name, r.kind::text as kind, r.thread_id, r.thread_position, r.source_key from emem.records as r"
        " join unnest(%s::text[], %s::emem.record_kind[], %s::text[]) as t (lane_name, kind, thread_id)"
        " on r.lane_name = t.lane_name and r.kind = t.kind and r.thread_id = t.thread_id",
        thread_columns(threads),
        read,
    )


def stored_windows(threads: Sequence[ThreadKey]) -> calls.Call[set[tuple[str, str, str, int, int]]]:
    """(lane, kind, thread id, first, last position) of these threads' windows in the active space."""
    return calls.Call(
        "select w.lane_name, w.thread_kind::text as kind, w.thread_id, w.first_position, w.last_position"
        " from emem.windows as w"
        " join emem.embedding_spaces as s on s.space_id = w.space_id and s.is_active"
        " join unnest(%s::text[], %s::emem.record_kind[], %s::text[]) as t (lane_name, kind, thread_id)"
        " on w.lane_name = t.lane_name and w.thread_kind = t.kind and w.thread_id = t.thread_id",
        thread_columns(threads),
        lambda rows: {
            (r["lane_name"], r["kind"], r["thread_id"], r["first_position"], r["last_position"]) for r in rows
        },
    )


def thread_columns(threads: Sequence[ThreadKey]) -> tuple[list[str], list[str], list[str]]:
    return [lane for lane, _, _ in threads], [kind for _, kind, _ in threads], [thread for _, _, thread in threads]


def link_once(from_id: int, to_id: int, relation: str, properties: dict[str, Any]) -> calls.Call[bool]:
    """emem.link_records (the same link again is the same edge), and whether the edge is new: the
    statement's snapshot, taken before link_records ran, does not hold a new edge."""
    link = calls.link(from_id, to_id, relation, properties)
    return calls.Call(
        "select not exists (select from emem.edges as e where e.edge_id = linked.edge_id) as created"
        f" from ({link.sql}) as linked",
        link.params,
        lambda rows: bool(rows[0]["created"]),
    )


def database_reason(error: psycopg.DatabaseError) -> str:
    """The database's message, with its hint; a clearer word for a thread position taken twice."""
    diagnostic = error.diag
    if diagnostic.constraint_name == "one_record_per_thread_position":
        return "another version of this conversation or file was written meanwhile: ingest it again to add this one"
    message = diagnostic.message_primary or str(error).strip()
    return f"{message} ({diagnostic.message_hint})" if diagnostic.message_hint else message


def refused_item(error: psycopg.DatabaseError) -> tuple[int | None, str]:
    """The number of the item put_records refused (None: it named none) and why, without the number."""
    reason = database_reason(error)
    numbered = ITEM_NUMBER.match(reason)
    return (int(numbered[1]), reason[numbered.end() :]) if numbered else (None, reason)


# ---- writing -------------------------------------------------------------------------------

Written = tuple[Unit, list[dict[str, Any]], list[tuple[int, bool]]]  # a unit, its items, (record id, created) of each


class Ingester:
    """Writes parsed units through a Client: records with vectors in batches, then windows, then edges."""

    def __init__(self, client: Client, options: IngestOptions) -> None:
        self.client = client
        self.options = options
        self.report = IngestReport()
        self.note_ids: dict[str, int] = {}
        self.bar: Any = None
        self.gateway_checked = False

    def run(self, parsed: Parsed) -> IngestReport:
        self.report.problems.extend(parsed.problems)
        self.report.skipped_files.extend(parsed.skipped)
        total = sum(len(unit.pieces) + len(unit.window_runs()) for unit in parsed.units)
        with tqdm(total=total, unit="text", desc="ingest", disable=not self.options.progress) as self.bar:
            for batch in self.batches(parsed.units):
                self.write_batch(batch)
        self.write_links(parsed.links)
        return self.report

    def execute(self, call: calls.Call[T]) -> T:
        """Runs a Call; a deadlock or serialization failure is tried again after a while, unless the
        caller holds a transaction open on the client's connection (a new try could not help there)."""
        retrying = Retrying(
            stop=stop_after_attempt(RETRY_ATTEMPTS),
            wait=wait_random_exponential(multiplier=RETRY_FIRST_DELAY, max=RETRY_LONGEST_DELAY),
            retry=retry_if_exception_type(RETRIED) & retry_if_exception(lambda _: not self.in_callers_transaction()),
            reraise=True,
        )
        answer: T = retrying(self.client.run, call)
        return answer

    def in_callers_transaction(self) -> bool:
        source = self.client.source
        return isinstance(source, psycopg.Connection) and source.info.transaction_status != pq.TransactionStatus.IDLE

    def check_gateway(self) -> None:
        """Before the first text is embedded: the gateway's model must be the active space's; a gateway
        that is down only means writing without vectors. Input with nothing new to embed never asks the
        gateway (nor loads an embedded model)."""
        if self.gateway_checked:
            return
        health = self.client.health()
        if health.gateway_reason in GATEWAY_FAILURES:
            self.report.gateway_problem = health.gateway_message
        elif set(health.reasons) - {calls.VECTORS_INCOMPLETE}:  # missing vectors are the queue's to fill
            why = ", ".join(health.reasons + ([health.gateway_reason] if health.gateway_reason else []))
            advice = health.gateway_message or (
                "run `emem init` with this gateway first, or choose the gateway of that space"
            )
            raise IngestError(
                f"the embedding gateway's model does not fit the active embedding space ({why}): {advice}"
            )
        self.gateway_checked = True

    def batches(self, units: list[Unit]) -> Iterator[list[Unit]]:
        batch: list[Unit] = []
        size = 0
        for unit in units:
            if batch and size + len(unit.pieces) > self.options.batch_size:
                yield batch
                batch, size = [], 0
            batch.append(unit)
            size += len(unit.pieces)
        if batch:
            yield batch

    def write_batch(self, units: list[Unit]) -> None:
        """Everything is embedded before anything is written, so that a gateway failing midway leaves
        no records without their windows."""
        self.choose_threads([unit for unit in units if unit.is_thread])
        planned = [(unit, unit.items()) for unit in units]
        vectors = self.embed_new(planned)
        windows = self.embed_windows([unit for unit in units if unit.is_thread])
        written = self.write_records(planned, vectors)
        for unit, items, results in written:
            self.after_records(unit, items, results)
        self.write_windows(windows, {unit: [record_id for record_id, _ in results] for unit, _, results in written})

    def choose_threads(self, units: list[Unit]) -> None:
        """A thread whose stored records in the lane differ from this input keeps them; the input goes to key@hash."""
        if not units:
            return
        threads = self.execute(stored_threads([(unit.lane, unit.kind, str(unit.key)) for unit in units]))
        for unit in units:
            stored = threads.get((unit.lane, unit.kind, str(unit.key)))
            ours = {piece.position: unit.source_key(piece, unit.key) for piece in unit.pieces}
            if stored and any(ours.get(position) != key for position, key in stored.items()):
                unit.thread_id = unit.version_thread_id()
                self.report.new_versions.append(
                    f"{unit.source}: changed since it was stored; the new version is thread {unit.thread_id}"
                )

    def embed_new(self, planned: list[Planned]) -> dict[tuple[str, str], list[float] | None]:
        """Vectors of the items their lanes do not hold yet, by (lane, source key); each text embedded once."""
        contents = {record_key(item): item["content"] for _, items in planned for item in items}
        stored = self.execute(stored_records(list(contents)))
        new = {key: content for key, content in contents.items() if key not in stored}
        texts = list(dict.fromkeys(new.values()))
        self.bar.update(sum(len(items) for _, items in planned) - len(texts))
        by_text = dict(zip(texts, self.embed(texts), strict=True))
        return {key: by_text[content] for key, content in new.items()}

    def embed(self, texts: list[str]) -> list[list[float] | None]:
        """Their vectors; None for each once the gateway is down (the embedding queue fills them later)."""
        if texts:
            self.check_gateway()
        vectors: list[list[float] | None] = []
        for start in range(0, len(texts), EMBED_SLICE):
            vectors.extend(self.embed_slice(texts[start : start + EMBED_SLICE]))
            self.bar.update(len(texts[start : start + EMBED_SLICE]))
        return vectors

    def embed_slice(self, texts: list[str]) -> list[list[float]] | list[None]:
        if self.report.gateway_problem is None:
            try:
                return self.client.embed(texts)
            except GatewayError as error:
                if error.reason not in GATEWAY_FAILURES:
                    raise
                self.report.gateway_problem = error.message
        self.report.queued_for_embedding += len(texts)
        return [None] * len(texts)

    def write_records(
        self, planned: list[Planned], vectors: dict[tuple[str, str], list[float] | None]
    ) -> list[Written]:
        """All units in one put_records call. An item the database refuses (it names its number) costs
        its unit only: the unit is reported and the others are sent again; a refusal that names no
        item sends each unit on its own."""
        while planned:
            try:
                return self.put_units(planned, vectors)
            except REFUSED as error:
                refused = self.refused_unit(error, planned)
                if refused is None:
                    return list(self.write_units_one_by_one(planned, vectors))
                planned = [(unit, items) for unit, items in planned if unit is not refused]
        return []

    def put_units(self, planned: list[Planned], vectors: dict[tuple[str, str], list[float] | None]) -> list[Written]:
        """The units' records in one put_records call: each lane and source key once, as the first unit
        holding it gives it (a note without an id is keyed by its content: the same note twice is one)."""
        unique = first_items(planned)
        sent = [
            {**item, "vector": vectors[key]} if vectors.get(key) is not None else item for key, item in unique.items()
        ]
        written = self.execute(calls.put_records_created(sent, None))
        results = dict(zip(unique, written, strict=True))
        created = sum(1 for _, is_new in results.values() if is_new)
        self.report.records_created += created
        self.report.records_existing += len(results) - created
        return [(unit, items, [results[record_key(item)] for item in items]) for unit, items in planned]

    def refused_unit(self, error: psycopg.DatabaseError, planned: list[Planned]) -> Unit | None:
        """The unit whose item put_records refused by its number, reported; None when it named none."""
        number, reason = refused_item(error)
        sent = list(first_items(planned).values())
        if number is None or not 1 <= number <= len(sent):
            return None
        unit = next(unit for unit, items in planned if any(item is sent[number - 1] for item in items))
        self.skip(unit, f"{unit.item_name(sent[number - 1])}{reason}")
        return unit

    def write_units_one_by_one(
        self, planned: list[Planned], vectors: dict[tuple[str, str], list[float] | None]
    ) -> Iterator[Written]:
        """After a refusal that named no item: each unit on its own, so one bad unit costs only itself."""
        for unit, items in planned:
            try:
                yield from self.put_units([(unit, items)], vectors)
            except REFUSED as error:
                if self.refused_unit(error, [(unit, items)]) is None:
                    self.skip(unit, refused_item(error)[1])

    def skip(self, unit: Unit, reason: str) -> None:
        self.report.problems.append(Problem(unit.source, reason))

    def after_records(self, unit: Unit, items: list[dict[str, Any]], results: list[tuple[int, bool]]) -> None:
        """Notes' ids for links; tags of the input added to records stored before."""
        if not unit.is_thread and unit.key is not None:
            self.note_ids[unit.key] = results[0][0]
        for item, (record_id, created) in zip(items, results, strict=True):
            if not created and item.get("tags"):
                self.execute(calls.tag(record_id, item["tags"]))

    def embed_windows(self, threads: list[Unit]) -> list[tuple[Unit, list[int], list[float] | None]]:
        """(unit, run of piece indexes, vector) of the windows of these threads their lane does not hold."""
        if not threads:
            return []
        existing = self.execute(stored_windows([(unit.lane, unit.kind, str(unit.thread_id)) for unit in threads]))
        wanted = []
        for unit in threads:
            for run in unit.window_runs():
                first, last = unit.pieces[run[0]].position, unit.pieces[run[-1]].position
                if (unit.lane, unit.kind, unit.thread_id, first, last) in existing:
                    self.report.windows_existing += 1
                    self.bar.update(1)
                else:
                    wanted.append((unit, run))
        vectors = self.embed([calls.window_text(unit.pieces[i].content for i in run) for unit, run in wanted])
        return [(unit, run, vector) for (unit, run), vector in zip(wanted, vectors, strict=True)]

    def write_windows(
        self, windows: list[tuple[Unit, list[int], list[float] | None]], ids: dict[Unit, list[int]]
    ) -> None:
        """The windows of the units written (`ids`: their record ids by piece); a unit whose window
        the database refuses is reported once, and its other windows are not tried."""
        failed: set[Unit] = set()
        for unit, run, vector in windows:
            if unit not in ids or unit in failed:
                continue
            try:
                self.execute(calls.put_window([ids[unit][i] for i in run], vector, None))
                self.report.windows_created += 1
            except REFUSED as error:
                failed.add(unit)
                self.report.problems.append(Problem(f"{unit.source} (windows)", database_reason(error)))

    def write_links(self, links: list[Link]) -> None:
        for link in links:
            ends = [self.note_ids.get(link.from_note), self.note_ids.get(link.to_note)]
            if None in ends:
                missing = link.from_note if ends[0] is None else link.to_note
                self.report.problems.append(
                    Problem(
                        link.source, f"link to note {missing!r}, which is not among the notes written from this input"
                    )
                )
                continue
            from_id, to_id = ends
            assert from_id is not None and to_id is not None  # (checked just above)
            try:
                if self.execute(link_once(from_id, to_id, link.relation, link.properties)):
                    self.report.edges_created += 1
                else:
                    self.report.edges_existing += 1
            except REFUSED as error:
                self.report.problems.append(Problem(link.source, database_reason(error)))


def ingest_notes(client: Client, paths: Iterable[Path], options: IngestOptions | None = None) -> IngestReport:
    options = options or IngestOptions()
    return Ingester(client, options).run(read_notes(paths, options))


def ingest_conversations(client: Client, paths: Iterable[Path], options: IngestOptions | None = None) -> IngestReport:
    options = options or IngestOptions()
    return Ingester(client, options).run(read_conversations(paths, options))


def ingest_files(client: Client, paths: Iterable[Path], options: IngestOptions | None = None) -> IngestReport:
    options = options or IngestOptions()
    return Ingester(client, options).run(read_files(paths, options))
