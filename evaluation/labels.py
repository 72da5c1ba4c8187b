"""The evaluation's label part: tags and edges as people write them, each ranking failure that
0.2.0's label matching fixed as its own question type, over near-duplicate records that vectors alone cannot tell apart.

- label_forms: a `key:value` tag asked for by its value ("for North Wind"), compound tags asked
  for in words ("sensors went offline" for `sensor-offline`, "Q3 2024" for `q3-2024`), words
  asked for in a compound, and plurals of words WordNet does not know (`runbook`, `webhooks`);
- stopword_label: tags made only of stop words (`won`, `to do`);
- edge_role: a person an edge's relation names (`release captain`), among records carrying the
  project's tag that match as many of the question's words.
"""

import random

from corpus import Corpus, Question

CUSTOMERS = {
    "north-wind": "North Wind",
    "blue-harbor": "Blue Harbor",
    "red-pine": "Red Pine",
    "silver-lake": "silver lake",
    "stone-bridge": "Stone Bridge",
    "green-valley": "green-valley",
}
PRODUCTS = ["oak flooring", "steel shelving", "office chairs", "glass panels", "copper cable", "ceramic tiles"]
CITIES = ["Gdansk", "Poznan", "Lodz", "Krakow", "Wroclaw", "Lublin"]
FIRST_NAMES = ["Ilona", "Marek", "Zofia", "Bartek", "Wiktor", "Halina", "Dorota", "Radek"]
SURNAMES = ["Nowak", "Wrona", "Sadowska", "Kaczmarek", "Lis", "Zielinska", "Mazur", "Dudek"]
# Projects of their own, so that the base corpus's project questions keep their candidates.
TEAM_PROJECTS = ["kestrel", "lynx", "marlin", "nimbus", "orion", "puma", "quasar", "raven"]
COMPANIES = ["Lumaro", "Vextel", "Orbisa", "Kandor", "Trivio", "Meltra", "Sonvik", "Pradex", "Quillon", "Dravo"]


def add_label_part(rng: random.Random, corpus: Corpus) -> None:
    add_customers(rng, corpus)
    add_compounds(rng, corpus)
    add_unknown_plurals(rng, corpus)
    add_stop_word_tags(rng, corpus)
    add_release_captains(rng, corpus)


def note(corpus: Corpus, key: str, content: str, tags: list[str], kind: str = "note") -> str:
    corpus.records.append({"key": key, "kind": kind, "tags": tags, "content": content})
    return key


def add_customers(rng: random.Random, corpus: Corpus) -> None:
    """Shipment notes that name the client only through a `customer:` tag."""
    asked = [
        "What did we ship for {name}?",
        "Which shipments went to {name}?",
        "Deliveries for customer {name}",
        "Show the {name} shipments",
        "What was sent to {name} last month?",
        "Which pallets did {name} receive?",
    ]
    for n, (tag, name) in enumerate(CUSTOMERS.items()):
        keys = [
            note(
                corpus,
                f"shipment:{tag}:{i}",
                f"Shipped {rng.randint(4, 60)} pallets of {rng.choice(PRODUCTS)} to the client's "
                f"{rng.choice(CITIES)} warehouse.",
                ["shipment", f"customer:{tag}"],
            )
            for i in range(4)
        ]
        corpus.questions.append(Question("label_forms", asked[n].format(name=name), set(keys)))


def add_compounds(rng: random.Random, corpus: Corpus) -> None:
    """Alerts, reports and orders whose compound tags tell them apart, asked for in words (and
    words asked for in a compound)."""
    groups = {
        "sensor-offline": ("Unit {n} in hall {h} stopped sending readings at {t}.", "Which sensors went offline?"),
        "sensor-online": ("Unit {n} in hall {h} resumed sending readings at {t}.", "Which sensor-online events?"),
        "battery-low": ("Unit {n} in hall {h} reports a weak battery at {t}.", None),
    }
    for tag, (text, question) in groups.items():
        keys = [
            note(
                corpus,
                f"alert:{tag}:{i}",
                text.format(n=rng.randint(10, 99), h=rng.randint(1, 9), t=f"{rng.randint(0, 23):02d}:{i}5"),
                ["alert", tag],
            )
            for i in range(4)
        ]
        if question:
            corpus.questions.append(Question("label_forms", question, set(keys)))
    quarters = {"q3-2024": "Show the revenue reports for Q3 2024", "q2-2024": "Q2/2024 revenue?", "q3-2023": None}
    for tag, question in quarters.items():
        keys = [
            note(
                corpus,
                f"report:{tag}:{i}",
                f"Quarterly revenue report: {rng.randint(100, 999)} thousand PLN from the "
                f"{rng.choice(['retail', 'wholesale', 'online', 'export'])} segment.",
                ["report", tag],
            )
            for i in range(4)
        ]
        if question:
            corpus.questions.append(Question("label_forms", question, set(keys)))
    orders = {"purchase-order": "Which purchase orders were approved?", "sales order": "Any sales-order approvals?"}
    for tag, question in orders.items():
        keys = [
            note(
                corpus,
                f"order:{tag}:{i}",
                f"Order {rng.randint(1000, 9999)}: {rng.randint(2, 40)} laptops for the design team, "
                f"approved by {rng.choice(FIRST_NAMES)}.",
                ["order", tag],
            )
            for i in range(4)
        ]
        corpus.questions.append(Question("label_forms", question, set(keys)))


