"""The miss analysis (`make eval EVAL_ARGS=--misses`): for every piece of evidence page 1
does not hold in its first ten rows, where e_gather_explain's lists had it.

- crowded: some list has it in its own first ten, but the merge gave the slots to other rows;
- deep: the best list rank is past ten (11-30, 31-100, beyond), or no list holds it at all; and
  how far it is by meaning (its exact rank by cosine among all records, from the stored vectors:
  record_vectors itself only takes its nearest candidates);
- the slots: which lookup placed the rows of the first ten that are not evidence, and for every
  lookup how much evidence a slot of its brings (over all questions);
- one step: whether a missed record is linked by an edge to evidence the first ten hold, among
  its ten nearest records by meaning, or within 3 positions of it in a thread (what a lookup
  that follows exact hits could reach);
- per role (the corpora shaped like real ones say where each piece of evidence is: the key record, linked by an
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
from corpus import Corpus
from pages import Answer, Loaded, explain, recall
from relations import STOP_WORD_RELATIONS

DEEP_PAGE_SIZE = 1_000
DEPTHS = ((30, "11-30"), (100, "31-100"), (None, ">100"))
FAR_BY_MEANING = 100  # an exact cosine rank past this is far by meaning


@dataclass(frozen=True)
class Whereabouts:
    """Where one record stands in each lookup's list of a question (rank from 1)."""

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
                found[row["record_id"]] = Whereabouts(ranks)
                missing.discard(row["record_id"])
        if page * DEEP_PAGE_SIZE >= explained["total_candidates"]:
            break
        page += 1
    found.update({record_id: Whereabouts({}) for record_id in missing})
    return found


class DenseRanks:
    """Exact ranks by cosine similarity among all records of a corpus (1: the nearest; records as
    near share a rank)."""

    def __init__(self, loaded: Loaded) -> None:
        self.index = {loaded.ids[key]: n for n, key in enumerate(loaded.vectors)}
        matrix = np.array(list(loaded.vectors.values()), dtype=np.float64)
        self.matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    def ranks(self, vector: list[float], wanted: Iterable[int]) -> dict[int, int]:
        similarities = self.matrix @ np.asarray(vector, dtype=np.float64)
        return {record_id: 1 + int((similarities > similarities[self.index[record_id]]).sum()) for record_id in wanted}


@dataclass
class Tally:
    """What happened to the evidence of one question type (or of all)."""

    questions: int = 0
    evidence: int = 0
    missed: int = 0  # not in the first ten
    crowded: int = 0  # missed, but in some list's first ten
    depth: Counter[str] = field(default_factory=Counter)  # missed and in no list's first ten: best rank bucket
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


