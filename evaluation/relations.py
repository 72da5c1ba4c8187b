"""The `relations` corpus: relations named with stop words (`about`, `for`, `with`,
`over`), as people name them, beside tags made only of stop words (`won`, `to do`, `off`, `on`,
`out`). Call notes, support tickets and internal memos are linked `about` the company, product or
topic they concern (some three hundred such edges), tasks `for` a client, deals `with` one,
disputes `over` an invoice; deals, tasks, printers and supplies carry their state as a tag. An
entity carries its name as a tag in its kind's namespace (`company:kestrel`).

Question types:
- stopword_incidental: the stop word is only grammar ("What do we know about Kestrel?", "What
  are we preparing for Lumaro?"); the evidence is the entity the question names and the records
  linked to it by that relation, not every end of every `about` edge. On a topic, the stop word
  names another relation than the one that links the evidence ("What is the plan for the
  budget?": the memos `about` the budget; `for` links tasks to clients);
- stopword_point: the stop-word tag is what is asked ("Which deals have we won?"), alone or with
  a relation ("Which deals with Lumaro have we won?", "What is still to do for Lumaro?").

Each question's `roles` say `entity` (the entity named), `edge` (linked to it by the relation) or
`tag` (carries the stop-word tag asked for).
"""

import random

from corpus import Corpus, Question

# The relations named by a stop word (misses.py measures what they pull into the tags list).
ABOUT, FOR, WITH, OVER = STOP_WORD_RELATIONS = ("about", "for", "with", "over")

COMPANIES = [
    "Kestrel",
    "Lumaro",
    "Vextel",
    "Orbisa",
    "Kandor",
    "Trivio",
    "Meltra",
    "Sonvik",
    "Pradex",
    "Quillon",
    "Dravo",
    "Halcyon",
    "Ostrava Foods",
    "Brightmill",
    "Corvane",
    "Nordlicht",
    "Pemberly",
    "Saltire",
    "Tamarind",
    "Zephyra",
]
SECTORS = ["logistics", "retail", "banking", "manufacturing", "healthcare", "media", "energy", "farming"]
PRODUCTS = [
    "Orion router",
    "Atlas scanner",
    "Nimbus tablet",
    "Vega headset",
    "Titan server",
    "Lyra printer",
    "Pulse tracker",
    "Quanta drive",
    "Helix dock",
    "Sable keyboard",
    "Terra hub",
    "Aero camera",
    "Polar display",
    "Echo speaker",
    "Flux charger",
    "Comet mouse",
    "Ridge laptop",
    "Mira phone",
    "Delta switch",
    "Zeno watch",
]
TOPICS = [
    "budget",
    "hiring",
    "office move",
    "security training",
    "travel policy",
    "pension plan",
    "parking",
    "canteen",
    "bike scheme",
    "remote work",
    "holiday calendar",
    "laptop refresh",
    "expense rules",
    "fire safety",
    "recycling",
    "mentoring",
    "language classes",
    "health checks",
    "car pool",
    "visitor badges",
]
CALL_NOTES = [
    "{they} want the renewal moved to {month}.",
    "{they} asked for a second training day for new staff.",
    "{they} complained that the last report came late.",
    "{they} are happy with the pilot and want to extend it.",
    "{they} are looking at a competitor's offer, price is the issue.",
    "{they} need the contract in German as well.",
]
MONTHS = ["March", "May", "June", "September", "October", "November"]
ISSUES = [
    "overheats after an hour of use",
    "loses its settings after a restart",
    "arrived with a cracked case",
    "will not pair with the new laptops",
    "drains its battery overnight",
    "makes a clicking noise",
]
# Questions on a topic with a stop word that names another relation than `about`, which links the memos.
ON_TOPIC = ["What is the plan for the {x}?", "What is happening with the {x}?", "Any disagreement over the {x}?"]
MEMO_POINTS = [
    "the proposal goes to the board in spring",
    "comments are welcome until Friday",
    "the old rules stay until the new ones are signed",
    "a survey of all staff comes first",
    "the works council has to agree",
    "the costs are shared between the two sites",
    "a pilot with one team runs first",
    "the details follow in the staff newsletter",
]
TASKS = [
    "prepare the renewal quote",
    "send the signed contract",
    "book the kick-off workshop",
    "translate the user guide",
    "check the delivery address",
    "update the price list",
]
# (the records' tag, their content, how many carry each state tag, the questions by state)
STATES = [
    (
        "printer",
        "Printer {n} on floor {f}, serviced by the facilities team.",
        {"off": 6, "on": 10},
        {"off": "Which printers are off?", "on": "Which printers are on?"},
    ),
    (
        "supply",
        "Supply shelf {n} in store room {f}: paper, toner and staples.",
        {"out": 5, "low": 9},
        {"out": "Which supplies are out?"},
    ),
]
DISPUTES = [
    "the client contests the hours billed for the migration",
    "the client says the licences were never delivered",
    "the client refuses the travel costs",
    "the client claims a discount was agreed by phone",
]