def add_unknown_plurals(rng: random.Random, corpus: Corpus) -> None:
    """Operations documents tagged with words WordNet does not know, asked for in the other number."""
    groups = {
        "runbook": ("Steps to fail over the {x} database to the standby node.", "Which runbooks cover failover?"),
        "webhooks": ("The {x} service posts an event to the endpoint on every change.", "Which webhook posts events?"),
        "hotfix": ("Patched the {x} service in production outside the release train.", "List the hotfixes"),
        "changelogs": ("Version notes for the {x} service, one line per change.", "Where is the changelog?"),
    }
    for tag, (text, question) in groups.items():
        keys = [
            note(
                corpus,
                f"ops:{tag}:{i}",
                text.format(x=rng.choice(["billing", "search", "auth", "reporting", "upload"])),
                ["ops", tag],
            )
            for i in range(4)
        ]
        corpus.questions.append(Question("label_forms", question, set(keys)))


def add_stop_word_tags(rng: random.Random, corpus: Corpus) -> None:
    """Deals and tasks whose state is a tag made of stop words, beside look-alikes."""
    won = []
    for state in ("won", "lost", "open"):
        for i in range(6 if state == "won" else 10):
            key = note(
                corpus,
                f"deal:{state}:{i}",
                f"Deal with {rng.choice(COMPANIES)} for {rng.randint(5, 500)} licences, "
                f"reviewed in week {rng.randint(2, 50)}.",
                ["deal", state],
            )
            if state == "won":
                won.append(key)
    corpus.questions.append(Question("stopword_label", "Which deals have we won?", set(won)))
    to_do = []
    for state in ("to do", "done"):
        for i in range(5 if state == "to do" else 12):
            key = note(
                corpus,
                f"task:{state}:{i}",
                f"Task: {rng.choice(['update', 'review', 'archive', 'translate'])} the "
                f"{rng.choice(['pricing page', 'onboarding guide', 'contract template', 'support macros'])}.",
                ["task", state],
            )
            if state == "to do":
                to_do.append(key)
    corpus.questions.append(Question("stopword_label", "Which tasks are still to do?", set(to_do)))
    for state, count in (("off", 5), ("on", 8)):
        keys = [
            note(
                corpus,
                f"heater:{state}:{i}",
                f"Heater {rng.randint(1, 60)} on floor {rng.randint(1, 6)}, checked by the facilities team.",
                ["heater", state],
            )
            for i in range(count)
        ]
        corpus.questions.append(Question("stopword_label", f"Which heaters are {state}?", set(keys)))


def add_release_captains(rng: random.Random, corpus: Corpus) -> None:
    """A person linked to each project by a `release captain` edge, among many records tagged
    with the project: the question's words match both as often."""
    for n, project in enumerate(TEAM_PROJECTS):
        entity = note(
            corpus,
            f"team-project:{project}",
            f"Project {project.capitalize()}: an internal platform of the engineering team.",
            ["project", f"project {project}"],
            kind="entity",
        )
        for i in range(12):
            note(
                corpus,
                f"release-note:{project}:{i}",
                f"Release {n + 1}.{i} of {project.capitalize()}: fixed {rng.choice(['timeouts', 'typos', 'leaks'])} "
                f"and updated {rng.choice(['dependencies', 'translations', 'icons'])}.",
                [f"project {project}"],
            )
        person = note(
            corpus,
            f"person:{project}",
            f"{FIRST_NAMES[n]} {SURNAMES[n]} is an engineer in the platform team.",
            ["person"],
            kind="entity",
        )
        relation = "release captain" if n % 2 else "release_captain"
        corpus.edges.append((person, entity, relation, {}))
        corpus.questions.append(
            Question("edge_role", f"Who is the release captain for project {project.capitalize()}?", {person})
        )