class Analysis:
    """The tallies of one configuration's answers on one corpus."""

    def __init__(self, conn: psycopg.Connection, corpus: Corpus, loaded: Loaded) -> None:
        self.conn, self.corpus, self.loaded = conn, corpus, loaded
        self.dense = DenseRanks(loaded)
        self.key_of = {record_id: key for key, record_id in loaded.ids.items()}
        records = {r["key"]: r for r in corpus.records}
        self.place_in_thread = {
            loaded.ids[key]: (r["thread_id"], r["thread_position"]) for key, r in records.items() if "thread_id" in r
        }
        self.linked = {(loaded.ids[s], loaded.ids[t]) for s, t, _, _ in corpus.edges}
        self.linked |= {(t, s) for s, t in self.linked}
        self.tallies: dict[str, Tally] = defaultdict(Tally)
        self.crowded_in: Counter[str] = Counter()  # list -> missed evidence it has in its first ten
        self.took_slots: Counter[str] = Counter()  # lookup -> rows of a first ten with a miss that are not evidence
        # lookup -> rows it placed in a first ten, of them evidence
        self.slots: Counter[str] = Counter()
        self.useful: Counter[str] = Counter()
        self.roles: dict[str, Counter[str]] = defaultdict(Counter)  # role -> evidence, missed, crowded
        self.one_hop: Counter[str] = Counter()  # how a missed record is one hop from evidence in the first ten
        self.thread_context_ran = 0

    def add(self, answer: Answer, question_vector: list[float]) -> None:
        explained = answer.explained or {}
        first_ten = explained["rows"][:10]
        for row in first_ten:
            self.slots[row["placed_by"]] += 1
            self.useful[row["placed_by"]] += row["record_id"] in answer.evidence
        if explained.get("lookups", {}).get("thread_context", {}).get("candidates"):
            self.thread_context_ran += 1
        missed = answer.evidence - set(answer.page[:10])
        role_of = {self.loaded.ids[key]: role for key, role in answer.question.roles.items()}
        for record_id in answer.evidence:
            self.roles[role_of.get(record_id, "evidence")]["evidence"] += 1
        kinds = (self.tallies[answer.question.kind], self.tallies["all"])
        for tally in kinds:
            tally.questions += 1
            tally.evidence += len(answer.evidence)
            tally.missed += len(missed)
        if not missed:
            return
        self.took_slots.update(row["placed_by"] for row in first_ten if row["record_id"] not in answer.evidence)
        places = whereabouts(self.conn, answer.question.text, answer.vector, missed)
        far = self.dense.ranks(question_vector, missed)
        found = answer.evidence & set(answer.page[:10])
        for record_id in missed:
            place, role = places[record_id], self.roles[role_of.get(record_id, "evidence")]
            role["missed"] += 1
            near = {name for name, rank in place.lists.items() if rank <= 10}
            self.crowded_in.update(near)
            role["crowded"] += bool(near)
            self.one_hop.update(self.hops(record_id, found) or {"none"})
            for tally in kinds:
                if near:
                    tally.crowded += 1
                elif place.best is None:
                    tally.in_no_list += 1
                else:
                    tally.depth[depth_of(place.best)] += 1
                tally.far_by_meaning += far[record_id] > FAR_BY_MEANING

    def hops(self, record_id: int, found: frozenset[int]) -> set[str]:
        """How a missed record is one step from evidence page 1 has in its first ten: linked by an
        edge, among its ten nearest records by meaning, within 3 positions of its thread."""
        ways = set()
        thread = self.place_in_thread.get(record_id)
        for other in found:
            if (record_id, other) in self.linked:
                ways.add("edge")
            vector = self.loaded.vectors[self.key_of[other]]
            if self.dense.ranks(vector, [record_id])[record_id] <= 11:  # the record itself is the first
                ways.add("meaning")
            there = self.place_in_thread.get(other)
            if thread and there and thread[0] == there[0] and abs(thread[1] - there[1]) <= 3:
                ways.add("thread")
        return ways

    def report(self, title: str) -> None:
        print(f"\nmisses at 10, {title}:")
        print(HEADER)
        for kind in [*(k for k in self.tallies if k != "all"), "all"]:
            print(self.tallies[kind].row(kind))
        print("  missed evidence in the first ten of: " + shares(self.crowded_in, self.tallies["all"].missed))
        print(
            "  rows of the first ten that are not evidence (questions with a miss), placed by: "
            + shares(self.took_slots)
        )
        print(
            "  evidence per slot of the first ten (all questions): "
            + ", ".join(f"{name} {self.useful[name] / n:.3f} of {n}" for name, n in self.slots.most_common())
        )
        print(
            "  missed evidence one step from evidence in the first ten (a record may count in several), by: "
            + shares(self.one_hop, self.tallies["all"].missed)
        )
        if len(self.roles) > 1:
            print(
                "  by role (missed / evidence, of the missed in some list's first ten): "
                + ", ".join(
                    f"{role} {c['missed']}/{c['evidence']} ({c['crowded']})" for role, c in sorted(self.roles.items())
                )
            )


def analyse_misses(
    conn: psycopg.Connection,
    corpus_name: str,
    configuration: str,
    corpus: Corpus,
    loaded: Loaded,
    answers: list[Answer],
    question_vectors: list[list[float]],
) -> None:
    """Prints the analysis of one configuration's answers, in the order of their questions'
    vectors (a degraded answer, too, is far by meaning by its question's vector); the session
    runs the configuration's profile."""
    analysis = Analysis(conn, corpus, loaded)
    for answer, question_vector in zip(answers, question_vectors, strict=True):
        analysis.add(answer, question_vector)
    mode = "degraded" if configuration.endswith("degraded") else "with a vector"
    analysis.report(f"{corpus_name}, {configuration.removesuffix(' degraded')} {mode}")
    if any("thread_context" in (a.explained or {}).get("lookups", {}) for a in answers):
        print(f"  thread_context had candidates for {analysis.thread_context_ran} of {len(answers)} questions")
    if corpus_name == "relations":
        stop_word_pull(conn, answers, loaded, corpus.edges)


