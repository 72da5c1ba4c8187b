"""The `records` corpus: a company's system of record in which what a key means lives
elsewhere than the record that holds the key. Vendors, employees and projects are entity records;
purchase orders and invoices are tagged notes linked to them and to each other by edges; four
channels of team chat (procurement, finance, site operations, projects) are untagged threads
whose turns name people by their first name.

Question types (the evidence: the record holding the key, and its context):
- xref_code: "What went wrong with PO-4471?" The order holds the code; what went wrong is told in
  a site-operations thread that names the vendor and the goods, never the code.
- xref_figure: "What did the 18,450.00 EUR invoice pay for?" The invoice holds the figure; the
  order it settles (an edge without properties) says what was bought.
- xref_name: "What is Halina Dudek working on?" The employee's entity record holds the full
  name; the project is an entity linked by a `leads` edge, and its status is a turn in the
  projects channel where she is "Halina", a name on dozens of turns. Or "What did Marek Wrona
  sign off?": the orders linked to the employee by `approved` edges.

Each question's `roles` say where each piece of evidence is: `key`, `edge` (linked to the key
record), `other thread` (in a thread, the key record in none or another).
"""

import random
from collections import Counter
from typing import Any

from corpus import Corpus, Question
from dialogue import add_turn

Turn = tuple[str, str, Question | None]  # speaker (or a part: "site", "lead", "any"), text, question

VENDOR_STEMS = ["North", "Kestrel", "Tide", "Axiom", "Brig", "Cobalt", "Dun", "Elm", "Fen", "Gale"]
VENDOR_ENDS = ["gate", "field", "water", "line", "stone"]
VENDOR_KINDS = ["Supply", "Systems", "Trading", "Works"]
GOODS = [
    "office chairs",
    "standing desks",
    "laptops",
    "monitors",
    "forklift batteries",
    "safety boots",
    "pallet racks",
    "air purifiers",
    "network switches",
    "label printers",
    "first-aid kits",
    "floor scrubbers",
]
PROBLEMS = [
    ("arrived damaged, half of them unusable", "hold the payment until they replace the damaged ones"),
    ("came two weeks late and without the delivery note", "charge them the late-delivery penalty from the contract"),
    ("turned out to be last year's model", "send them back and ask for the model we ordered"),
    ("failed the safety inspection at the warehouse", "stop using them until the vendor's engineer checks them"),
    ("were short by a third of the quantity", "pay only for what arrived and reorder the rest"),
    ("came in the wrong size", "keep a few for spares and return the rest"),
]
FIRST_NAMES = [
    "Halina",
    "Marek",
    "Ilona",
    "Bartek",
    "Dorota",
    "Wiktor",
    "Zofia",
    "Radek",
    "Ewelina",
    "Tomek",
    "Agata",
    "Kuba",
    "Monika",
    "Piotr",
    "Lidia",
    "Szymon",
]
SURNAMES = ["Dudek", "Wrona", "Sadowska", "Kaczmarek", "Lis", "Mazur", "Nowak", "Zielinska", "Pawlak", "Krol"]
ROLES = ["facilities lead", "procurement officer", "finance controller", "site manager", "project manager"]
SITES = ["Gdansk", "Lodz", "Poznan", "Wroclaw"]
PROJECTS = {
    "aurora": "moving the Lodz warehouse to the new building",
    "beacon": "replacing the payroll system",
    "comet": "opening the Poznan service desk",
    "delta": "fitting solar panels on the Gdansk roof",
    "echo": "rolling out the new phone system",
    "falcon": "merging the two Wroclaw offices",
    "granite": "renewing the fire safety certificates",
    "harvest": "digitising the paper archive",
}
STATUS = [
    "{project} is at sixty percent, the last floor goes next week.",
    "{project} slipped a fortnight, we are waiting for the electricians.",
    "{project}: the steering group signed off the second phase today.",
    "{project} is done apart from the handover documents.",
    "{project} needs another 20k, I'll bring it to the budget meeting.",
]
CHATTER = {
    "procurement": [
        "Raised {code} for {qty} {goods} from {vendor}.",
        "Can someone approve {code}? It's for {goods}.",
        "{vendor} sent a new price list, {goods} went up again.",
        "I compared three quotes for {goods}, {vendor} is cheapest.",
        "The framework contract with {vendor} ends in June.",
    ],
    "finance": [
        "{invoice} from {vendor} is paid.",
        "Who owns the cost centre for {goods}?",
        "Month-end close is on Thursday, please submit expenses.",
        "{vendor} asks about {invoice}, is it approved?",
        "The auditors want every invoice above 10k scanned.",
    ],
    "site-ops": [
        "The {goods} from {vendor} arrived and look fine.",
        "The loading dock is closed on Friday for repairs.",
        "Can someone sign for the {goods} delivery at gate two?",
        "Fire drill at ten tomorrow, everyone out to the car park.",
        "The lift in block B is out of order again.",
    ],
    "projects": [
        "Steering group moved to Wednesday.",
        "Please update the risk log before the review.",
        "Who has the latest plan for {project}?",
        "The {project} budget review is next month.",
        "I'll share the slides after the call.",
    ],
}
REPLIES = ["Thanks.", "Noted.", "OK, will do.", "On it.", "Good, thanks for checking.", "Let me look into it."]


