"""Each client method as one SQL call: its text, its parameters and how to read its rows.

The sync and async clients only differ in how they run a Call, so the SQL and the parsing
live here once. Parameters carry explicit casts, so each function resolves by its documented
signature and out-of-range values meet its own checks (SQLSTATE 22023).
"""

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Generic, TypeVar

from pgvector import Vector
from psycopg.types.json import Jsonb

from emem_client.gateways import DECLARATION_MISMATCH, GATEWAY_BAD_ANSWER, GatewayError, ModelDeclaration
from emem_client.types import EmbeddingCoverage, EmbeddingSpace, FindPage, Health, RecordSummary, RegisteredLookup

T = TypeVar("T")
Rows = list[dict[str, Any]]

# find's degraded_reason when no embedding space is active: the gateway's vectors belong nowhere.
NO_ACTIVE_SPACE = "no_active_space"
# health's reason and find's degraded_reason while records or windows lack a vector of the active
# space (emem embed fills it): the vector lookups cannot reach them.
VECTORS_INCOMPLETE = "vectors_incomplete"


class ExtensionMissingError(Exception):
    """The database has no emem extension; the message names the database and how to add it."""

    def __init__(self, database: str, server: str) -> None:
        super().__init__(
            f'the emem extension is not installed in database "{database}" on {server}: connect to it as its '
            "owner or a superuser and run CREATE EXTENSION emem CASCADE;"
        )
        self.database = database


@dataclass(frozen=True)
class Call(Generic[T]):
    """One SQL statement, its parameters, and how its rows (as dicts) become the answer."""

    sql: str
    params: Sequence[Any]
    read: Callable[[Rows], T]


def _single(column: str) -> Callable[[Rows], Any]:
    return lambda rows: rows[0][column]


def _nothing(_: Rows) -> None:
    return None


def _summaries(rows: Rows) -> list[RecordSummary]:
    return [RecordSummary.from_row(row) for row in rows]


def as_vector(values: Sequence[float] | Vector | None) -> Vector | None:
    if values is None or isinstance(values, Vector):
        return values
    return Vector(list(values))


FIND_ARGUMENTS = "%s::text, %s, %s::integer, %s::integer, %s::text, %s::text"


def find_arguments(
    question: str, vector: Sequence[float] | None, page: int, page_size: int, declaration: ModelDeclaration | None
) -> tuple[Any, ...]:
    """The arguments of find and explain: with the vector, the model it was made with, which the
    database checks against the active space (a vector of another model is not used)."""
    model = (
        (declaration.model_name, declaration.fingerprint)
        if declaration is not None and vector is not None
        else (None, None)
    )
    return (question, as_vector(vector), page, page_size, *model)


def find(
    question: str,
    vector: Sequence[float] | None,
    page: int,
    page_size: int,
    no_vector: GatewayError | None,
    declaration: ModelDeclaration | None = None,
) -> Call[FindPage]:
    """`no_vector` says why `vector` is None, when the client knows; `declaration` names the model
    that made `vector`, so that the database uses it only while that model's space is active (a
    switch between the client's look at the active space and the find is caught there)."""
    return Call(
        f"select emem.e_gather_find_envelope({FIND_ARGUMENTS}) as envelope",
        find_arguments(question, vector, page, page_size, declaration),
        lambda rows: FindPage.from_envelope(rows[0]["envelope"], *_reason_and_message(no_vector)),
    )


def explain(
    question: str,
    vector: Sequence[float] | None,
    page: int,
    page_size: int,
    no_vector: GatewayError | None,
    declaration: ModelDeclaration | None = None,
) -> Call[dict[str, Any]]:
    def read(rows: Rows) -> dict[str, Any]:
        explanation: dict[str, Any] = rows[0]["explanation"]
        if explanation.get("degraded") and no_vector:
            explanation["degraded_reason"] = no_vector.reason
            explanation["degraded_message"] = no_vector.message
        return explanation

    return Call(
        f"select emem.e_gather_explain({FIND_ARGUMENTS}) as explanation",
        find_arguments(question, vector, page, page_size, declaration),
        read,
    )


def _reason_and_message(problem: GatewayError | None) -> tuple[str | None, str | None]:
    return (problem.reason, problem.message) if problem else (None, None)


def timeline(
    from_time: datetime | None,
    to_time: datetime | None,
    page: int,
    page_size: int,
    kinds: Iterable[str] | None,
    tags: Iterable[str] | None,
) -> Call[list[RecordSummary]]:
    """None leaves that end of the range open (PostgreSQL's -infinity and infinity)."""
    return Call(
        "select * from emem.e_timeline(%s::timestamptz, %s::timestamptz, %s::integer, %s::integer,"
        " %s::text[], %s::text[])",
        (
            _time_bound(from_time, "from_time", "-infinity"),
            _time_bound(to_time, "to_time", "infinity"),
            page,
            page_size,
            _text_array(kinds),
            _text_array(tags),
        ),
        _summaries,
    )


