"""Ingest notes, conversations and files into emem through the bulk path, with vectors and windows.

- Notes (JSON Lines or a JSON array of objects) become `note` or `entity` records; their `links`
  become edges between notes of the same input.
- Conversations (JSON) become one `conversation` record per turn, in order: thread_id is the
  conversation's id, thread_position the turn's index.
- Files (text, Markdown, HTML with its tags stripped) become `file` records, one per chunk of
  about `chunk_chars` characters: thread_id is the file's absolute path.
- Windows cover `size` consecutive turns or chunks every `stride` records, never crossing a
  conversation or a file (nor a skipped turn); a window's vector is the embedding of its
  records' texts joined.

Records are written in batches through put_records with their vectors. Every record carries a
source_key (kind, thread or note id, position, hash of the content), so ingesting the same input
again writes nothing new and embeds nothing again: stored records, windows and edges are looked
up first. When a conversation or file changed since it was stored, its stored records are kept
and the new version becomes a thread of its own, `<id>@<hash>`. Bad input (an unreadable file,
invalid JSON, an empty text, a value the database refuses) is reported per item in the
IngestReport and skipped; the rest is written.
"""

import hashlib
import json
import re
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psycopg
from tqdm import tqdm

from emem_client import calls
from emem_client.client import Client
from emem_client.gateways import GATEWAY_DOWN, GATEWAY_TIMEOUT, GATEWAY_UNAVAILABLE, GatewayError

DEFAULT_LANE = "main"
TEXT_SUFFIXES = frozenset({".txt", ".text", ".md", ".markdown", ".rst"})
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
NOTE_KINDS = frozenset({"note", "entity"})
EMBED_SLICE = 64  # texts per gateway call: the progress bar moves after each
# A gateway that cannot answer now: records are written without vectors, for the embedding queue.
GATEWAY_FAILURES = frozenset({GATEWAY_DOWN, GATEWAY_TIMEOUT, GATEWAY_UNAVAILABLE})
# What the database says about bad input (22023, 22007, 42501, 23505 ...): reported per item. A lost
# connection or a server failure is not the input's fault and stops the ingest.
REFUSED = (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError)


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


@dataclass
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

    def window_runs(self) -> list[list[int]]:
        """The windows, as lists of indexes into `pieces`."""
        if self.windows is None:
            return []
        index = {piece.position: i for i, piece in enumerate(self.pieces)}
        return [[index[p] for p in run] for run in self.windows.runs(list(index))]


def digest(text: str, length: int = 16) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


# ---- reading input -------------------------------------------------------------------------


@dataclass
class Parsed:
    units: list[Unit] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


class BadItem(ValueError):
    """An input item that cannot be ingested; the message says why."""


def parse_time(value: Any, what: str = "occurred_at") -> datetime | None:
    """An ISO 8601 date or time (UTC when it names no zone), or None when absent."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadItem(f"{what} must be an ISO 8601 text, got {json.dumps(value)}")
    try:
        return assume_utc(datetime.fromisoformat(value))
    except ValueError:
        raise BadItem(f"{what} {value!r} is not an ISO 8601 date or time") from None


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


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise BadItem(f"cannot read it: {error}") from None
    except json.JSONDecodeError as error:
        raise BadItem(f"invalid JSON: {error}") from None


def note_entries(path: Path) -> Iterator[tuple[str, Any]]:
    """(source, value) of each note in a JSON array file or a JSON Lines file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BadItem(f"cannot read it: {error}") from None
    if text.lstrip().startswith("["):
        notes = read_json(path)
        yield from ((f"{path}[{n}]", note) for n, note in enumerate(notes))
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{number}", json.loads(line)
        except json.JSONDecodeError as error:
            yield f"{path}:{number}", BadItem(f"invalid JSON: {error}")


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
                            raise BadItem(f"note id {unit.key!r} is used twice in this input")
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
    kind = note.get("kind", "note")
    if kind not in NOTE_KINDS:
        raise BadItem(f"kind must be note or entity, got {json.dumps(kind)}")
    note_id = note.get("id")
    if note_id is not None and (not isinstance(note_id, str | int) or isinstance(note_id, bool)):
        raise BadItem("id must be a text or an integer")
    key = None if note_id is None else str(note_id)
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
    links = [note_link(source, key, link) for link in note.get("links") or []]
    return Unit(source, kind, key, note.get("lane") or options.lane, [piece]), links


def note_link(source: str, from_note: str | None, link: Any) -> Link:
    if from_note is None:
        raise BadItem("a note with links needs an id")
    if not isinstance(link, dict) or "to" not in link:
        raise BadItem("each link must be an object {to, relation, properties?}")
    return Link(
        source,
        from_note,
        str(link["to"]),
        non_empty_text(link.get("relation"), "relation"),
        json_object(link.get("properties"), "properties"),
    )


