"""Ingest notes, conversations and files into emem through the bulk path, with vectors and windows.

- Notes (JSON Lines or a JSON array of objects) become `note` or `entity` records; their `links`
  become edges between notes of the same input.
- Conversations (JSON) become one `conversation` record per turn, in order: thread_id is the
  conversation's id, thread_position the turn's index.
- Files (text, Markdown, HTML with its tags stripped) become `file` records, one per chunk of
  about `chunk_chars` characters: thread_id is the file's absolute path. In a folder, hidden
  names are left out; symbolic links are not followed out of the folder (a link to a file inside
  it is read as that file, once), and FIFOs, devices and sockets are not read: both are reported.
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
serialization failure (concurrent ingests) is retried with backoff.

Bad input (an unreadable file, invalid JSON, NaN, nesting deeper than MAX_NESTING levels, a
value of the wrong type or too long, a value the database refuses) is reported per item in the
IngestReport and skipped, and the rest is written. An item is written whole or not at all: a
note with its links checked, a conversation or file with all its turns or chunks (a turn the
input itself spoils is skipped and reported; windows do not cross it).
"""

import hashlib
import json
import math
import os
import re
import stat
import textwrap
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html.parser import HTMLParser
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

T = TypeVar("T")
DEFAULT_LANE = "main"
TEXT_SUFFIXES = frozenset({".txt", ".text", ".md", ".markdown", ".rst"})
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
NOTE_KINDS = frozenset({"note", "entity"})
EMBED_SLICE = 64  # texts per gateway call: the progress bar moves after each
# A gateway that cannot answer now: records are written without vectors, for the embedding queue.
GATEWAY_FAILURES = frozenset({GATEWAY_DOWN, GATEWAY_TIMEOUT, GATEWAY_UNAVAILABLE})
# Ids of notes and conversations, and file paths, become thread ids and source keys, which the
# database keeps to 500 characters; this leaves room for a version's `@hash` and the key's parts.
MAX_KEY_CHARS = 400
# JSON nested deeper than this in one item is refused (Python's and PostgreSQL's parsers recurse).
MAX_NESTING = 64
# What emem.link_records accepts, checked before anything is written, so that a note is written
# with its links or not at all.
MAX_RELATION_CHARS = 200
MAX_PROPERTY_CHARS = 1000
MAX_PROPERTY_BYTES = 2000
MAX_PROPERTIES_BYTES = 64 * 1024
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


class IngestError(Exception):
    """Ingest cannot start (for example: the gateway's model is not the active space's)."""


@dataclass(frozen=True)
class WindowShape:
    """Windows of `size` consecutive records, one starting every `stride` records."""

    size: int = 3
    stride: int = 1

    def __post_init__(self) -> None:
        if self.size < 2:
            raise ValueError(f"a window covers at least 2 records, got size {self.size}")
        if not 1 <= self.stride <= self.size:
            raise ValueError(f"the window stride must be from 1 to the size ({self.size}), got {self.stride}")

    def runs(self, positions: Sequence[int]) -> list[list[int]]:
        """The windows over these thread positions: within runs of consecutive positions only.

        A run shorter than `size` gets one window over all of it (if it has 2 records or more);
        the last window of a run ends at its last record.
        """
        windows: list[list[int]] = []
        for run in consecutive_runs(positions):
            if len(run) < 2:
                continue
            size = min(self.size, len(run))
            starts = list(range(0, len(run) - size + 1, self.stride))
            if starts[-1] + size < len(run):
                starts.append(len(run) - size)
            windows.extend(run[start : start + size] for start in starts)
        return windows


