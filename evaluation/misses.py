"""The miss analysis of issue 30 (`make eval EVAL_ARGS=--misses`): for every piece of evidence page 1
does not hold in its first ten rows, where e_gather_explain's lists had it.

- crowded: some list has it in its own first ten, but the merge gave the slots to other rows;
- deep: the best list rank is past ten (11-30, 31-100, beyond), or no list holds it at all; and
  how far it is by meaning (its exact rank by cosine among all records, from the stored vectors:
  record_vectors itself only takes its nearest candidates);
- the slots: which lookup placed the rows of the first ten that are not evidence, and for every
  lookup how much evidence a slot of its brings (over all questions);
- per role (issue 30's corpora say where each piece of evidence is: the key record, linked by an
  edge, in another thread, ...), and how often thread_context had candidates at all;
- stop-word relations: for questions with a relation named by a stop word (`about`, `for`,
  `with`, `over`), the size of the tags list and the rank there of the entity the question names,
  with the question as asked and without the stop word (the same vector), and the recall of both.

List ranks beyond page 1 come from explain over deeper pages of 1,000 (the lists are read as far
as the merge reaches, so a record past every list's read part is in none).
"""

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
from pages import Answer, Loaded, explain, recall
from relations import STOP_WORD_RELATIONS

DEEP_PAGE_SIZE = 1_000
DEPTHS = ((30, "11-30"), (100, "31-100"), (None, ">100"))
FAR_BY_MEANING = 100  # an exact cosine rank past this is far by meaning


@dataclass(frozen=True)
class Whereabouts:
    """Where one record stands in a question's merged list and in each lookup's list."""

    merged: int | None
    lists: dict[str, int]

    @property
    def best(self) -> int | None:
        return min(self.lists.values(), default=None)


def whereabouts(
    conn: psycopg.Connection, question: str, vector: list[float] | None, wanted: Iterable[int]
) -> dict[int, Whereabouts]:
    """Each wanted record's ranks, read from explain's pages of 1,000 as deep as needed."""
    missing, found = set(wanted), {}
    page = 1
    while missing:
        explained = explain(conn, question, vector, page, DEEP_PAGE_SIZE)
        for row in explained["rows"]:
            if row["record_id"] in missing:
                ranks = {name: rank for name, rank in (row.get("list_ranks") or {}).items() if rank is not None}
                found[row["record_id"]] = Whereabouts(row["rank"], ranks)
                missing.discard(row["record_id"])
        if page * DEEP_PAGE_SIZE >= explained["total_candidates"]:
            break
        page += 1
    found.update({record_id: Whereabouts(None, {}) for record_id in missing})
    return found


class DenseRanks:
    """Exact ranks by cosine similarity among all records of a corpus."""

    def __init__(self, loaded: Loaded) -> None:
        self.ids = np.array([loaded.ids[key] for key in loaded.vectors])
        matrix = np.array(list(loaded.vectors.values()), dtype=np.float64)
        self.matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    def ranks(self, vector: list[float], wanted: Iterable[int]) -> dict[int, int]:
        query = np.asarray(vector, dtype=np.float64)
        similarities = self.matrix @ (query / np.linalg.norm(query))
        order = self.ids[np.argsort(-similarities, kind="stable")]
        position = {int(record_id): rank for rank, record_id in enumerate(order, start=1)}
        return {record_id: position[record_id] for record_id in wanted}


@dataclass
class Tally:
    """What happened to the evidence of one question type (or of all)."""

    questions: int = 0
    evidence: int = 0
    missed: int = 0  # not in the first ten
    crowded: int = 0  # missed, but in some list's first ten
    depth: Counter = field(default_factory=Counter)  # missed and in no list's first ten: best rank bucket
    in_no_list: int = 0
    far_by_meaning: int = 0  # missed and past FAR_BY_MEANING by exact cosine

    def row(self, name: str) -> str:
        cells = [self.questions, self.evidence, self.missed, self.crowded, *(self.depth[d] for _, d in DEPTHS)]
        return f"  {name:<20}" + "".join(f"{c:>9}" for c in cells) + f"{self.in_no_list:>9}{self.far_by_meaning:>9}"


HEADER = f"  {'question type':<20}" + "".join(
    f"{h:>9}" for h in ("questions", "evidence", "missed", "crowded", *(d for _, d in DEPTHS), "no list", "far")
)


def depth_of(rank: int) -> str:
    return next(name for limit, name in DEPTHS if limit is None or rank <= limit)


