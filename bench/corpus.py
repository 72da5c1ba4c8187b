"""The synthetic corpus: deterministic for a record count and a seed.

- 384-dimension vectors in clusters: each record is its cluster's centre plus Gaussian noise,
  normalised; cluster sizes follow a mild power law.
- Tags: a few broad tags on 10% or more of the records, a topic tag per cluster, and a Zipf tail
  drawn from WordNet nouns (so that questions' words match tags through their lemma).
- About 30% conversation records, in threads of 4 to 16 turns; windows of 3 turns, stride 2.
- Content with codes (INV-xxxxx), names WordNet does not know, amounts and quarters for full text.
- Edges with properties (invoice, amount, status, by) between records of the same cluster.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

DIMENSION = 384
EPOCH = datetime(2023, 1, 1, tzinfo=UTC)
LEXICON_PATH = Path(__file__).resolve().parent.parent / "plpython" / "emem_db" / "lexicon.json"

# Broad tags and the share of records that carry each.
BROAD_TAGS = {"project": 0.15, "meeting": 0.12, "customer": 0.10, "invoice": 0.05}
MULTI_WORD_TAGS = ("project apollo", "project hermes", "customer:acme", "customer:globex")
# Words the questions use and that must match no tag, edge label or full-text term.
RESERVED_WORDS = frozenset(
    {
        "team",
        "feel",
        "weekend",
        "decide",
        "pay",
        "plan",
        "happen",
        "say",
        "think",
        "note",
        "thing",
        "apollo",
        "hermes",
        "acme",
        "globex",
        "paid",
        "open",
        "overdue",
        "disputed",
    }
)
LANES = {"team": 0.7, "ops": 0.2, "private": 0.1}
# Kinds of single records; conversation threads (4 to 16 turns) make up THREAD_SHARE of the records.
SINGLE_KINDS = {"note": 0.88, "entity": 0.05, "file": 0.07}
THREAD_SHARE = 0.30
THREAD_TURNS = (4, 16)
THREAD_UNIT_SHARE = THREAD_SHARE / (sum(THREAD_TURNS) / 2 * (1 - THREAD_SHARE) + THREAD_SHARE)
RELATIONS = ("billed", "mentions", "follows_up", "blocks", "owns")
STATUSES = ("paid", "open", "overdue", "disputed")
CURRENCIES = ("EUR", "USD", "PLN", "GBP")
VERBS = ("sent", "approved", "queried", "rejected", "forwarded", "booked")
WINDOW_SIZE = 3
WINDOW_STRIDE = 2
NOISE = 0.7  # length of the noise added to a unit-length centre (cosine to centre about 0.82)

_SYLLABLES = (
    ("Kow", "Brz", "Szc", "Wal", "Dab", "Zel", "Pio", "Jas", "Wis", "Gor", "Tam", "Vol", "Quen", "Yar", "Oks"),
    ("al", "ak", "ow", "ek", "in", "ar", "ys", "ic", "ud"),
    ("ski", "czyk", "ewicz", "ova", "sen", "berg", "ini", "escu", "ott"),
)


@dataclass
class Record:
    kind: str
    content: str
    lane: str
    tags: list[str]
    cluster: int
    occurred_at: str
    metadata: dict[str, str | int]
    thread_id: str | None = None
    thread_position: int | None = None

    def item(self, vector: np.ndarray) -> dict[str, Any]:
        """The put_records item of this record with its vector."""
        item: dict[str, Any] = {
            "kind": self.kind,
            "content": self.content,
            "lane": self.lane,
            "tags": self.tags,
            "occurred_at": self.occurred_at,
            "metadata": self.metadata,
            "vector": "[" + ",".join(f"{x:.6f}" for x in vector.tolist()) + "]",  # pgvector's text: the fast form
        }
        if self.thread_id is not None:
            item["thread_id"] = self.thread_id
            item["thread_position"] = self.thread_position
        return item


@dataclass
class Edge:
    from_index: int  # indexes into the corpus order
    to_index: int
    relation: str
    properties: dict[str, str]


@dataclass
class Unit:
    """One note, entity or file chunk, or one whole conversation thread (never split across batches)."""

    records: list[Record]
    edges: list[Edge] = field(default_factory=list)

    @property
    def is_thread(self) -> bool:
        return self.records[0].kind == "conversation"


def weighted_choice(rng: random.Random, table: dict[str, float]) -> str:
    return rng.choices(list(table), weights=list(table.values()))[0]


def zipf_weights(count: int, exponent: float = 1.07, offset: float = 2.7) -> list[float]:
    return [1.0 / (rank + offset) ** exponent for rank in range(count)]


def noun_vocabulary(count: int, rng: random.Random) -> list[str]:
    """`count` plain WordNet nouns (4 to 9 letters), minus the broad, reserved and multi-word words."""
    lemmas = json.loads(LEXICON_PATH.read_text())["lemmas"]["n"]
    excluded = set(BROAD_TAGS) | RESERVED_WORDS | {w for tag in MULTI_WORD_TAGS for w in tag.replace(":", " ").split()}
    nouns = sorted(w for w in lemmas if w.isalpha() and w.islower() and 4 <= len(w) <= 9 and w not in excluded)
    return rng.sample(nouns, count)


def surnames() -> list[str]:
    first, middle, last = _SYLLABLES
    return [a + b + c for a in first for b in middle for c in last]


class Corpus:
    """Generates records unit by unit; the same count and seed give the same corpus."""

    def __init__(self, records: int, seed: int) -> None:
        self.size = records
        self.seed = seed
        self.rng = random.Random(seed)
        self.clusters = max(50, records // 500)
        vector_rng = np.random.default_rng(seed)
        centres = vector_rng.standard_normal((self.clusters, DIMENSION))
        self.centres = (centres / np.linalg.norm(centres, axis=1, keepdims=True)).astype(np.float32)
        self.noise_rng = np.random.default_rng(seed + 1)
        self.cluster_weights = [1.0 / (c + 1) ** 0.5 for c in range(self.clusters)]
        self.vocabulary = noun_vocabulary(3000 if records < 500_000 else 6000, self.rng)
        self.tag_weights = zipf_weights(len(self.vocabulary))
        topic_words = self.vocabulary[:600]
        self.topics = [self.rng.sample(topic_words, 3) for _ in range(self.clusters)]
        self.names = surnames()
        self.name_weights = zipf_weights(len(self.names), exponent=0.9)
        self.recent: dict[int, list[int]] = {}  # cluster -> indexes of its latest records
        self.emitted = 0
        self.next_code = 10_000

    # ---- the pieces of a record ---------------------------------------------------------

    def cluster(self) -> int:
        return self.rng.choices(range(self.clusters), weights=self.cluster_weights)[0]

    def name(self) -> str:
        return self.rng.choices(self.names, weights=self.name_weights)[0]

    def code(self) -> str:
        self.next_code += self.rng.randint(1, 3)
        return f"INV-{self.next_code}"

    def amount(self) -> str:
        return f"{self.rng.randint(50, 9_999):,}.{self.rng.randint(0, 99):02d} {self.rng.choice(CURRENCIES)}"

    def quarter(self) -> str:
        return f"Q{self.rng.randint(1, 4)} {self.rng.choice((2023, 2024))}"

    def moment(self, day: int | None = None, minutes: int | None = None) -> str:
        """A time in 2023-2024: random, or `minutes` after 09:00 of `day` (for conversation turns)."""
        if day is None:
            day = self.rng.randint(0, 729)
        if minutes is None:
            minutes = self.rng.randint(0, 1439 - 540)
        when = EPOCH + timedelta(days=day, minutes=540 + minutes)
        return when.isoformat()

    def tags(self, cluster: int) -> list[str]:
        tags = {tag for tag, share in BROAD_TAGS.items() if self.rng.random() < share}
        if self.rng.random() < 0.6:
            tags.add(self.topics[cluster][0])
        tags.update(self.rng.choices(self.vocabulary, weights=self.tag_weights, k=self.rng.randint(0, 3)))
        if self.rng.random() < 0.02:
            tags.add(self.rng.choice(MULTI_WORD_TAGS))
        return sorted(tags)

    # ---- records ------------------------------------------------------------------------

    def note(self, cluster: int, metadata: dict[str, str | int]) -> str:
        first, second, third = self.topics[cluster]
        name = self.name()
        metadata["name"] = name
        if self.rng.random() < 0.5:
            code = self.code()
            metadata["code"] = code
            return (
                f"{name} {self.rng.choice(VERBS)} invoice {code} for {self.amount()} about the {first} "
                f"and the {second} in {self.quarter()}."
            )
        return f"Notes on the {first}: {name} expects the {second} to affect the {third} by {self.quarter()}."

    def single(self, kind: str, cluster: int) -> Record:
        metadata: dict[str, str | int] = {"cluster": cluster}
        thread_id, position = None, None
        if kind == "note":
            content = self.note(cluster, metadata)
        elif kind == "entity":
            name = self.name()
            metadata["name"] = name
            content = (
                f"{name}, {self.topics[cluster][0]} lead; contact {name.lower()}@example.com, budget {self.amount()}."
            )
        else:
            thread_id, position = f"file-{self.emitted}", 0
            content = (
                f"Chapter on the {self.topics[cluster][1]}: the {self.topics[cluster][2]} budget is "
                f"{self.amount()} for {self.quarter()}."
            )
        return Record(
            kind,
            content,
            weighted_choice(self.rng, LANES),
            self.tags(cluster),
            cluster,
            self.moment(),
            metadata,
            thread_id,
            position,
        )

    def thread(self, cluster: int) -> list[Record]:
        turns = self.rng.randint(*THREAD_TURNS)
        lane = weighted_choice(self.rng, LANES)
        speakers = [self.name(), self.name()]
        day = self.rng.randint(0, 729)
        thread_id = f"conv-{self.emitted}"
        records = []
        for position in range(turns):
            speaker = speakers[position % 2]
            first, second, _ = self.topics[cluster]
            extra = f" Invoice {self.code()} is {self.rng.choice(STATUSES)}." if self.rng.random() < 0.15 else ""
            content = f"{speaker}: what about the {first}? The {second} moves to {self.quarter()}.{extra}"
            records.append(
                Record(
                    "conversation",
                    content,
                    lane,
                    self.tags(cluster),
                    cluster,
                    self.moment(day, position * 3),
                    {"cluster": cluster, "name": speaker},
                    thread_id,
                    position,
                )
            )
        return records

    def edges(self, records: list[Record], first_index: int) -> list[Edge]:
        """About one edge per four records, to an earlier record of the same cluster."""
        edges = []
        for offset, record in enumerate(records):
            index = first_index + offset
            peers = self.recent.setdefault(record.cluster, [])
            if peers and self.rng.random() < 0.25:
                properties = {
                    "by": str(record.metadata.get("name", self.name())),
                    "amount": self.amount(),
                    "status": self.rng.choice(STATUSES),
                }
                code = record.metadata.get("code")
                if code:
                    properties["invoice"] = str(code)
                edges.append(Edge(index, self.rng.choice(peers), self.rng.choice(RELATIONS), properties))
            peers.append(index)
            del peers[:-50]
        return edges

    def units(self) -> Iterator[Unit]:
        while self.emitted < self.size:
            cluster = self.cluster()
            if self.rng.random() < THREAD_UNIT_SHARE:
                records = self.thread(cluster)
            else:
                records = [self.single(weighted_choice(self.rng, SINGLE_KINDS), cluster)]
            records = records[: self.size - self.emitted]
            unit = Unit(records, self.edges(records, self.emitted))
            self.emitted += len(records)
            yield unit

    def vectors(self, clusters: list[int]) -> np.ndarray:
        noise = self.noise_rng.standard_normal((len(clusters), DIMENSION)).astype(np.float32)
        vectors = self.centres[clusters] + noise * (NOISE / np.sqrt(DIMENSION))
        normalised: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        return normalised

    def near(self, cluster: int, rng: np.random.Generator) -> np.ndarray:
        """A question vector near a cluster's centre."""
        vector = self.centres[cluster] + rng.standard_normal(DIMENSION).astype(np.float32) * (0.5 / np.sqrt(DIMENSION))
        normalised: np.ndarray = vector / np.linalg.norm(vector)
        return normalised


def windows(positions: list[int]) -> list[list[int]]:
    """Runs of WINDOW_SIZE consecutive positions with stride WINDOW_STRIDE (the last run may be shorter)."""
    runs = []
    for start in range(0, max(1, len(positions) - 1), WINDOW_STRIDE):
        run = positions[start : start + WINDOW_SIZE]
        if len(run) >= 2:
            runs.append(run)
    return runs
