"""What the client returns: frozen, typed views of the database's answers.

Each type knows how to read itself from the row or JSON the SQL API returns, so the sync and
async clients share one parser.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class FindRow:
    """One ranked record of a find page, with the lookup that placed it and those that found it."""

    rank: int
    record_id: int
    kind: str
    lane: str
    content: str
    tags: list[str]
    distance: float
    distance_kind: str  # 'cosine', or 'placeholder' when the record has no usable distance
    placed_by: str
    found_by: list[str]
    windows: list[int]

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> "FindRow":
        return cls(
            rank=int(row["rank"]),
            record_id=int(row["record_id"]),
            kind=row["kind"],
            lane=row["lane"],
            content=row["content"],
            tags=list(row["tags"]),
            distance=float(row["distance"]),
            distance_kind=row["distance_kind"],
            placed_by=row["placed_by"],
            found_by=list(row["found_by"]),
            windows=[int(window_id) for window_id in row["windows"]],
        )


@dataclass(frozen=True)
class LookupRun:
    """A lookup of the pipeline profile, as the database names it for this answer."""

    name: str  # as in the profile, placed_by and found_by: 'record_vectors'
    label: str  # short, for tables: 'vector'
    weight: float
    ran: bool  # False: skipped, e.g. a vector lookup while the answer is degraded

    @classmethod
    def from_json(cls, lookup: Mapping[str, Any]) -> "LookupRun":
        return cls(str(lookup["name"]), str(lookup["label"]), float(lookup["weight"]), bool(lookup["ran"]))


@dataclass(frozen=True)
class RegisteredLookup:
    """A lookup emem knows (emem.lookup_registry): the one list the database, explain and tables use."""

    name: str
    label: str
    default_weight: float
    tie_order: int
    needs_vector: bool
    description: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "RegisteredLookup":
        return cls(
            name=row["name"],
            label=row["label"],
            default_weight=float(row["default_weight"]),
            tie_order=int(row["tie_order"]),
            needs_vector=bool(row["needs_vector"]),
            description=row["description"],
        )


@dataclass(frozen=True)
class FindPage:
    """A page of e_gather_find; the totals describe the whole merged list, in every lane."""

    page: int
    page_size: int
    total_pages: int
    total_candidates: int
    totals_exact: bool  # False: the totals are a lower bound (past emem.exact_totals_up_to)
    degraded: bool
    degraded_reason: str | None
    degraded_message: str | None  # what to do about it, when the client knows (e.g. the install command)
    pipeline_profile: dict[str, float]
    lookups: list[LookupRun]  # every lookup of the profile, in the merge's tie order
    rows: list[FindRow]

    @classmethod
    def from_envelope(
        cls, envelope: Mapping[str, Any], degraded_reason: str | None = None, degraded_message: str | None = None
    ) -> "FindPage":
        """Reads e_gather_find_envelope; `degraded_reason` and `degraded_message` say why the client sent no vector."""
        degraded = bool(envelope["degraded"])
        return cls(
            page=int(envelope["page"]),
            page_size=int(envelope["page_size"]),
            total_pages=int(envelope["total_pages"]),
            total_candidates=int(envelope["total_candidates"]),
            totals_exact=bool(envelope["totals_exact"]),
            degraded=degraded,
            degraded_reason=(degraded_reason or envelope["degraded_reason"]) if degraded else None,
            degraded_message=degraded_message if degraded else None,
            pipeline_profile={name: float(weight) for name, weight in envelope["pipeline_profile"].items()},
            lookups=[LookupRun.from_json(lookup) for lookup in envelope["lookups"]],
            rows=[FindRow.from_json(row) for row in envelope["rows"]],
        )


@dataclass(frozen=True)
class RecordSummary:
    """A record with its tags, as emem.record_summaries shows it to the caller."""

    record_id: int
    kind: str
    lane: str
    content: str
    tags: list[str]
    authority: float
    occurred_at: datetime
    created_at: datetime
    thread_id: str | None
    thread_position: int | None
    metadata: dict[str, Any]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "RecordSummary":
        return cls(
            record_id=int(row["record_id"]),
            kind=row["kind"],
            lane=row["lane"],
            content=row["content"],
            tags=list(row["tags"]),
            authority=float(row["authority"]),
            occurred_at=row["occurred_at"],
            created_at=row["created_at"],
            thread_id=row["thread_id"],
            thread_position=row["thread_position"],
            metadata=dict(row["metadata"]),
        )


@dataclass(frozen=True)
class Health:
    """'ok' or 'degraded' with the reasons of emem.e_health.

    `gateway_reason` says why the gateway's declaration could not be read (for example
    'gateway_down'), when it could not, and `gateway_message` what to do about it.
    """

    status: str
    reasons: list[str]
    declared: dict[str, Any] | None
    active_space: dict[str, Any] | None
    gateway_reason: str | None = None
    gateway_message: str | None = None
    # The active space's records and windows with a current vector, in the lanes the caller reads
    # (e_health's `coverage`); None without an active space.
    coverage: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def from_json(
        cls, answer: Mapping[str, Any], gateway_reason: str | None = None, gateway_message: str | None = None
    ) -> "Health":
        return cls(
            status=answer["status"],
            reasons=list(answer["reasons"]),
            declared=answer.get("declared"),
            active_space=answer.get("active_space"),
            gateway_reason=gateway_reason,
            gateway_message=gateway_message,
            coverage=answer.get("coverage"),
        )


@dataclass(frozen=True)
class EmbeddingSpace:
    """An embedding space, as find and the embedding worker compare it with the gateway's declaration."""

    space_id: int
    model_name: str
    dimension: int
    fingerprint: str | None
    is_active: bool


@dataclass(frozen=True)
class EmbeddingCoverage:
    """How far an embedding space is filled (emem.embedding_coverage), in the lanes the caller reads
    (`lanes`: 'all' for the extension's owner, else 'readable')."""

    space_id: int
    model_name: str
    dimension: int
    is_active: bool
    lanes: str
    records: int
    records_with_vector: int
    windows: int
    windows_with_vector: int
    share: float  # the smaller of the records' and the windows' shares
    deferred: int  # entries waiting after the gateway refused their text
    last_error: str | None

    @property
    def missing(self) -> int:
        """Records and windows still without a current vector."""
        return self.records - self.records_with_vector + self.windows - self.windows_with_vector

    @classmethod
    def from_json(cls, answer: Mapping[str, Any]) -> "EmbeddingCoverage":
        return cls(**{name: answer[name] for name in cls.__dataclass_fields__})