def analyse_misses(
    conn: psycopg.Connection,
    corpus_name: str,
    configuration: str,
    loaded: Loaded,
    answers: list[Answer],
    question_vectors: list[list[float]],
) -> None:
    """Prints the analysis of one configuration's answers, in the order of their questions'
    vectors (a degraded answer, too, is far by meaning by its question's vector); the session
    runs the configuration's profile."""
    dense = DenseRanks(loaded)
    tallies: dict[str, Tally] = defaultdict(Tally)
    crowded_in: Counter = Counter()  # list -> missed evidence it has in its first ten
    took_slots: Counter = Counter()  # lookup -> rows of a first ten with a miss that are not evidence
    slots, useful = Counter(), Counter()  # lookup -> rows it placed in a first ten, of them evidence
    roles: dict[str, Counter] = defaultdict(Counter)  # role -> {"evidence", "missed", "crowded"}
    thread_context_ran = 0
    for answer, question_vector in zip(answers, question_vectors, strict=True):
        explained = answer.explained or {}
        first_ten = explained["rows"][:10]
        for row in first_ten:
            slots[row["placed_by"]] += 1
            useful[row["placed_by"]] += row["record_id"] in answer.evidence
        if explained.get("lookups", {}).get("thread_context", {}).get("candidates"):
            thread_context_ran += 1
        missed = answer.evidence - set(answer.page[:10])
        role_of = {loaded.ids[key]: role for key, role in answer.question.roles.items()}
        for record_id in answer.evidence:
            roles[role_of.get(record_id, "evidence")]["evidence"] += 1
        for tally in (tallies[answer.question.kind], tallies["all"]):
            tally.questions += 1
            tally.evidence += len(answer.evidence)
            tally.missed += len(missed)
        if not missed:
            continue
        took_slots.update(row["placed_by"] for row in first_ten if row["record_id"] not in answer.evidence)
        places = whereabouts(conn, answer.question.text, answer.vector, missed)
        far = dense.ranks(question_vector, missed)
        for record_id in missed:
            place, role = places[record_id], roles[role_of.get(record_id, "evidence")]
            role["missed"] += 1
            near = {name for name, rank in place.lists.items() if rank <= 10}
            crowded_in.update(near)
            role["crowded"] += bool(near)
            for tally in (tallies[answer.question.kind], tallies["all"]):
                if near:
                    tally.crowded += 1
                elif place.best is None:
                    tally.in_no_list += 1
                else:
                    tally.depth[depth_of(place.best)] += 1
                tally.far_by_meaning += far[record_id] > FAR_BY_MEANING
    mode = "degraded" if configuration.endswith("degraded") else "with a vector"
    print(f"\nmisses at 10, {corpus_name}, {configuration.removesuffix(' degraded')} {mode}:")
    print(HEADER)
    for kind in [*(k for k in tallies if k != "all"), "all"]:
        print(tallies[kind].row(kind))
    print("  missed evidence in the first ten of: " + shares(crowded_in, tallies["all"].missed))
    print("  rows of the first ten that are not evidence (questions with a miss), placed by: " + shares(took_slots))
    print(
        "  evidence per slot of the first ten (all questions): "
        + ", ".join(f"{name} {useful[name] / n:.3f} of {n}" for name, n in slots.most_common())
    )
    if len(roles) > 1:
        print(
            "  by role (missed / evidence, of the missed in some list's first ten): "
            + ", ".join(f"{role} {c['missed']}/{c['evidence']} ({c['crowded']})" for role, c in sorted(roles.items()))
        )
    if any("thread_context" in (a.explained or {}).get("lookups", {}) for a in answers):
        print(f"  thread_context had candidates for {thread_context_ran} of {len(answers)} questions")
    if corpus_name == "relations":
        stop_word_pull(conn, answers, loaded)


def shares(counter: Counter, total: int | None = None) -> str:
    total = total or sum(counter.values())
    return ", ".join(f"{name} {n} ({n / total:.0%})" for name, n in counter.most_common()) or "-"


def without_relation_words(question: str) -> str | None:
    """The question without the stop words that name relations; None when it has none."""
    pattern = r"\b(" + "|".join(STOP_WORD_RELATIONS) + r")\b\s*"
    stripped = re.sub(pattern, "", question, flags=re.IGNORECASE)
    return stripped if stripped != question else None


def tags_list(explained: dict[str, Any]) -> str | None:
    lookups = explained.get("lookups", {})
    return next((name for name in ("tags_by_terms", "tags") if name in lookups), None)


def stop_word_pull(conn: psycopg.Connection, answers: list[Answer], loaded: Loaded) -> None:
    """How much the relations named by stop words pull into the tags list, per question type."""
    per_kind: dict[str, list[tuple[int, int, float, float, float, float, float, float]]] = defaultdict(list)
    for answer in answers:
        stripped = without_relation_words(answer.question.text)
        entity = next((loaded.ids[k] for k, role in answer.question.roles.items() if role == "entity"), None)
        name = tags_list(answer.explained or {})
        if stripped is None or name is None:
            continue
        plain = explain(conn, stripped, answer.vector)
        ranks = [
            whereabouts(conn, text, answer.vector, [entity])[entity].lists.get(name) if entity is not None else None
            for text in (answer.question.text, stripped)
        ]
        plain_page = [row["record_id"] for row in plain["rows"]]
        per_kind[answer.question.kind].append(
            (
                answer.explained["lookups"][name]["candidates"],
                plain["lookups"][name]["candidates"],
                rank_or_nan(ranks[0]),
                rank_or_nan(ranks[1]),
                recall(answer.page, set(answer.evidence), 10),
                recall(plain_page, set(answer.evidence), 10),
                recall(answer.page, set(answer.evidence), 30),
                recall(plain_page, set(answer.evidence), 30),
            )
        )
    for kind, rows in per_kind.items():
        table = np.array(rows, dtype=np.float64)
        sizes, stripped_sizes = table[:, 0], table[:, 1]
        print(
            f"  {kind}, {len(rows)} questions naming a relation by a stop word: tags list {np.mean(stripped_sizes):.1f}"
            f" records without the stop word, {np.mean(sizes):.1f} with it (largest {int(sizes.max())}; grew for"
            f" {int((sizes > stripped_sizes).sum())}); the named entity's median rank there"
            f" {np.nanmedian(table[:, 3]):.0f} without, {np.nanmedian(table[:, 2]):.0f} with;"
            f" R@10/R@30 without {np.mean(table[:, 5]):.3f}/{np.mean(table[:, 7]):.3f},"
            f" with {np.mean(table[:, 4]):.3f}/{np.mean(table[:, 6]):.3f}"
        )


def rank_or_nan(rank: int | None) -> float:
    return float("nan") if rank is None else float(rank)