def consecutive_runs(positions: Sequence[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for position in sorted(positions):
        if runs and runs[-1][-1] + 1 == position:
            runs[-1].append(position)
        else:
            runs.append([position])
    return runs


@dataclass(frozen=True)
class IngestOptions:
    lane: str = DEFAULT_LANE
    tags: tuple[str, ...] = ()
    conversation_windows: WindowShape = WindowShape(size=3, stride=1)
    file_windows: WindowShape = WindowShape(size=2, stride=1)
    chunk_chars: int = 600
    batch_size: int = 200
    progress: bool = True

    def __post_init__(self) -> None:
        if self.chunk_chars < 50:
            raise ValueError(f"chunks need at least 50 characters, got {self.chunk_chars}")
        if not 1 <= self.batch_size <= 50_000:
            raise ValueError(f"the batch size must be from 1 to 50000, got {self.batch_size}")


@dataclass(frozen=True)
class Problem:
    """An input item that was skipped, and why."""

    source: str
    reason: str


@dataclass
class IngestReport:
    """What a run wrote and skipped. Records count as created when put_records wrote them in this run
    (exact, whoever else writes the same keys at the same time). Windows and edges count as existing
    when the lane held them before this run looked; a window or link that two runs write at the same
    moment may count as created in both (the database holds it once)."""

    records_created: int = 0
    records_existing: int = 0
    windows_created: int = 0
    windows_existing: int = 0
    edges_created: int = 0
    edges_existing: int = 0
    new_versions: list[str] = field(default_factory=list)  # threads stored as `<id>@<hash>`
    problems: list[Problem] = field(default_factory=list)
    # Written without a vector while the gateway was down (emem embed gives them one), and why.
    queued_for_embedding: int = 0
    gateway_problem: str | None = None


# ---- what is written: units of records ---------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """One record to be: its text and its own fields."""

    content: str
    position: int | None = None  # the thread position; None for notes
    occurred_at: datetime | None = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    authority: float | None = None


@dataclass(frozen=True)
class Link:
    """An edge between two notes of one input, named by their ids."""

    source: str
    from_note: str
    to_note: str
    relation: str
    properties: dict[str, Any]


@dataclass(eq=False)
class Unit:
    """What is written together: one note, or one conversation or file (a thread) with its windows."""

    source: str
    kind: str
    key: str | None  # the thread id, or the note's id (None: a note without one)
    lane: str
    pieces: list[Piece]
    windows: WindowShape | None = None
    thread_id: str | None = None  # the thread the records go to: key, or key@hash for a new version

    def __post_init__(self) -> None:
        if self.windows is not None and self.thread_id is None:
            self.thread_id = self.key

    @property
    def is_thread(self) -> bool:
        return self.windows is not None

    def version_thread_id(self) -> str:
        contents = "\n".join(piece.content for piece in self.pieces)
        return f"{self.key}@{digest(contents, 12)}"

    def source_key(self, piece: Piece, thread_id: str | None = None) -> str:
        if self.is_thread:
            return f"{self.kind}:{thread_id or self.thread_id}#{piece.position}:{digest(piece.content)}"
        return f"{self.kind}:{self.key}:{digest(piece.content)}" if self.key else f"{self.kind}:{digest(piece.content)}"

    def items(self) -> list[dict[str, Any]]:
        return [
            calls.record_item(
                self.kind,
                piece.content,
                self.lane,
                piece.tags,
                {
                    "occurred_at": piece.occurred_at,
                    "thread_id": self.thread_id,
                    "thread_position": piece.position,
                    "metadata": piece.metadata or None,
                    "authority": piece.authority,
                    "source_key": self.source_key(piece),
                },
            )
            for piece in self.pieces
        ]

    def item_name(self, item: dict[str, Any]) -> str:
        """Which of the unit's records an item is, for a message: `turn 3: `, `chunk 2: `, or nothing for a note."""
        if not self.is_thread:
            return ""
        return f"{'turn' if self.kind == 'conversation' else 'chunk'} {item['thread_position']}: "

    def window_runs(self) -> list[list[int]]:
        """The windows, as lists of indexes into `pieces`."""
        if self.windows is None:
            return []
        index = {piece.position: i for i, piece in enumerate(self.pieces) if piece.position is not None}
        return [[index[p] for p in run] for run in self.windows.runs(list(index))]


def digest(text: str, length: int = 16) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def record_key(item: dict[str, Any]) -> tuple[str, str]:
    """What identifies a record in the database: its lane and source key."""
    return item["lane"], item["source_key"]


Planned = tuple[Unit, list[dict[str, Any]]]  # a unit and its put_records items


def first_items(planned: list[Planned]) -> dict[tuple[str, str], dict[str, Any]]:
    """The items of these units, each lane and source key once (the first item that has it), in order."""
    unique: dict[tuple[str, str], dict[str, Any]] = {}
    for _, items in planned:
        for item in items:
            unique.setdefault(record_key(item), item)
    return unique


# ---- reading input -------------------------------------------------------------------------


@dataclass
class Parsed:
    units: list[Unit] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


class BadItem(ValueError):
    """An input item that cannot be ingested; the message says why."""


@dataclass(frozen=True)
class NonFinite:
    """NaN, Infinity or a number beyond a float's range, as the input spelled it: JSON has no such numbers."""

    text: str


def finite_float(text: str) -> float | NonFinite:
    number = float(text)
    return number if math.isfinite(number) else NonFinite(text)


def parse_json(text: str) -> Any:
    """The JSON value of a text; NaN and infinities are kept as NonFinite, for the item that holds them."""
    try:
        return json.loads(text, parse_constant=NonFinite, parse_float=finite_float)
    except RecursionError:
        raise BadItem("invalid JSON: nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, and integers of more than 4300 digits
        raise BadItem(f"invalid JSON: {error}") from None


def json_nodes(value: Any) -> Iterator[tuple[Any, int]]:
    """Every value inside `value` (itself included) with its depth (1 for `value`), without recursion."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        if isinstance(node, dict | list) and depth <= MAX_NESTING:
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))


def check_plain_json(value: Any, what: str) -> None:
    """Refuses NaN and infinities anywhere in `value`, and nesting deeper than MAX_NESTING levels."""
    for node, depth in json_nodes(value):
        if isinstance(node, NonFinite):
            raise BadItem(f"{what} holds {node.text}, which is not a JSON number")
        if depth > MAX_NESTING:
            raise BadItem(f"{what} is nested more than {MAX_NESTING} levels deep")


def shown(value: Any) -> str:
    """A short JSON rendering of an input value, for a message."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_time(value: Any, what: str = "occurred_at") -> datetime | None:
    """An ISO 8601 date or time (UTC when it names no zone), or None when absent."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadItem(f"{what} must be an ISO 8601 text, got {shown(value)}")
    try:
        return assume_utc(datetime.fromisoformat(value))
    except ValueError:
        raise BadItem(f"{what} {shown(value)} is not an ISO 8601 date or time") from None


def assume_utc(moment: datetime) -> datetime:
    """The moment, in UTC when it names no time zone."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def text_list(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadItem(f"{what} must be a list of texts")
    return tuple(value)


def json_object(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadItem(f"{what} must be a JSON object")
    return value


def non_empty_text(value: Any, what: str = "content") -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadItem(f"{what} must be a non-empty text")
    return value.strip()


def item_key(value: Any, what: str) -> str:
    """An id given as a text or an integer, as text: not empty, at most MAX_KEY_CHARS characters."""
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        raise BadItem(f"{what} must be a non-empty text or an integer")
    key = str(value)
    if len(key) > MAX_KEY_CHARS:
        raise BadItem(f"{what} has {len(key)} characters: at most {MAX_KEY_CHARS}")
    return key


def lane_of(item: dict[str, Any], options: IngestOptions) -> str:
    lane = item.get("lane")
    if lane is None:
        return options.lane
    if not isinstance(lane, str):
        raise BadItem(f"lane must be the name of a lane, got {shown(lane)}")
    return lane


# ---- reading files safely ------------------------------------------------------------------


def not_regular(mode: int) -> str:
    """Why a file that is not a regular file is skipped."""
    if stat.S_ISDIR(mode):
        kind = "a folder"
    elif stat.S_ISFIFO(mode):
        kind = "a FIFO"
    elif stat.S_ISSOCK(mode):
        kind = "a socket"
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind = "a device"
    else:
        kind = "a special file"
    return f"not a regular file but {kind}: skipped"


def require_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise BadItem(not_regular(mode))


def read_text_file(path: Path, follow_link: bool = True) -> str:
    """The UTF-8 text of a regular file. A FIFO, device or socket is not opened; the file is opened
    without blocking and checked again once open, so that what is read is what was checked;
    follow_link=False refuses a symbolic link (one put in the file's place meanwhile)."""
    try:
        require_regular(os.stat(path, follow_symlinks=follow_link).st_mode)
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow_link else os.O_NOFOLLOW))
        with open(descriptor, "rb") as handle:
            require_regular(os.fstat(descriptor).st_mode)
            data = handle.read()
    except OSError as error:
        raise BadItem(f"cannot read it: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadItem("not UTF-8 text") from None


def read_json(path: Path) -> Any:
    return parse_json(read_text_file(path))


def expand_paths(paths: Iterable[Path], problems: list[Problem]) -> list[Path]:
    """Files as given (a given symbolic link is followed), and the text, Markdown and HTML files
    under folders (folder_files); each file once, by its real path."""
    found: dict[Path, None] = {}
    for path in paths:
        try:
            mode = path.stat().st_mode
        except OSError as error:
            missing = isinstance(error, FileNotFoundError | NotADirectoryError)
            problems.append(Problem(str(path), "no such file or folder" if missing else f"cannot read it: {error}"))
            continue
        if stat.S_ISDIR(mode):
            found.update(dict.fromkeys(folder_files(path, problems)))
        elif stat.S_ISREG(mode):
            found[path.resolve()] = None
        else:
            problems.append(Problem(str(path), not_regular(mode)))
    return list(found)


def folder_files(folder: Path, problems: list[Problem]) -> Iterator[Path]:
    """The real paths of the files to read under a folder: hidden names are left out; symbolic links
    are not followed out of the folder, nor into folders (a link to a file inside it is read as that
    file); FIFOs, devices and sockets are not read. Links out and special files are reported."""
    root = folder.resolve()

    def unreadable(error: OSError) -> None:
        problems.append(Problem(str(error.filename), f"cannot read it: {error.strerror or error}"))

    for directory, subfolders, files in os.walk(root, onerror=unreadable):
        here = Path(directory)
        for name in [name for name in subfolders if (here / name).is_symlink() and not name.startswith(".")]:
            subfolders.remove(name)
            if not (here / name).resolve().is_relative_to(root):
                problems.append(Problem(str(here / name), "a symbolic link out of the folder: not followed"))
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and Path(name).suffix.lower() in TEXT_SUFFIXES | HTML_SUFFIXES:
                yield from folder_file(root, here / name, problems)


def folder_file(root: Path, path: Path, problems: list[Problem]) -> Iterator[Path]:
    """The real path of one file found in a folder, when it is to be read; else a reported problem."""
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):  # a link to nothing, a loop of links, or a file gone meanwhile
        problems.append(Problem(str(path), "cannot read it: a symbolic link to nothing, or gone"))
        return
    if not target.is_relative_to(root):
        problems.append(Problem(str(path), "a symbolic link out of the folder: not followed"))
        return
    try:
        mode = target.stat().st_mode
    except OSError as error:
        problems.append(Problem(str(path), f"cannot read it: {error.strerror or error}"))
        return
    if stat.S_ISREG(mode):
        yield target
    else:
        problems.append(Problem(str(path), not_regular(mode)))


# ---- notes, conversations, files -------------------------------------------------------------


def note_entries(path: Path) -> Iterator[tuple[str, Any]]:
    """(source, value) of each note in a JSON array file or a JSON Lines file; a line that is not
    JSON is a BadItem value."""
    text = read_text_file(path)
    if text.lstrip().startswith("["):
        yield from ((f"{path}[{n}]", note) for n, note in enumerate(parse_json(text)))
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{number}", parse_json(line)
        except BadItem as error:
            yield f"{path}:{number}", error


def read_notes(paths: Iterable[Path], options: IngestOptions) -> Parsed:
    """Notes: {content, id?, kind? (note|entity), tags?, lane?, occurred_at?, authority?, metadata?,
    links? [{to, relation, properties?}]}, one per line (JSON Lines) or in a JSON array."""
    parsed = Parsed()
    seen_ids: set[str] = set()
    for path in paths:
        try:
            for source, entry in note_entries(path):
                try:
                    if isinstance(entry, BadItem):
                        raise entry
                    unit, links = note_unit(source, entry, options)
                    if unit.key is not None:
                        if unit.key in seen_ids:
                            raise BadItem(f"note id {shown(unit.key)} is used twice in this input")
                        seen_ids.add(unit.key)
                    parsed.units.append(unit)
                    parsed.links.extend(links)
                except BadItem as error:
                    parsed.problems.append(Problem(source, str(error)))
        except BadItem as error:
            parsed.problems.append(Problem(str(path), str(error)))
    return parsed


def note_unit(source: str, note: Any, options: IngestOptions) -> tuple[Unit, list[Link]]:
    if not isinstance(note, dict):
        raise BadItem("a note must be a JSON object")
    check_plain_json(note, "the note")
    kind = note.get("kind", "note")
    if not isinstance(kind, str) or kind not in NOTE_KINDS:
        raise BadItem(f"kind must be note or entity, got {shown(kind)}")
    key = None if note.get("id") is None else item_key(note["id"], "id")
    authority = note.get("authority")
    if authority is not None and (not isinstance(authority, int | float) or isinstance(authority, bool)):
        raise BadItem("authority must be a number from 0 to 1")
    piece = Piece(
        content=non_empty_text(note.get("content")),
        occurred_at=parse_time(note.get("occurred_at")),
        tags=options.tags + text_list(note.get("tags"), "tags"),
        metadata=json_object(note.get("metadata"), "metadata"),
        authority=authority,
    )
    links = note.get("links")
    if links is not None and not isinstance(links, list):
        raise BadItem(f"links must be a list of objects {{to, relation, properties?}}, got {shown(links)}")
    return Unit(source, kind, key, lane_of(note, options), [piece]), [
        note_link(source, key, link) for link in links or []
    ]


def note_link(source: str, from_note: str | None, link: Any) -> Link:
    if from_note is None:
        raise BadItem("a note with links needs an id")
    if not isinstance(link, dict) or "to" not in link:
        raise BadItem("each link must be an object {to, relation, properties?}")
    return Link(
        source,
        from_note,
        item_key(link["to"], "a link's to"),
        link_relation(link.get("relation")),
        link_properties(link.get("properties")),
    )


def link_relation(value: Any) -> str:
    relation = non_empty_text(value, "a link's relation")
    if len(relation) > MAX_RELATION_CHARS or any(unicodedata.category(c) == "Cc" for c in relation):
        raise BadItem(
            f"a link's relation must be a text of 1 to {MAX_RELATION_CHARS} characters without control characters"
        )
    return relation


def link_properties(value: Any) -> dict[str, Any]:
    properties = json_object(value, "a link's properties")
    for node, _ in json_nodes(properties):
        if isinstance(node, str | int | float) and not isinstance(node, bool):
            text = node if isinstance(node, str) else str(node)
            if len(text) > MAX_PROPERTY_CHARS or len(text.encode()) > MAX_PROPERTY_BYTES:
                raise BadItem(
                    f"a link's property value is longer than {MAX_PROPERTY_CHARS} characters"
                    f" or {MAX_PROPERTY_BYTES} bytes"
                )
    if len(json.dumps(properties).encode()) > MAX_PROPERTIES_BYTES:
        raise BadItem("a link's properties must take at most 64 kB")
    return properties


def read_conversations(paths: Iterable[Path], options: IngestOptions) -> Parsed:
    """Conversations: a JSON array of {id?, lane?, tags?, occurred_at?, metadata?, turns: [...]} (or one
    such object, or {conversations: [...]}); a turn is a text or {content, speaker?, occurred_at?, tags?,
    metadata?}. A turn with a speaker is stored as "speaker: content"."""
    parsed = Parsed()
    seen: set[tuple[str, str]] = set()
    for path in paths:
        try:
            conversations = conversation_list(read_json(path))
        except BadItem as error:
            parsed.problems.append(Problem(str(path), str(error)))
            continue
        for number, conversation in enumerate(conversations):
            source = f"{path}[{number}]"
            try:
                unit = conversation_unit(source, conversation, options, parsed.problems)
                if (unit.lane, str(unit.key)) in seen:
                    raise BadItem(f"conversation id {shown(unit.key)} is used twice in this input (lane {unit.lane})")
                seen.add((unit.lane, str(unit.key)))
            except BadItem as error:
                parsed.problems.append(Problem(source, str(error)))
                continue
            if unit.pieces:
                parsed.units.append(unit)
    return parsed


def conversation_list(document: Any) -> list[Any]:
    if isinstance(document, dict) and "conversations" in document:
        document = document["conversations"]
    elif isinstance(document, dict):
        document = [document]
    if not isinstance(document, list):
        raise BadItem("expected a JSON array of conversations (or one conversation object)")
    return document


def conversation_unit(source: str, conversation: Any, options: IngestOptions, problems: list[Problem]) -> Unit:
    if not isinstance(conversation, dict) or not isinstance(conversation.get("turns"), list):
        raise BadItem("a conversation must be an object with a list of turns")
    turns = conversation["turns"]
    if not turns:
        raise BadItem("the conversation has no turns")
    check_plain_json({name: value for name, value in conversation.items() if name != "turns"}, "the conversation")
    conversation_id = conversation.get("id")
    if conversation_id is None:
        conversation_id = f"conversation-{digest(turns_text(turns), 12)}"
    started_at = parse_time(conversation.get("occurred_at"))
    tags = options.tags + text_list(conversation.get("tags"), "tags")
    metadata = json_object(conversation.get("metadata"), "metadata")
    pieces = []
    for position, turn in enumerate(turns):
        try:
            pieces.append(turn_piece(position, turn, started_at, tags, metadata))
        except BadItem as error:
            problems.append(Problem(f"{source} turn {position}", str(error)))
    lane = lane_of(conversation, options)
    return Unit(source, "conversation", item_key(conversation_id, "id"), lane, pieces, options.conversation_windows)


def turns_text(turns: list[Any]) -> str:
    """The turns as JSON, whose hash names a conversation that has no id."""
    try:
        return json.dumps(turns, sort_keys=True, default=lambda value: value.text)
    except RecursionError:
        raise BadItem("its turns are nested too deeply to name it: give the conversation an id") from None


def turn_piece(
    position: int, turn: Any, started_at: datetime | None, tags: tuple[str, ...], metadata: dict[str, Any]
) -> Piece:
    if isinstance(turn, str):
        turn = {"content": turn}
    if not isinstance(turn, dict):
        raise BadItem("a turn must be a text or an object {content, speaker?, occurred_at?, tags?}")
    check_plain_json(turn, "the turn")
    content = non_empty_text(turn.get("content"))
    speaker = turn.get("speaker")
    if speaker is not None:
        content = f"{non_empty_text(speaker, 'speaker')}: {content}"
    return Piece(
        content=content,
        position=position,
        occurred_at=parse_time(turn.get("occurred_at")) or started_at,
        tags=tags + text_list(turn.get("tags"), "tags"),
        metadata={**metadata, **json_object(turn.get("metadata"), "metadata")},
    )


def read_files(paths: Iterable[Path], options: IngestOptions) -> Parsed:
    """Text, Markdown and HTML files, and the files with those suffixes under folders."""
    parsed = Parsed()
    for path in expand_paths(paths, parsed.problems):
        try:
            parsed.units.append(file_unit(path, options))
        except BadItem as error:
            parsed.problems.append(Problem(str(path), str(error)))
    return parsed


def file_unit(path: Path, options: IngestOptions) -> Unit:
    """The chunks of a file, found by its real path (a link put in its place meanwhile is refused)."""
    if len(str(path)) > MAX_KEY_CHARS:
        raise BadItem(f"its path has {len(str(path))} characters: at most {MAX_KEY_CHARS}")
    raw = read_text_file(path, follow_link=False)
    try:
        modified = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError as error:
        raise BadItem(f"cannot read it: {error.strerror or error}") from None
    metadata: dict[str, Any] = {"path": str(path)}
    if path.suffix.lower() in HTML_SUFFIXES:
        title, text = html_text(raw)
        if title:
            metadata["title"] = title
    else:
        text = raw
    chunks = chunk_text(text, options.chunk_chars)
    if not chunks:
        raise BadItem("holds no text")
    pieces = [Piece(chunk, position, modified, options.tags, metadata) for position, chunk in enumerate(chunks)]
    return Unit(str(path), "file", str(path), options.lane, pieces, options.file_windows)


# ---- text: HTML to text, chunks -------------------------------------------------------------

BLOCK_TAGS = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "caption",
        "dd",
        "div",
        "dl",
        "dt",
        "figcaption",
        "figure",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "li",
        "main",
        "ol",
        "p",
        "pre",
        "section",
        "table",
        "tr",
        "ul",
    }
)
VOID_TAGS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"})
SKIPPED_TAGS = frozenset({"head", "script", "style", "noscript", "template", "nav", "header", "footer", "svg"})
PARAGRAPH_BREAK = "\n\n"
HEADING_CHARS = 100