def assume_utc(moment: datetime) -> datetime:
    """The moment, in UTC when it names no time zone."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _time_bound(value: datetime | None, name: str, open_end: str) -> datetime | str:
    if value is None:
        return open_end
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, or None for no bound; got {type(value).__name__}")
    return value


def records_with_all_tags(tags: Iterable[str]) -> Call[list[RecordSummary]]:
    return Call("select * from emem.records_with_all_tags(%s::text[])", (_text_array(tags),), _summaries)


def put_records(items: Sequence[dict[str, Any]], space_id: int | None) -> Call[list[int]]:
    return _put_records(items, space_id, lambda rows: [int(row["record_id"]) for row in rows])


def put_records_created(items: Sequence[dict[str, Any]], space_id: int | None) -> Call[list[tuple[int, bool]]]:
    """As put_records, with whether each item was written now (False: its lane held its source_key)."""
    return _put_records(items, space_id, lambda rows: [(int(row["record_id"]), row["created"]) for row in rows])


def _put_records(items: Sequence[dict[str, Any]], space_id: int | None, read: Callable[[Rows], T]) -> Call[T]:
    return Call(
        "select record_id, created from emem.put_records(%s::jsonb, %s::integer) order by item_number",
        (Jsonb([_with_vector_text(item) for item in items], dumps=_item_json), space_id),
        read,
    )


def _with_vector_text(item: dict[str, Any]) -> dict[str, Any]:
    """The item with its vector in pgvector's text form, which the database parses several
    times faster than a JSON array of numbers (NaN and infinities are refused there)."""
    vector = item.get("vector")
    if vector is None or isinstance(vector, str):
        return item
    return {**item, "vector": "[" + ",".join(repr(float(x)) for x in vector) + "]"}


def record_item(kind: str, content: str, lane: str, tags: Iterable[str], fields: dict[str, Any]) -> dict[str, Any]:
    """One put_records item; fields left as None are left out, so the database defaults apply."""
    item = {"kind": kind, "content": content, "lane": lane, "tags": list(tags), **fields}
    return {key: value for key, value in item.items() if value is not None}


def tag(record_id: int, tags: Iterable[str]) -> Call[None]:
    return Call("select emem.tag_record(%s::bigint, %s::text[])", (record_id, _text_array(tags)), _nothing)


def untag(record_id: int, tags: Iterable[str]) -> Call[int]:
    return Call(
        "select emem.untag_record(%s::bigint, %s::text[]) as removed",
        (record_id, _text_array(tags)),
        _single("removed"),
    )


def link(from_id: int, to_id: int, relation: str, properties: dict[str, Any] | None) -> Call[int]:
    return Call(
        "select emem.link_records(%s::bigint, %s::bigint, %s::text, %s::jsonb) as edge_id",
        (from_id, to_id, relation, Jsonb(properties or {}, dumps=_item_json)),
        _single("edge_id"),
    )


def put_record_vector(record_id: int, vector: Sequence[float], space_id: int | None) -> Call[None]:
    return Call(
        "select emem.put_record_vector(%s::bigint, %s, %s::integer)", (record_id, as_vector(vector), space_id), _nothing
    )


def put_window(member_record_ids: Iterable[int], vector: Sequence[float] | None, space_id: int | None) -> Call[int]:
    return Call(
        "select emem.put_window(%s::bigint[], %s, %s::integer) as window_id",
        (list(member_record_ids), as_vector(vector), space_id),
        _single("window_id"),
    )


@dataclass(frozen=True)
class InstalledExtension:
    """The connection's database and the emem extension's version in it (None: not installed)."""

    database: str
    version: str | None

    def require(self, server: str) -> None:
        """Raises ExtensionMissingError unless the extension is installed; `server` says where (host:port)."""
        if self.version is None:
            raise ExtensionMissingError(self.database, server)


def installed_extension() -> Call[InstalledExtension]:
    return Call(
        "select pg_catalog.current_database() as database,"
        " (select extversion from pg_catalog.pg_extension where extname = 'emem') as version",
        (),
        lambda rows: InstalledExtension(rows[0]["database"], rows[0]["version"]),
    )


def lookup_registry() -> Call[list[RegisteredLookup]]:
    return Call(
        "select name, label, default_weight, tie_order, needs_vector, description"
        " from emem.lookup_registry() order by tie_order",
        (),
        lambda rows: [RegisteredLookup.from_row(row) for row in rows],
    )


SPACE_COLUMNS = "space_id, model_name, dimension, fingerprint, is_active"


def _space_or_none(rows: Rows) -> EmbeddingSpace | None:
    return EmbeddingSpace(**rows[0]) if rows else None


def active_space() -> Call[EmbeddingSpace | None]:
    """Read on every find: a model switch shows at once."""
    return Call(f"select {SPACE_COLUMNS} from emem.embedding_spaces where is_active", (), _space_or_none)


def embedding_space(space_id: int) -> Call[EmbeddingSpace | None]:
    return Call(
        f"select {SPACE_COLUMNS} from emem.embedding_spaces where space_id = %s::integer", (space_id,), _space_or_none
    )


def space_of_model(declaration: ModelDeclaration) -> Call[EmbeddingSpace | None]:
    """The space of the declared model (name and dimension), active or not."""
    return Call(
        f"select {SPACE_COLUMNS} from emem.embedding_spaces where model_name = %s::text and dimension = %s::integer",
        (declaration.model_name, declaration.dimension),
        _space_or_none,
    )


def activate_space(space_id: int, force: bool) -> Call[None]:
    return Call("select emem.activate_embedding_space(%s::integer, %s::boolean)", (space_id, force), _nothing)


def health(declaration: ModelDeclaration | None, gateway_problem: GatewayError | None) -> Call[Health]:
    """`gateway_problem` says why there is no declaration, when there is none."""
    declared = (
        (declaration.model_name, declaration.dimension, declaration.fingerprint) if declaration else (None, None, None)
    )
    return Call(
        "select emem.e_health(%s::text, %s::integer, %s::text) as health",
        declared,
        lambda rows: Health.from_json(rows[0]["health"], *_reason_and_message(gateway_problem)),
    )


def ensure_space(declaration: ModelDeclaration, activate: bool) -> Call[int]:
    return Call(
        "select emem.create_embedding_space(%s::text, %s::integer, %s::text, %s::boolean) as space_id",
        (declaration.model_name, declaration.dimension, declaration.fingerprint, activate),
        _single("space_id"),
    )


def embedding_coverage(space_id: int | None) -> Call[EmbeddingCoverage]:
    return Call(
        "select emem.embedding_coverage(%s::integer) as coverage",
        (space_id,),
        lambda rows: EmbeddingCoverage.from_json(rows[0]["coverage"]),
    )


def queue_missing_embeddings(space_id: int) -> Call[int]:
    return Call("select emem.queue_missing_embeddings(%s::integer) as added", (space_id,), _single("added"))


@dataclass(frozen=True)
class EmbeddingWork:
    """A claimed queue entry: a record's text, or a window's member records and their texts."""

    queue_id: int
    record_id: int | None
    member_record_ids: list[int] | None
    texts: list[str]
    attempts: int  # how often the gateway refused it before

    @property
    def text(self) -> str:
        return window_text(self.texts)


def window_text(contents: Iterable[str]) -> str:
    """What a window's vector embeds: its records' texts, one per line (ingest and the worker alike)."""
    return "\n".join(contents)


def claim_embeddings(space_id: int, batch_size: int) -> Call[list[EmbeddingWork]]:
    """Locks the entries until the transaction ends: run it and store_embeddings in one (Client.transaction)."""
    return Call(
        "select queue_id, record_id, member_record_ids, texts, attempts"
        " from emem.claim_embeddings(%s::integer, %s::integer)",
        (space_id, batch_size),
        lambda rows: [EmbeddingWork(**row) for row in rows],
    )


def store_embeddings(queue_ids: Sequence[int], vectors: Sequence[Sequence[float]]) -> Call[int]:
    return Call(
        "select emem.store_embeddings(%s::bigint[], %s::public.vector[]) as stored",
        (list(queue_ids), [as_vector(vector) for vector in vectors]),
        _single("stored"),
    )


def defer_embeddings(queue_ids: Sequence[int], reason: str, retry_after: float) -> Call[int]:
    return Call(
        "select emem.defer_embeddings(%s::bigint[], %s::text, %s::double precision) as deferred",
        (list(queue_ids), reason, retry_after),
        _single("deferred"),
    )


def declaration_problem(declaration: ModelDeclaration, space: EmbeddingSpace | None) -> GatewayError | None:
    """Why the gateway's vectors do not belong in the space (None: no space is active), or None when they do."""
    if space is None:
        return GatewayError(
            NO_ACTIVE_SPACE, "no embedding space is active: create one for the gateway's model (emem init)"
        )
    declared = f"{declaration.model_name} ({declaration.dimension} dimensions)"
    which = "the active space" if space.is_active else f"embedding space {space.space_id}"
    if declaration.model_name != space.model_name or declaration.dimension != space.dimension:
        return GatewayError(
            DECLARATION_MISMATCH,
            f"the gateway embeds with {declared}, {which} is {space.model_name} ({space.dimension} dimensions)",
        )
    if space.fingerprint is not None and declaration.fingerprint != space.fingerprint:
        return GatewayError(DECLARATION_MISMATCH, f"the gateway's {declared} gives other vectors than {which}'s model")
    return None


def question_vector(
    vectors: list[list[float]], declaration: ModelDeclaration
) -> tuple[list[float] | None, GatewayError | None]:
    """The one vector of the question, or None and gateway_bad_answer when the answer is not that."""
    if len(vectors) != 1 or len(vectors[0]) != declaration.dimension:
        return None, GatewayError(
            GATEWAY_BAD_ANSWER, f"expected one vector of {declaration.dimension} dimensions for the question"
        )
    return vectors[0], None


def _text_array(values: Iterable[str] | None) -> list[str] | None:
    return None if values is None else list(values)


def _item_json(value: Any) -> str:
    return json.dumps(value, default=json_value, allow_nan=False)


def json_value(value: Any) -> Any:
    """JSON for what json cannot write itself: dates, pgvector and numpy vectors, sets."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Vector):
        return value.to_list()
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