def build_records_corpus(seed: int = 11, vendors: int = 20, orders_per_vendor: int = 12) -> Corpus:
    rng = random.Random(f"records-{seed}")
    corpus = Corpus()
    people = add_people(rng, corpus)
    projects = add_projects(corpus)
    names = vendor_names(rng, vendors)
    codes = iter(rng.sample(range(1000, 10000), vendors * orders_per_vendor))
    nets = iter(rng.sample(range(1000, 90000), vendors * orders_per_vendor))  # distinct: so are the invoices
    orders: list[dict[str, Any]] = []
    for name in names:
        orders += add_vendor(rng, corpus, name, projects, [(next(codes), next(nets)) for _ in range(orders_per_vendor)])
    invoices = add_invoices(rng, corpus, orders)
    # Segments of the channels' threads (lists of turns: speaker, text, the question they answer).
    channels: dict[str, list[list[Turn]]] = {channel: [] for channel in CHATTER}
    asked = ask_about_orders(rng, corpus, orders, channels["site-ops"])
    asked |= ask_about_invoices(rng, corpus, invoices)
    ask_about_people(rng, corpus, people, projects, orders, channels["projects"])
    unasked_orders = [order for order in orders if order["key"] not in asked]
    unasked_invoices = [invoice for invoice in invoices if invoice["key"] not in asked]
    write_channels(rng, corpus, channels, people, names, unasked_orders, unasked_invoices)
    return corpus


def vendor_names(rng: random.Random, count: int) -> list[str]:
    names = sorted({f"{stem}{end} {kind}" for stem in VENDOR_STEMS for end in VENDOR_ENDS for kind in VENDOR_KINDS})
    return rng.sample(names, count)


def slug(name: str) -> str:
    return name.lower().replace(" ", "-")


def record(corpus: Corpus, key: str, kind: str, content: str, tags: list[str]) -> str:
    corpus.records.append({"key": key, "kind": kind, "tags": tags, "content": content})
    return key


def add_people(rng: random.Random, corpus: Corpus) -> list[dict[str, str]]:
    people = []
    for first in FIRST_NAMES:
        person = {"first": first, "name": f"{first} {rng.choice(SURNAMES)}", "site": rng.choice(SITES)}
        person["key"] = record(
            corpus,
            f"person:{slug(person['name'])}",
            "entity",
            f"{person['name']} is the {rng.choice(ROLES)} at the {person['site']} site.",
            ["person", f"site:{person['site'].lower()}"],
        )
        people.append(person)
    return people


def add_projects(corpus: Corpus) -> dict[str, str]:
    return {
        project: record(
            corpus,
            f"project:{project}",
            "entity",
            f"Project {project.capitalize()}: {topic}.",
            ["project", f"project {project}"],
        )
        for project, topic in PROJECTS.items()
    }