def build_relations_corpus(seed: int = 11) -> Corpus:
    rng = random.Random(f"relations-{seed}")
    corpus = Corpus()
    companies = {name: entity(corpus, "company", name, company_text(rng, name)) for name in COMPANIES}
    products = {
        name: entity(corpus, "product", name, f"The {name} is one of our hardware products.") for name in PRODUCTS
    }
    topics = {topic: entity(corpus, "topic", topic, f"Internal topic: the {topic}.") for topic in TOPICS}
    about_companies(rng, corpus, companies)
    about_products(rng, corpus, products)
    about_topics(rng, corpus, topics)
    tasks_for(rng, corpus, companies)
    deals_with(rng, corpus, companies)
    disputes_over(rng, corpus, companies)
    states(rng, corpus)
    return corpus


def slug(name: str) -> str:
    return name.lower().replace(" ", "-")


def add(corpus: Corpus, key: str, content: str, tags: list[str], kind: str = "note") -> str:
    corpus.records.append({"key": key, "kind": kind, "tags": tags, "content": content})
    return key


def entity(corpus: Corpus, kind: str, name: str, content: str) -> str:
    """An entity record, tagged with its kind and its name in the kind's namespace (`company:kestrel`)."""
    return add(corpus, f"{kind}:{slug(name)}", content, [kind, f"{kind}:{slug(name)}"], "entity")


def company_text(rng: random.Random, name: str) -> str:
    return f"{name} is a {rng.choice(SECTORS)} company and our client since {rng.randint(2012, 2023)}."


def linked(corpus: Corpus, records: list[str], relation: str, target: str) -> dict[str, str]:
    """Each record linked to the target by the relation; their roles for a question."""
    for key in records:
        corpus.edges.append((key, target, relation, {}))
    return {target: "entity", **dict.fromkeys(records, "edge")}


def ask(corpus: Corpus, kind: str, text: str, roles: dict[str, str]) -> None:
    corpus.questions.append(Question(kind, text, set(roles), roles))


def about_companies(rng: random.Random, corpus: Corpus, companies: dict[str, str]) -> None:
    """Four call notes about each client, half of them without its name."""
    asked = ["What do we know about {x}?", "Any news about {x}?", "Tell me about {x}.", "What are the notes about {x}?"]
    for name, company in companies.items():
        notes = [
            add(
                corpus,
                f"call:{slug(name)}:{i}",
                "Call notes: " + text.format(they=name if i % 2 else "They", month=rng.choice(MONTHS)),
                ["call notes"],
            )
            for i, text in enumerate(rng.sample(CALL_NOTES, 4))
        ]
        ask(corpus, "stopword_incidental", rng.choice(asked).format(x=name), linked(corpus, notes, ABOUT, company))


def about_products(rng: random.Random, corpus: Corpus, products: dict[str, str]) -> None:
    """Six support tickets about each product, half of them without its name."""
    asked = ["What do customers say about the {x}?", "Which complaints about the {x} came in?"]
    for name, product in products.items():
        tickets = [
            add(
                corpus,
                f"ticket:{slug(name)}:{i}",
                f"Support ticket: the {name if i % 2 else 'device'} {issue}.",
                ["ticket"],
            )
            for i, issue in enumerate(rng.sample(ISSUES, 6))
        ]
        ask(corpus, "stopword_incidental", rng.choice(asked).format(x=name), linked(corpus, tickets, ABOUT, product))