def read_conversations(paths: Iterable[Path], options: IngestOptions) -> Parsed:
    """Conversations: a JSON array of {id?, lane?, tags?, occurred_at?, metadata?, turns: [...]} (or one
    such object, or {conversations: [...]}); a turn is a text or {content, speaker?, occurred_at?, tags?,
    metadata?}. A turn with a speaker is stored as "speaker: content"."""
    parsed = Parsed()
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
    conversation_id = conversation.get("id")
    if conversation_id is None:
        conversation_id = f"conversation-{digest(json.dumps(turns, sort_keys=True), 12)}"
    elif not isinstance(conversation_id, str | int) or not str(conversation_id).strip():
        raise BadItem("id must be a non-empty text or an integer")
    started_at = parse_time(conversation.get("occurred_at"))
    tags = options.tags + text_list(conversation.get("tags"), "tags")
    metadata = json_object(conversation.get("metadata"), "metadata")
    pieces = []
    for position, turn in enumerate(turns):
        try:
            pieces.append(turn_piece(position, turn, started_at, tags, metadata))
        except BadItem as error:
            problems.append(Problem(f"{source} turn {position}", str(error)))
    lane = conversation.get("lane") or options.lane
    return Unit(source, "conversation", str(conversation_id), lane, pieces, options.conversation_windows)


def turn_piece(
    position: int, turn: Any, started_at: datetime | None, tags: tuple[str, ...], metadata: dict[str, Any]
) -> Piece:
    if isinstance(turn, str):
        turn = {"content": turn}
    if not isinstance(turn, dict):
        raise BadItem("a turn must be a text or an object {content, speaker?, occurred_at?, tags?}")
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


def expand_paths(paths: Iterable[Path], problems: list[Problem]) -> list[Path]:
    """Files as given, and the text, Markdown and HTML files under folders (hidden ones left out)."""
    found: dict[Path, None] = {}
    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                relative = child.relative_to(path).parts
                if (
                    child.is_file()
                    and child.suffix.lower() in TEXT_SUFFIXES | HTML_SUFFIXES
                    and not any(part.startswith(".") for part in relative)
                ):
                    found[child.resolve()] = None
        elif path.is_file():
            found[path.resolve()] = None
        else:
            problems.append(Problem(str(path), "no such file or folder"))
    return list(found)


def file_unit(path: Path, options: IngestOptions) -> Unit:
    try:
        raw = path.read_text(encoding="utf-8")
        modified = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except UnicodeDecodeError:
        raise BadItem("not UTF-8 text") from None
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
    pieces = []
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


# ---- what is stored already -----------------------------------------------------------------


def stored_records(source_keys: Sequence[str]) -> calls.Call[dict[str, int]]:
    return calls.Call(
        "select source_key, record_id from emem.records where source_key = any(%s::text[])",
        (list(source_keys),),
        lambda rows: {row["source_key"]: int(row["record_id"]) for row in rows},
    )


def stored_threads(thread_ids: Sequence[str]) -> calls.Call[dict[tuple[str, str], dict[int, str | None]]]:
    """(kind, thread id) -> {position: source_key} of the stored records of these threads."""

    def read(rows: calls.Rows) -> dict[tuple[str, str], dict[int, str | None]]:
        threads: dict[tuple[str, str], dict[int, str | None]] = {}
        for row in rows:
            threads.setdefault((row["kind"], row["thread_id"]), {})[row["thread_position"]] = row["source_key"]
        return threads

    return calls.Call(
        "select kind, thread_id, thread_position, source_key from emem.records"
        " where thread_id = any(%s::text[]) and kind in ('conversation', 'file')",
        (list(thread_ids),),
        read,
    )


def stored_windows(thread_ids: Sequence[str]) -> calls.Call[set[tuple[str, str, int, int]]]:
    """(kind, thread id, first, last position) of these threads' windows in the active space."""
    return calls.Call(
        "select w.thread_kind, w.thread_id, w.first_position, w.last_position from emem.windows as w"
        " join emem.embedding_spaces as s on s.space_id = w.space_id and s.is_active"
        " where w.thread_id = any(%s::text[])",
        (list(thread_ids),),
        lambda rows: {(r["thread_kind"], r["thread_id"], r["first_position"], r["last_position"]) for r in rows},
    )


def edge_exists(from_id: int, to_id: int, relation: str, properties: dict[str, Any]) -> calls.Call[bool]:
    return calls.Call(
        "select exists (select from emem.edges where from_record_id = %s::bigint and to_record_id = %s::bigint"
        " and relation = btrim(%s::text) and properties = %s::jsonb) as found",
        (from_id, to_id, relation, json.dumps(properties)),
        lambda rows: bool(rows[0]["found"]),
    )


def database_reason(error: psycopg.DatabaseError) -> str:
    """The database's message, with its hint; a clearer word for a thread position taken twice."""
    diagnostic = error.diag
    if diagnostic.constraint_name == "one_record_per_thread_position":
        return "its thread id is used by another conversation or file of this input or of another lane"
    message = diagnostic.message_primary or str(error).strip()
    return f"{message} ({diagnostic.message_hint})" if diagnostic.message_hint else message


