"""What ingest writes: options, units of records (a note, or a conversation or file with its turns or
chunks and windows), and the report of what a run wrote and skipped. Shared by reading (sources) and
writing (ingest)."""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from emem_client import calls

DEFAULT_LANE = "main"
# Ids of notes and conversations, and file paths, become thread ids and source keys, which the
# database keeps to 500 characters; this leaves room for a version's `@hash` and the key's parts.
MAX_KEY_CHARS = 400


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
    skipped_files: list[Problem] = field(default_factory=list)  # files of a folder that are no documents
    # Written without a vector while the gateway was down (emem embed gives them one), and why.
    queued_for_embedding: int = 0
    gateway_problem: str | None = None


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