class TextExtractor(HTMLParser):
    """The readable text of an HTML page: block elements become paragraphs; scripts, styles and
    navigation (nav, header, footer, elements with a class such as navheader) are left out."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self._skipping: list[str] = []
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in VOID_TAGS:
            if tag in {"br", "hr"} and not self._skipping:
                self.parts.append(PARAGRAPH_BREAK if tag == "hr" else "\n")
            return
        if self._skipping or tag in SKIPPED_TAGS or is_navigation(attrs):
            self._skipping.append(tag)
        elif tag in BLOCK_TAGS:
            self.parts.append(PARAGRAPH_BREAK)
        elif tag in {"td", "th"}:
            self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if self._skipping:
            if tag in self._skipping:
                while self._skipping.pop() != tag:
                    pass
        elif tag in BLOCK_TAGS:
            self.parts.append(PARAGRAPH_BREAK)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title_parts.append(data)
        elif not self._skipping:
            self.parts.append(data)


def is_navigation(attrs: list[tuple[str, str | None]]) -> bool:
    classes = " ".join(value or "" for name, value in attrs if name == "class").lower().split()
    return any(name.startswith("nav") for name in classes)


def html_text(html: str) -> tuple[str, str]:
    """(title, text) of an HTML page."""
    extractor = TextExtractor()
    extractor.feed(html)
    extractor.close()
    return " ".join("".join(extractor.title_parts).split()), "".join(extractor.parts)


def paragraphs(text: str) -> list[str]:
    """Paragraphs (split at blank lines), each with its whitespace collapsed."""
    return [" ".join(block.split()) for block in re.split(r"\n\s*\n", text) if block.strip()]


def is_heading(paragraph: str) -> bool:
    """A short line that ends no sentence: a title, or a term such as `max_wal_senders (integer)`."""
    return len(paragraph) <= HEADING_CHARS and not paragraph.endswith((".", "!", "?", ":", ";", ","))


def split_long(paragraph: str, limit: int) -> list[str]:
    """A paragraph longer than `limit` cut at sentence ends, and at spaces where a sentence is too long."""
    if len(paragraph) <= limit:
        return [paragraph]
    pieces: list[str] = []
    for sentence in re.split(r"(?<=[.!?])\s+", paragraph):
        pieces.extend(textwrap.wrap(sentence, limit, break_on_hyphens=False) if len(sentence) > limit else [sentence])
    return [chunk for chunk, _ in pack([(piece, False) for piece in pieces], limit, " ")]


def headed_pieces(text: str, limit: int) -> list[tuple[str, bool]]:
    """(piece, whether it starts with a heading): headings are glued to the paragraph they introduce."""
    pieces: list[tuple[str, bool]] = []
    heading = ""
    for paragraph in paragraphs(text):
        if is_heading(paragraph) and len(heading) + len(paragraph) < limit // 2:
            heading = f"{heading}{PARAGRAPH_BREAK}{paragraph}" if heading else paragraph
            continue
        parts = split_long(paragraph, limit - len(heading) - len(PARAGRAPH_BREAK))
        if heading:
            parts[0] = f"{heading}{PARAGRAPH_BREAK}{parts[0]}"
        pieces.extend((part, bool(heading) and n == 0) for n, part in enumerate(parts))
        heading = ""
    if heading:
        pieces.append((heading, True))
    return pieces


def pack(pieces: Iterable[tuple[str, bool]], limit: int, separator: str) -> list[tuple[str, bool]]:
    """Consecutive pieces joined while the result stays within `limit` characters; a piece that
    starts with a heading starts a new chunk unless the current one is still short."""
    chunks: list[tuple[str, bool]] = []
    for piece, headed in pieces:
        fits = chunks and len(chunks[-1][0]) + len(separator) + len(piece) <= limit
        if fits and not (headed and len(chunks[-1][0]) >= limit // 3):
            chunks[-1] = (chunks[-1][0] + separator + piece, chunks[-1][1])
        else:
            chunks.append((piece, headed))
    return chunks


def chunk_text(text: str, chunk_chars: int) -> list[str]:
    """Chunks of at most `chunk_chars` characters, cut between paragraphs where possible, each
    heading kept with the paragraph it introduces."""
    return [chunk for chunk, _ in pack(headed_pieces(text, chunk_chars), chunk_chars, PARAGRAPH_BREAK)]


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