# ---- writing -------------------------------------------------------------------------------


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
        self.choose_threads([unit for unit in units if unit.is_thread])
        unit_items = [(unit, unit.items()) for unit in units]
        stored = self.client.run(stored_records([item["source_key"] for _, items in unit_items for item in items]))
        vectors = self.embed_new([item for _, items in unit_items for item in items], stored)
        try:
            written = [(unit, items, self.write_records(items, vectors, stored)) for unit, items in unit_items]
        except REFUSED:
            written = list(self.write_units_one_by_one(unit_items, vectors, stored))
        for unit, items, ids in written:
            self.after_records(unit, items, ids, stored)
        self.write_windows([(unit, ids) for unit, _, ids in written if unit.is_thread])

    def choose_threads(self, units: list[Unit]) -> None:
        """A thread whose stored records differ from this input keeps them; the input goes to key@hash."""
        if not units:
            return
        threads = self.client.run(stored_threads([str(unit.key) for unit in units]))
        for unit in units:
            stored = threads.get((unit.kind, str(unit.key)))
            ours = {piece.position: unit.source_key(piece, unit.key) for piece in unit.pieces}
            if stored and any(ours.get(position) != key for position, key in stored.items()):
                unit.thread_id = unit.version_thread_id()
                self.report.new_versions.append(
                    f"{unit.source}: changed since it was stored; the new version is thread {unit.thread_id}"
                )

    def embed_new(self, items: list[dict[str, Any]], stored: dict[str, int]) -> dict[str, list[float] | None]:
        """Vectors of the items not stored yet, by source key."""
        new = {item["source_key"]: item["content"] for item in items if item["source_key"] not in stored}
        self.bar.update(len(items) - len(new))
        keys = list(new)
        return dict(zip(keys, self.embed([new[key] for key in keys]), strict=True))

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
        self, items: list[dict[str, Any]], vectors: dict[str, list[float] | None], stored: dict[str, int]
    ) -> list[int]:
        """All items in one put_records call (each source key once); their ids in item order."""
        unique = {item["source_key"]: item for item in items}
        with_vectors = [
            {**item, "vector": vectors[key]} if vectors.get(key) is not None else item for key, item in unique.items()
        ]
        ids = dict(zip(unique, self.client.put_records(with_vectors), strict=True))
        self.report.records_created += sum(1 for key in unique if key not in stored)
        self.report.records_existing += sum(1 for key in unique if key in stored)
        return [ids[item["source_key"]] for item in items]

    def write_units_one_by_one(
        self,
        unit_items: list[tuple[Unit, list[dict[str, Any]]]],
        vectors: dict[str, list[float] | None],
        stored: dict[str, int],
    ) -> Iterator[tuple[Unit, list[dict[str, Any]], list[int]]]:
        """After a batch was refused: each unit on its own, so one bad unit costs only itself."""
        for unit, items in unit_items:
            try:
                yield unit, items, self.write_records(items, vectors, stored)
            except REFUSED as error:
                self.report.problems.append(Problem(unit.source, database_reason(error)))
                self.bar.update(len(unit.window_runs()))

    def after_records(self, unit: Unit, items: list[dict[str, Any]], ids: list[int], stored: dict[str, int]) -> None:
        """Notes' ids for links; tags of the input added to records stored before."""
        if not unit.is_thread and unit.key is not None:
            self.note_ids[unit.key] = ids[0]
        for item, record_id in zip(items, ids, strict=True):
            if item["source_key"] in stored and item.get("tags"):
                self.client.tag(record_id, item["tags"])

    def write_windows(self, threads: list[tuple[Unit, list[int]]]) -> None:
        if not threads:
            return
        existing = self.client.run(stored_windows([str(unit.thread_id) for unit, _ in threads]))
        wanted = []
        for unit, ids in threads:
            for run in unit.window_runs():
                first, last = unit.pieces[run[0]].position, unit.pieces[run[-1]].position
                if (unit.kind, unit.thread_id, first, last) in existing:
                    self.report.windows_existing += 1
                    self.bar.update(1)
                else:
                    wanted.append((unit, [ids[i] for i in run], calls.window_text(unit.pieces[i].content for i in run)))
        vectors = self.embed([text for _, _, text in wanted])
        failed: set[str] = set()
        for (unit, member_ids, _), vector in zip(wanted, vectors, strict=True):
            if unit.source in failed:
                continue
            try:
                self.client.put_window(member_ids, vector)
                self.report.windows_created += 1
            except REFUSED as error:
                failed.add(unit.source)
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
            try:
                if self.client.run(edge_exists(from_id, to_id, link.relation, link.properties)):
                    self.report.edges_existing += 1
                else:
                    self.client.link(from_id, to_id, link.relation, link.properties)
                    self.report.edges_created += 1
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
