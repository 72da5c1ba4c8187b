"""Reading ingest's input into units: notes (JSON Lines or a JSON array), conversations (JSON) and
files (text, Markdown, MDX, HTML; emem_client.documents reads their text), each bad item reported
with its file and line or index, and folders walked safely.

In a folder, hidden names are left out; symbolic links are not followed out of the folder (a link
to a file inside it is read as that file, once), and FIFOs, devices and sockets are not read; files
of other kinds are listed as skipped: all of it in the report.
"""

import json
import math
import os
import stat
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from emem_client.calls import assume_utc
from emem_client.documents import DOCUMENT_SUFFIXES, chunks_of, read_document
from emem_client.units import MAX_KEY_CHARS, IngestOptions, Link, Piece, Problem, Unit, digest

NOTE_KINDS = frozenset({"note", "entity"})
NOT_A_DOCUMENT = f"not a document ({', '.join(sorted(DOCUMENT_SUFFIXES))}): skipped"
# JSON nested deeper than this in one item is refused (Python's and PostgreSQL's parsers recurse).
MAX_NESTING = 64
# What emem.link_records accepts, checked before anything is written, so that a note is written
# with its links or not at all.
MAX_RELATION_CHARS = 200
MAX_PROPERTY_CHARS = 1000
MAX_PROPERTY_BYTES = 2000
MAX_PROPERTIES_BYTES = 64 * 1024


@dataclass
class Parsed:
    units: list[Unit] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)  # files of a folder that are no documents


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
    """Refuses NaN and infinities anywhere in `value`, NUL characters in its texts and keys
    (PostgreSQL text cannot hold them), and nesting deeper than MAX_NESTING levels."""
    for node, depth in json_nodes(value):
        if isinstance(node, NonFinite):
            raise BadItem(f"{what} holds {node.text}, which is not a JSON number")
        texts = [node] if isinstance(node, str) else list(node) if isinstance(node, dict) else []
        if any("\x00" in text for text in texts if isinstance(text, str)):
            raise BadItem(f"{what} holds a NUL character, which PostgreSQL text cannot hold")
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


def expand_paths(paths: Iterable[Path], problems: list[Problem], skipped: list[Problem]) -> list[Path]:
    """Files as given (a given symbolic link is followed), and the documents (text, Markdown, MDX,
    HTML) under folders (folder_files); each file once, by its real path. Files of other kinds in a
    folder go to `skipped`."""
    found: dict[Path, None] = {}
    for path in paths:
        try:
            mode = path.stat().st_mode
        except OSError as error:
            missing = isinstance(error, FileNotFoundError | NotADirectoryError)
            problems.append(Problem(str(path), "no such file or folder" if missing else f"cannot read it: {error}"))
            continue
        if stat.S_ISDIR(mode):
            found.update(dict.fromkeys(folder_files(path, problems, skipped)))
        elif stat.S_ISREG(mode):
            found[path.resolve()] = None
        else:
            problems.append(Problem(str(path), not_regular(mode)))
    return list(found)


def folder_files(folder: Path, problems: list[Problem], skipped: list[Problem]) -> Iterator[Path]:
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
            if name.startswith("."):
                continue
            if Path(name).suffix.lower() in DOCUMENT_SUFFIXES:
                yield from folder_file(root, here / name, problems)
            else:
                skipped.append(Problem(str(here / name), NOT_A_DOCUMENT))


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
    for path in expand_paths(paths, parsed.problems, parsed.skipped):
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
    document = read_document(raw, path.suffix.lower())
    if document.title:
        metadata["title"] = document.title
    chunks = chunks_of(document.blocks, options.chunk_chars)
    if not chunks:
        raise BadItem("holds no text")
    pieces = [Piece(chunk, position, modified, options.tags, metadata) for position, chunk in enumerate(chunks)]
    return Unit(str(path), "file", str(path), options.lane, pieces, options.file_windows)