def about_topics(rng: random.Random, corpus: Corpus, topics: dict[str, str]) -> None:
    """Five internal memos about each topic, half of them without its name, asked for with a stop
    word that names another relation (`for`, `with`, `over`)."""
    for n, (topic, entity_key) in enumerate(topics.items()):
        memos = [
            add(corpus, f"memo:{slug(topic)}:{i}", f"Memo{f' on the {topic}' if i % 2 else ''}: {point}.", ["memo"])
            for i, point in enumerate(rng.sample(MEMO_POINTS, 5))
        ]
        question = ON_TOPIC[n % len(ON_TOPIC)].format(x=topic)
        ask(corpus, "stopword_incidental", question, linked(corpus, memos, ABOUT, entity_key))


def tasks_for(rng: random.Random, corpus: Corpus, companies: dict[str, str]) -> None:
    """Three tasks for each client; eight clients have one still `to do`, the rest are `done`."""
    pending = set(rng.sample(sorted(companies), 8))
    to_do_anywhere: dict[str, str] = {}
    for name, company in companies.items():
        tasks = []
        for i, task in enumerate(rng.sample(TASKS, 3)):
            state = "to do" if name in pending and i == 0 else "done"
            tasks.append(add(corpus, f"task:{slug(name)}:{i}", f"Task: {task}.", ["task", state]))
            if state == "to do":
                to_do_anywhere[tasks[-1]] = "tag"
        ask(corpus, "stopword_incidental", f"What are we preparing for {name}?", linked(corpus, tasks, FOR, company))
        if name in pending:
            ask(corpus, "stopword_point", f"What is still to do for {name}?", {company: "entity", tasks[0]: "tag"})
    ask(corpus, "stopword_point", "Which tasks are still to do?", to_do_anywhere)


def deals_with(rng: random.Random, corpus: Corpus, companies: dict[str, str]) -> None:
    """Three deals with each client; eight of them `won`, the rest `lost` or `open`."""
    winners = set(rng.sample(sorted(companies), 8))
    won_anywhere: dict[str, str] = {}
    for name, company in companies.items():
        deals = []
        for i in range(3):
            state = "won" if name in winners and i == 0 else rng.choice(["lost", "open"])
            deals.append(
                add(
                    corpus,
                    f"deal:{slug(name)}:{i}",
                    f"Deal for {rng.randint(5, 500)} licences, reviewed in week {rng.randint(2, 50)}.",
                    ["deal", state],
                )
            )
            if state == "won":
                won_anywhere[deals[-1]] = "tag"
        ask(
            corpus,
            "stopword_incidental",
            f"Which deals do we have with {name}?",
            linked(corpus, deals, WITH, company),
        )
        if name in winners:
            ask(corpus, "stopword_point", f"Which deals with {name} have we won?", {company: "entity", deals[0]: "tag"})
    ask(corpus, "stopword_point", "Which deals have we won?", won_anywhere)


def disputes_over(rng: random.Random, corpus: Corpus, companies: dict[str, str]) -> None:
    """Twelve disputes, each over an invoice of a client (and about the client)."""
    for n, name in enumerate(rng.sample(sorted(companies), 12)):
        code = f"INV-{70000 + 13 * n + rng.randint(0, 12)}"
        invoice = add(
            corpus,
            f"invoice:{code}",
            f"Invoice {code} to {name}: {rng.randint(2, 90)},{rng.randint(100, 999)}.00 EUR.",
            ["invoice"],
        )
        dispute = add(corpus, f"dispute:{code}", f"Dispute: {rng.choice(DISPUTES)}.", ["dispute"])
        corpus.edges.append((dispute, invoice, OVER, {}))
        corpus.edges.append((dispute, companies[name], ABOUT, {}))
        ask(
            corpus,
            "stopword_incidental",
            f"What is the dispute over {code} about?",
            {invoice: "entity", dispute: "edge"},
        )


def states(rng: random.Random, corpus: Corpus) -> None:
    """Printers that are `on` or `off` and supplies that are `out` or `low`, by tag only."""
    for kind, content, counts, questions in STATES:
        held: dict[str, dict[str, str]] = {state: {} for state in counts}
        for state, count in counts.items():
            for i in range(count):
                text = content.format(n=rng.randint(1, 60), f=rng.randint(1, 6))
                held[state][add(corpus, f"{kind}:{state}:{i}", text, [kind, state])] = "tag"
        for state, question in questions.items():
            ask(corpus, "stopword_point", question, held[state])