def add_vendor(
    rng: random.Random, corpus: Corpus, name: str, projects: dict[str, str], numbers: list[tuple[int, int]]
) -> list[dict[str, Any]]:
    """The vendor's entity record and its orders (each a code and a net figure of `numbers`)."""
    vendor = record(
        corpus,
        f"vendor:{slug(name)}",
        "entity",
        f"{name} is a supplier of {', '.join(rng.sample(GOODS, 3))}.",
        ["vendor", f"vendor:{slug(name)}"],
    )
    orders = []
    for number, net in numbers:
        project = rng.choice(sorted(projects))
        order: dict[str, Any] = {
            "code": f"PO-{number}",
            "vendor": name,
            "goods": rng.choice(GOODS),
            "qty": rng.randint(4, 240),
            "net": net,
            "project": project,
        }
        order["key"] = record(
            corpus,
            f"order:{order['code']}",
            "note",
            f"Purchase order {order['code']}: {order['qty']} {order['goods']} from {name}, "
            f"{order['net']:,}.00 EUR net, charged to project {project.capitalize()}.",
            ["purchase order", f"vendor:{slug(name)}", f"project {project}"],
        )
        corpus.edges.append((order["key"], vendor, "supplied by", {}))
        corpus.edges.append((order["key"], projects[project], "charged to", {}))
        orders.append(order)
    return orders


