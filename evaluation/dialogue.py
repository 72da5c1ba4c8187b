"""The evaluation's conversation part: long conversations of several speakers, who are named in
the text ("Zofia: ..."), without tags, and their question types:

- speaker: what one speaker said about a topic (the speaker's name is on many turns);
- modal: "Would Marek enjoy ...?", among turns that say "would", "could", "whose" (words WordNet
  does not know, which must not be searched as rare names);
- thread: what was decided about an invoice, in turns that do not repeat its number.
"""

import random

from corpus import Corpus, Question

SPEAKERS = [
    "Zofia",
    "Marek",
    "Ilona",
    "Bartek",
    "Wiktor",
    "Halina",
    "Dorota",
    "Kuba",
    "Agnieszka",
    "Tomek",
    "Ewelina",
    "Radek",
]
ACTIVITIES = {
    "sailing": ["I love sailing; a weekend on the lake is my idea of rest.", "Give me wind and a small boat any day."],
    "hiking": [
        "Mountain trails are my thing, the longer the walk the better.",
        "I packed my boots for the ridge walk.",
    ],
    "cooking": ["I spend Sundays in the kitchen trying new recipes.", "My sourdough finally rose properly."],
    "cycling": ["I ride my bike to work even in the rain.", "Last weekend I did eighty kilometres on the road bike."],
    "climbing": ["Bouldering at the gym keeps me sane.", "I want to try the limestone crags this summer."],
    "chess": ["I play blitz chess online every evening.", "I finally beat my brother at chess with the Sicilian."],
    "gardening": ["My tomatoes are finally turning red in the garden.", "I planted lavender along the fence."],
    "photography": ["I took my camera to the old town at sunrise.", "Film photography is slow but I love it."],
}
TOPICS = {
    "venue": [
        "The conference hall by the river holds two hundred people.",
        "The hotel ballroom is cheaper but has no daylight.",
        "We should book the rooftop space before it is gone.",
    ],
    "catering": [
        "The caterer can do a vegetarian buffet for everyone.",
        "Lunch boxes are easier than a sit-down meal.",
        "Coffee breaks need pastries, people always ask for them.",
    ],
    "travel": [
        "Most of the team can take the morning train.",
        "Flights from the north office are expensive this month.",
        "A shared bus from the airport would save money.",
    ],
    "hiring": [
        "We have three strong candidates for the backend role.",
        "The designer interview is moved to Thursday.",
        "Referral bonuses brought us most of the good applicants.",
    ],
    "budget": [
        "The budget for the quarter is almost spent.",
        "Finance wants every expense above a thousand approved.",
        "We could move some spending to next year.",
    ],
    "schedule": [
        "The launch slips by a week because of testing.",
        "Let us keep Fridays free of meetings.",
        "The release freeze starts on the twentieth.",
    ],
}
DECISIONS = [
    "We agreed to split it between marketing and engineering.",
    "Fine, half of it goes on this quarter and half on the next.",
    "Then we dispute the extra hours and pay the rest.",
    "Let us ask them for a discount before we pay.",
    "I will approve it once the delivery note arrives.",
    "Put it on the support budget, that is where it belongs.",
]
REACTIONS = [
    "That is more than we planned for.",
    "Hm, I expected a lower figure.",
    "That seems about right for the work done.",
]
FILLERS = [
    "That would work for me.",
    "Whose turn is it to book the room?",
    "We could also ask finance.",
    "Sounds good.",
    "Let me check my calendar.",
    "I would wait until Monday.",
    "Could you send the notes afterwards?",
    "Agreed.",
    "Whose laptop is this?",
    "I might be late tomorrow.",
]
VENDORS = ["Brightline", "Kestrel Systems", "Northgate", "Polaris Print", "Tidewater", "Axiom Labs"]


def add_dialogue_part(rng: random.Random, corpus: Corpus, conversations: int = 6, speakers: int = 5) -> None:
    invoice = 31_000
    activities = list(ACTIVITIES)
    rng.shuffle(activities)
    for c in range(conversations):
        people = rng.sample(SPEAKERS, speakers)
        segments: list[tuple[str, list[tuple[str, str]], str]] = []  # (kind, turns, question)
        for n, fan in enumerate(people[:3]):
            activity = activities[(3 * c + n) % len(activities)]
            first, second = ACTIVITIES[activity]
            segments.append(("modal", [(fan, first), (fan, second)], f"Would {fan} enjoy a {activity} weekend?"))
        for topic in rng.sample(list(TOPICS), 4):
            talkers = rng.sample(people, 3)
            turns = list(zip(talkers, TOPICS[topic], strict=True))
            asked = talkers[0]
            segments.append(("speaker", turns, f"What did {asked} say about the {topic}?"))
        for _ in range(2):
            invoice += rng.randint(3, 90)
            code = f"INV-{invoice}"
            payer, *others = rng.sample(people, 3)
            amount = f"{rng.randint(2, 40)},{rng.randint(100, 999)}.00"
            turns = [(payer, f"Invoice {code} from {rng.choice(VENDORS)} came in at {amount} PLN.")]
            turns += [(others[0], rng.choice(REACTIONS))]
            turns += [(rng.choice(others), decision) for decision in rng.sample(DECISIONS, rng.randint(1, 3))]
            segments.append(("thread", turns, f"What did we decide about {code}?"))
        rng.shuffle(segments)
        thread = f"meeting-{c}"
        position = 0
        for kind, turns, question in segments:
            for _ in range(rng.randint(1, 4)):  # small talk between the subjects
                add_turn(corpus, thread, position, rng.choice(people), rng.choice(FILLERS))
                position += 1
            keys = []
            for speaker, text in turns:
                keys.append(add_turn(corpus, thread, position, speaker, text))
                position += 1
            gold = set(keys) if kind != "speaker" else {keys[0]}
            corpus.questions.append(Question(kind, question, gold))
        start = next(n for n, r in enumerate(corpus.records) if r.get("thread_id") == thread)
        keys = [r["key"] for r in corpus.records[start:]]
        corpus.windows.extend(keys[i : i + 3] for i in range(len(keys) - 2))


def add_turn(
    corpus: Corpus, thread: str, position: int, speaker: str, text: str, occurred_at: str | None = None
) -> str:
    key = f"turn:{thread}:{position}"
    record = {
        "key": key,
        "kind": "conversation",
        "thread_id": thread,
        "thread_position": position,
        "content": f"{speaker}: {text}",
        "tags": [],
    }
    if occurred_at is not None:
        record["occurred_at"] = occurred_at
    corpus.records.append(record)
    return key