def shares(counter: Counter[str], total: int | None = None) -> str:
    total = total or sum(counter.values())
    return ", ".join(f"{name} {n} ({n / total:.0%})" for name, n in counter.most_common()) or "-"


def relation_words(question: str) -> set[str]:
    """The question's stop words that name relations of the corpus."""
    return {word for word in re.findall(r"[a-z]+", question.lower()) if word in STOP_WORD_RELATIONS}


def without_relation_words(question: str) -> str:
    pattern = r"\b(" + "|".join(STOP_WORD_RELATIONS) + r")\b\s*"
    return re.sub(pattern, "", question, flags=re.IGNORECASE)


def tags_list(explained: dict[str, Any]) -> str | None:
    lookups = explained.get("lookups", {})
    return next((name for name in ("tags_by_terms", "tags") if name in lookups), None)


@dataclass(frozen=True)
class Pull:
    """One question as asked and without its relation stop words (the same vector): the tags
    list's size, the rank there of the entity it names (nan: not in it), recall at 10 and 30."""

    sizes: tuple[int, int]
    entity_ranks: tuple[float, float]
    at_10: tuple[float, float]
    at_30: tuple[float, float]


def pull_of(conn: psycopg.Connection, answer: Answer, entity: int, list_name: str) -> Pull:
    sizes, ranks, at_10, at_30 = [], [], [], []
    for text in (answer.question.text, without_relation_words(answer.question.text)):
        explained = explain(conn, text, answer.vector, 1, DEEP_PAGE_SIZE)  # the corpus is smaller
        page = [row["record_id"] for row in explained["rows"]]
        entity_row = next((row for row in explained["rows"] if row["record_id"] == entity), None)
        sizes.append(explained["lookups"][list_name]["candidates"])
        ranks.append(rank_or_nan(entity_row and entity_row["list_ranks"].get(list_name)))
        at_10.append(recall(page, set(answer.evidence), 10))
        at_30.append(recall(page, set(answer.evidence), 30))
    return Pull((sizes[0], sizes[1]), (ranks[0], ranks[1]), (at_10[0], at_10[1]), (at_30[0], at_30[1]))


def stop_word_pull(
    conn: psycopg.Connection, answers: list[Answer], loaded: Loaded, edges: list[tuple[str, str, str, dict[str, Any]]]
) -> None:
    """What the relations named by stop words pull into the tags list, per question type and by
    whether the stop word's relation is the one that links the evidence."""
    groups: dict[str, list[Pull]] = defaultdict(list)
    for answer in answers:
        words, list_name = relation_words(answer.question.text), tags_list(answer.explained or {})
        entity = next((loaded.ids[k] for k, role in answer.question.roles.items() if role == "entity"), None)
        if not words or list_name is None or entity is None:
            continue
        gold = answer.question.gold
        links = any(relation in words and source in gold and target in gold for source, target, relation, _ in edges)
        how = "its relation links the evidence" if links else "it names another relation than the evidence's"
        groups[f"{answer.question.kind}, {how}"].append(pull_of(conn, answer, entity, list_name))
    print("  relation stop words (as asked / without them, the same vector):")
    for group, pulls in groups.items():
        sizes = np.array([p.sizes for p in pulls], dtype=np.float64)
        ranks = np.array([p.entity_ranks for p in pulls], dtype=np.float64)
        print(
            f"    {group} ({len(pulls)} questions): tags list {sizes[:, 0].mean():.1f} / {sizes[:, 1].mean():.1f}"
            f" records (largest {int(np.max(sizes[:, 0]))}); the named entity's median rank there"
            f" {median_rank(ranks[:, 0])} / {median_rank(ranks[:, 1])}; R@10"
            f" {np.mean([p.at_10[0] for p in pulls]):.3f} / {np.mean([p.at_10[1] for p in pulls]):.3f}, R@30"
            f" {np.mean([p.at_30[0] for p in pulls]):.3f} / {np.mean([p.at_30[1] for p in pulls]):.3f}"
        )


def median_rank(ranks: np.ndarray) -> str:
    """The median of the ranks where the record is in the list, and in how many it is."""
    present = ranks[~np.isnan(ranks)]
    median = f"{np.median(present):.0f}" if len(present) else "-"
    return f"{median} (in {len(present)} of {len(ranks)})"


def rank_or_nan(rank: int | None) -> float:
    return float("nan") if rank is None else float(rank)