def add_invoices(rng: random.Random, corpus: Corpus, orders: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An invoice for every other order, its gross figure (net + 23% VAT) on the invoice only."""
    invoices = []
    for n, order in enumerate(rng.sample(orders, len(orders) // 2)):
        invoice: dict[str, Any] = {
            "code": f"INV-{50000 + 7 * n + rng.randint(0, 6)}",
            "gross": f"{order['net'] * 1.23:,.2f}",
        }
        invoice["key"] = record(
            corpus,
            f"invoice:{invoice['code']}",
            "note",
            f"Invoice {invoice['code']} from {order['vendor']}: {invoice['gross']} EUR, "
            f"due in {rng.choice([14, 30, 45])} days.",
            ["invoice", f"vendor:{slug(order['vendor'])}"],
        )
        corpus.edges.append((invoice["key"], order["key"], "settles", {}))
        invoice["order"] = order
        invoices.append(invoice)
    return invoices


def ask_about_orders(
    rng: random.Random, corpus: Corpus, orders: list[dict[str, Any]], site_ops: list[list[Turn]]
) -> set[str]:
    """Orders whose delivery went wrong, told in site operations by vendor and goods only: of
    goods no other order has from that vendor, so that the turns can mean this order only."""
    pairs = Counter((order["vendor"], order["goods"]) for order in orders)
    chosen = rng.sample([order for order in orders if pairs[order["vendor"], order["goods"]] == 1], 48)
    for order in chosen:
        problem, decision = rng.choice(PROBLEMS)
        question = Question(
            "xref_code",
            rng.choice(
                ["What went wrong with {code}?", "Is there a problem with {code}?", "What happened to {code}?"]
            ).format(code=order["code"]),
            {order["key"]},
            {order["key"]: "key"},
        )
        corpus.questions.append(question)
        site_ops.append(
            [
                ("site", f"The {order['goods']} from {order['vendor']} {problem}.", question),
                ("any", rng.choice(["What do we do?", "Again?", "Not great.", "Who ordered those?"]), None),
                ("lead", f"Then we {decision}.", question),
            ]
        )
    return {order["key"] for order in chosen}


def ask_about_invoices(rng: random.Random, corpus: Corpus, invoices: list[dict[str, Any]]) -> set[str]:
    chosen = rng.sample(invoices, 48)
    for invoice in chosen:
        order = invoice["order"]
        corpus.questions.append(
            Question(
                "xref_figure",
                rng.choice(
                    ["What did the {x} EUR invoice pay for?", "What was the {x} EUR for?", "{x} EUR: what for?"]
                ).format(x=invoice["gross"]),
                {invoice["key"], order["key"]},
                {invoice["key"]: "key", order["key"]: "edge"},
            )
        )
    return {invoice["key"] for invoice in chosen}


def ask_about_people(
    rng: random.Random,
    corpus: Corpus,
    people: list[dict[str, str]],
    projects: dict[str, str],
    orders: list[dict[str, Any]],
    projects_channel: list[list[Turn]],
) -> None:
    """Each project led by one employee (a `leads` edge), its status told by the lead's first
    name; every other employee approved three orders (`approved` edges)."""
    leads = rng.sample(people, len(projects))
    for person, project in zip(leads, sorted(projects), strict=True):
        corpus.edges.append((person["key"], projects[project], "leads", {}))
        question = Question(
            "xref_name",
            rng.choice(["What is {name} working on?", "What is {name}'s project and how is it going?"]).format(
                name=person["name"]
            ),
            {person["key"], projects[project]},
            {person["key"]: "key", projects[project]: "edge"},
        )
        corpus.questions.append(question)
        status = rng.choice(STATUS).format(project=project.capitalize())
        projects_channel.append([(person["first"], status, question)])
    approvers = [person for person in people if person not in leads]
    approved = iter(rng.sample(orders, 3 * len(approvers)))
    for person in approvers:
        signed = [next(approved) for _ in range(3)]
        for order in signed:
            corpus.edges.append((person["key"], order["key"], "approved", {}))
        corpus.questions.append(
            Question(
                "xref_name",
                rng.choice(["What did {name} sign off?", "Which orders has {name} signed off?"]).format(
                    name=person["name"]
                ),
                {person["key"], *(order["key"] for order in signed)},
                {person["key"]: "key", **{order["key"]: "edge" for order in signed}},
            )
        )


def write_channels(
    rng: random.Random,
    corpus: Corpus,
    channels: dict[str, list[list[Turn]]],
    people: list[dict[str, str]],
    vendors: list[str],
    orders: list[dict[str, Any]],
    invoices: list[dict[str, Any]],
) -> None:
    """Each channel as threads of about 25 turns: its segments (the context of questions) spread
    over the threads, among the channel's everyday chatter; windows of 3 turns."""
    threads_per_channel = 8
    for channel, segments in channels.items():
        rng.shuffle(segments)
        for t in range(threads_per_channel):
            thread = f"{channel}-{t}"
            crew = rng.sample(people, 5)
            turns: list[Turn] = []
            for segment in segments[t::threads_per_channel]:
                turns += chatter(rng, channel, crew, vendors, orders, invoices, rng.randint(2, 4))
                site, lead = rng.sample(crew, 2)
                speakers = {"site": site["first"], "lead": lead["first"], "any": rng.choice(crew)["first"]}
                turns += [(speakers.get(who, who), text, question) for who, text, question in segment]
            turns += chatter(rng, channel, crew, vendors, orders, invoices, max(2, 25 - len(turns)))
            keys = []
            for position, (speaker, text, question) in enumerate(turns):
                key = add_turn(corpus, thread, position, speaker, text)
                if question is not None:
                    question.gold.add(key)
                    question.roles[key] = "other thread"
                keys.append(key)
            corpus.windows.extend(keys[i : i + 3] for i in range(len(keys) - 2))


def chatter(
    rng: random.Random,
    channel: str,
    crew: list[dict[str, str]],
    vendors: list[str],
    orders: list[dict[str, Any]],
    invoices: list[dict[str, Any]],
    count: int,
) -> list[Turn]:
    """Everyday turns of a channel; the codes they name are of orders and invoices no question
    asks about (a question's key is on its key record only)."""
    turns: list[Turn] = []
    for _ in range(count):
        order, invoice = rng.choice(orders), rng.choice(invoices)
        line = rng.choice(CHATTER[channel] + REPLIES).format(
            code=order["code"],
            qty=order["qty"],
            goods=order["goods"],
            vendor=rng.choice(vendors),
            invoice=invoice["code"],
            project=rng.choice(sorted(PROJECTS)).capitalize(),
        )
        turns.append((rng.choice(crew)["first"], line, None))
    return turns
