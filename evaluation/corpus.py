"""A generated corpus for the evaluation: near-duplicate invoices with exact codes, figures,
vendor names, labels and edges; project notes; conversations; and questions with gold records.
labels.py adds labels as people write them, dialogue.py long conversations of named speakers.

Everything is drawn from one seeded random generator, so a run is repeatable.
"""

import random
from dataclasses import dataclass, field
from typing import Any

SYLLABLES = ["zor", "bla", "kwi", "tex", "mon", "dra", "vel", "quo", "rin", "sal", "pex", "tur", "gan", "lio"]
PROJECTS = ["apollo", "borealis", "cascade", "dynamo", "ember", "fjord", "glacier", "harbor"]
SERVICES = [
    "cloud hosting",
    "database support",
    "security audit",
    "data migration",
    "network upgrade",
    "backup storage",
    "license renewal",
    "on-call support",
]
TOPICS = {
    "apollo": "moving the billing system to the new data centre",
    "borealis": "replacing the customer support chat tool",
    "cascade": "splitting the monolith into smaller services",
    "dynamo": "speeding up the nightly reporting jobs",
    "ember": "hardening the login flow against attacks",
    "fjord": "archiving old documents to cheaper storage",
    "glacier": "cutting cloud costs for the analytics team",
    "harbor": "rolling out laptops to the new office",
}
PARAPHRASES = {
    "apollo": "Which effort relocates invoicing to another datacenter?",
    "borealis": "What work swaps out the help desk messaging software?",
    "cascade": "Which initiative breaks the big application into microservices?",
    "dynamo": "What project makes overnight reports run faster?",
    "ember": "Which effort makes sign-in safer from intruders?",
    "fjord": "What moves historic files into low-cost archives?",
    "glacier": "Which project lowers cloud spending for data analysts?",
    "harbor": "What distributes notebooks to staff at the new site?",
}


@dataclass
class Question:
    kind: str
    text: str
    gold: set[str]
    # Where each gold record stands towards the question's key, for the miss analysis (the
    # corpora shaped like real ones fill it: "key", "edge", "entity", "other thread", ...).
    roles: dict[str, str] = field(default_factory=dict)


@dataclass
class Corpus:
    records: list[dict[str, Any]] = field(default_factory=list)  # each with a unique "key"
    edges: list[tuple[str, str, str, dict[str, Any]]] = field(default_factory=list)
    windows: list[list[str]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def vendor_name(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize()


def build_corpus(seed: int = 11, vendors: int = 12, invoices_per_vendor: int = 10, extended: bool = True) -> Corpus:
    rng = random.Random(seed)
    corpus = Corpus()
    names = sorted({vendor_name(rng) for _ in range(vendors * 2)})[:vendors]
    for project in PROJECTS:
        corpus.records.append(
            {
                "key": f"project:{project}",
                "kind": "entity",
                "tags": ["project", f"project {project}"],
                "content": f"Project {project.capitalize()}: {TOPICS[project]}.",
            }
        )
        for i in range(3):
            corpus.records.append(
                {
                    "key": f"note:{project}:{i}",
                    "kind": "note",
                    "tags": [f"project {project}"],
                    "content": f"Status note {i + 1} on {project.capitalize()}: the team keeps "
                    f"{TOPICS[project]} on schedule; next review in week "
                    f"{rng.randint(2, 50)}.",
                }
            )
        corpus.questions.append(
            Question(
                "meaning", PARAPHRASES[project], {f"project:{project}"} | {f"note:{project}:{i}" for i in range(3)}
            )
        )
    number = 20_000
    for name in names:
        corpus.records.append(
            {
                "key": f"vendor:{name}",
                "kind": "entity",
                "tags": ["vendor", f"vendor:{name.lower()}"],
                "content": f"{name} is a supplier of IT services.",
            }
        )
        project = rng.choice(PROJECTS)
        for _ in range(invoices_per_vendor):
            number += rng.randint(1, 40)
            code = f"INV-{number}"
            amount = f"{rng.randint(100, 9999)},{rng.randint(100, 999)}.{rng.randint(10, 99)}"
            service = rng.choice(SERVICES)
            key = f"invoice:{code}"
            corpus.records.append(
                {
                    "key": key,
                    "kind": "note",
                    "tags": ["invoice", f"vendor:{name.lower()}", code.lower()],
                    "content": f"Invoice {code} from {name}: {service} for project "
                    f"{project.capitalize()}, {amount} EUR, payable in 30 days.",
                }
            )
            corpus.edges.append(
                (f"vendor:{name}", f"project:{project}", "billed", {"invoice": code, "amount": f"{amount} EUR"})
            )
            corpus.questions.append(Question("code", f"What is the status of {code}?", {key}))
            corpus.questions.append(Question("figure", f"Which invoice was for {amount} EUR?", {key}))
        vendor_invoices = {
            r["key"]
            for r in corpus.records
            if r["key"].startswith("invoice:") and f"vendor:{name.lower()}" in r["tags"]
        }
        corpus.questions.append(Question("name", f"Which invoices did {name} send us?", vendor_invoices))
        corpus.questions.append(
            Question(
                "label_edge", f"Who billed project {project} for {name}?", {f"vendor:{name}", f"project:{project}"}
            )
        )
    add_conversations(rng, corpus, names)
    if not extended:
        return corpus
    # The label and dialogue parts, added later, draw from their own generators: the parts above stay as they were.
    from dialogue import add_dialogue_part  # they build on this module's types
    from labels import add_label_part

    add_label_part(random.Random(seed + 1), corpus)
    add_dialogue_part(random.Random(seed + 2), corpus)
    return corpus


def add_conversations(rng: random.Random, corpus: Corpus, names: list[str]) -> None:
    for c, project in enumerate(PROJECTS):
        name = rng.choice(names)
        day = rng.randint(1, 28)
        turns = [
            f"Hi, can we talk about {project.capitalize()}?",
            "Sure, what is on your mind?",
            f"{name} asked to push the go-live to March {day}.",
            "That works if the vendor confirms in writing.",
            "I will ask them today and report back.",
            "Thanks, let us close this then.",
        ]
        keys = [f"turn:{c}:{i}" for i in range(len(turns))]
        for i, (key, text) in enumerate(zip(keys, turns, strict=True)):
            corpus.records.append(
                {
                    "key": key,
                    "kind": "conversation",
                    "thread_id": f"chat-{c}",
                    "thread_position": i,
                    "content": text,
                    "tags": [],
                }
            )
        corpus.windows.extend(keys[i : i + 3] for i in range(len(keys) - 2))
        corpus.questions.append(
            Question("conversation", f"When did {name} want {project.capitalize()} to go live?", {keys[2]})
        )
