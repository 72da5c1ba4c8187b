"""The kinds of question, built from the loaded data so that each one means what its kind says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from corpus import Corpus
from db import scalar, vector_text

KINDS = ("code_only", "rare_tag", "broad_tag", "meaning_only", "mixed", "edge_heavy", "three_broad")
BROAD_TAG = "meeting"
RARE_TAG_SHARE = 0.0005  # about 50 records at 100k
# The status of a quarter of the edges: its edges end at some 100,000 records at 1M.
EDGE_HEAVY = "what was paid?"
# Three full-text terms WordNet does not know, each on a quarter to a half of the records.
THREE_BROAD = "what happened in Q3 or Q4 2024?"


@dataclass(frozen=True)
class Question:
    kind: str
    text: str
    vector: str  # pgvector text form, near a cluster of the corpus
    terms: tuple[str, ...]  # emem.analyse_question: matched against tags and edge labels
    known_words: tuple[str, ...]
    fulltext_terms: tuple[str, ...]  # searched by full text

    @property
    def websearch_text(self) -> str:
        """The question's words for the classic hybrid's websearch_to_tsquery, OR-ed."""
        return " or ".join(dict.fromkeys((*self.known_words, *self.fulltext_terms)))


def anchor(conn: psycopg.Connection, where: str, params: tuple[Any, ...] = ()) -> tuple[int, dict[str, Any]]:
    """The record in the middle of those matching `where`: (cluster, metadata)."""
    count = int(scalar(conn, f"select count(*) from emem.records as r where {where}", params))
    row = conn.execute(
        f"select r.metadata from emem.records as r where {where} order by r.record_id offset %s limit 1",
        (*params, count // 2),
    ).fetchone()
    if row is None:
        raise RuntimeError(f"the corpus holds no record where {where}")
    return int(row[0]["cluster"]), row[0]


def invoice_on_edge(conn: psycopg.Connection, position: float) -> tuple[int, str, str]:
    """(cluster, code, name) of a billed record whose invoice also sits on an edge."""
    count = int(scalar(conn, "select count(*) from emem.edges where properties ? 'invoice'"))
    record_id = scalar(
        conn,
        """select from_record_id from emem.edges where properties ? 'invoice'
                                order by edge_id offset %s limit 1""",
        (int(count * position),),
    )
    metadata = scalar(conn, "select metadata from emem.records where record_id = %s", (record_id,))
    return int(metadata["cluster"]), metadata["code"], metadata["name"]


def rare_tag(conn: psycopg.Connection, records: int) -> str:
    wanted = max(3, round(records * RARE_TAG_SHARE))
    return str(
        scalar(
            conn,
            """
        select tag from emem.record_tags where tag ~ '^[a-z]+$'
        group by tag order by abs(count(*) - %s), tag limit 1""",
            (wanted,),
        )
    )


def texts(conn: psycopg.Connection, records: int) -> dict[str, tuple[str, int]]:
    """Each kind's question text and the cluster its vector is near."""
    code_cluster, code, _ = invoice_on_edge(conn, 0.5)
    mixed_cluster, mixed_code, name = invoice_on_edge(conn, 0.25)
    rare = rare_tag(conn, records)
    rare_cluster, _ = anchor(
        conn, "exists (select from emem.record_tags as t where t.record_id = r.record_id and t.tag = %s)", (rare,)
    )
    broad_cluster, _ = anchor(
        conn, "exists (select from emem.record_tags as t where t.record_id = r.record_id and t.tag = %s)", (BROAD_TAG,)
    )
    paid_cluster, _ = anchor(
        conn,
        "exists (select from emem.edges as e where e.from_record_id = r.record_id"
        " and e.properties->>'status' = 'paid')",
    )
    quarter_cluster, _ = anchor(conn, "r.content like '%%Q3 2024%%'")
    return {
        "code_only": (code, code_cluster),
        "rare_tag": (f"what about the {rare}?", rare_cluster),
        "broad_tag": (f"what about the {BROAD_TAG}?", broad_cluster),
        "meaning_only": ("how did the team feel about the weekend?", 7),
        "mixed": (f"did {name} pay {mixed_code} for the project apollo {BROAD_TAG} in Q3?", mixed_cluster),
        "edge_heavy": (EDGE_HEAVY, paid_cluster),
        "three_broad": (THREE_BROAD, quarter_cluster),
    }


def build_questions(conn: psycopg.Connection, corpus: Corpus) -> list[Question]:
    rng = np.random.default_rng(corpus.seed + 2)
    questions = []
    for kind, (text, cluster) in texts(conn, corpus.size).items():
        analysis = scalar(conn, "select emem.analyse_question(%s)", (text,))
        questions.append(
            Question(
                kind,
                text,
                vector_text(corpus.near(cluster % corpus.clusters, rng)),
                tuple(analysis["terms"]),
                tuple(analysis["known_words"]),
                tuple(analysis["unknown_terms"]),
            )
        )
    return questions
