"""Writing records in the tests: one emem.put_records call (PYTEST_DONT_REWRITE: a helper module,
no assertions)."""

import json
import random
from collections.abc import Iterable
from typing import Any

import psycopg
from vectors import unit


def put(db: psycopg.Connection, items: Iterable[dict[str, Any]], **defaults: Any) -> list[int]:
    """Writes the items with one emem.put_records call, each a note with these fields unless it
    says otherwise; their record ids, in order."""
    written = [{"kind": "note", **defaults, **item} for item in items]
    return [row[0] for row in db.execute("select record_id from emem.put_records(%s)", (json.dumps(written),))]


def put_one(db: psycopg.Connection, content: str = "a note", **fields: Any) -> int:
    """One note (or what `fields` make it) written with emem.put_records; its record id."""
    (record_id,) = put(db, [{"content": content, **fields}])
    return record_id


def with_random_vectors(items: list[dict[str, Any]], seed: int, dimension: int = 4) -> list[dict[str, Any]]:
    """The items, each with a unit vector drawn from a generator seeded with `seed` (an item's own
    vector stays)."""
    rng = random.Random(seed)
    return [{"vector": unit(*[rng.uniform(-1, 1) for _ in range(dimension)]), **item} for item in items]
