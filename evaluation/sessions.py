"""The `sessions` corpus: long multi-session conversations without tags, shaped like
LoCoMo's. Each conversation is one thread of three or four friends chatting in dated sessions
over months; every turn says who speaks ("Zofia: ..."), so a speaker's name is on a hundred or
more turns. Facts are stated once (a pet, a relative, a job, trips, a hobby, life events) and
referred to later by a name alone ("Pretzel chewed through my charger"), among small talk that
shares their words.

Question types (the evidence is the turns a person needs to answer):
- single_hop: one turn states the answer ("What is the name of Zofia's dog?");
- multi_hop: two or more turns, sessions apart, none of them enough alone: a relative's news told
  by the relative's name only, asked for by the relation ("What is Zofia's brother training
  for?") or the other way round, and every trip of a speaker;
- temporal: when a dated event happened (the turn that tells it; its session's date is the
  turn's occurred_at), and which of two trips came first;
- open_domain: what a speaker would enjoy, from two hobby turns that share no word with it.
"""

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypedDict

from corpus import Corpus, Question
from dialogue import add_turn

SPEAKERS = [
    "Amara",
    "Bruno",
    "Chiara",
    "Dmitri",
    "Elif",
    "Farid",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kaia",
    "Luca",
    "Maya",
    "Nikolai",
    "Oona",
    "Pavel",
]
RELATIONS = {"he": ["brother", "uncle", "cousin", "best friend"], "she": ["sister", "aunt", "cousin", "best friend"]}
RELATIVE_NAMES = {
    "Tomasz": "he",
    "Sofia": "she",
    "Rafael": "he",
    "Lena": "she",
    "Oskar": "he",
    "Vera": "she",
    "Emil": "he",
    "Nadia": "she",
    "Arvid": "he",
    "Selma": "she",
    "Matteo": "he",
    "Ingrid": "she",
    "Viktor": "he",
    "Helga": "she",
    "Dario": "he",
    "Mirela": "she",
}
CITIES = ["Gdansk", "Porto", "Leipzig", "Turin", "Aarhus", "Ghent", "Brno", "Graz", "Bilbao", "Tartu", "Lyon", "Split"]
JOBS = [
    "nurse",
    "data analyst",
    "architect",
    "sound engineer",
    "primary school teacher",
    "pharmacist",
    "translator",
    "tram driver",
    "UX designer",
    "lawyer",
    "pastry chef",
    "vet",
    "electrician",
    "journalist",
    "physiotherapist",
    "accountant",
]
COMPANIES = [
    "Halvard & Co",
    "Brightwater Clinic",
    "Novum Studio",
    "Kestrel Audio",
    "the Linden Street school",
    "Apteka Rosa",
    "Verbatim Languages",
    "the city transport board",
    "Pixelforge",
    "Marsh & Lowe",
    "Patisserie Odile",
    "Greenfield Animal Hospital",
    "Volt Brothers",
    "the Evening Courier",
    "MoveWell Physio",
    "Ledger Partners",
]
PETS = {
    "dog": (
        ["beagle", "corgi", "greyhound", "labrador", "dachshund", "border collie"],
        [
            ("{pet} chewed through my laptop charger last night, that's the third one.", "chew through"),
            ("{pet} needed four stitches after a scrap with a terrier in the park.", "need stitches for"),
            ("{pet} won a rosette at the town show on Sunday!", "win at the town show"),
            ("Took {pet} to the seaside for the first time, {he} would not leave the waves.", "first see"),
        ],
    ),
    "cat": (
        ["tabby", "siamese", "maine coon", "ragdoll", "black"],
        [
            ("{pet} knocked my grandmother's vase off the shelf, it's in pieces.", "break"),
            ("{pet} vanished for two days and came back smelling of fish.", "do for two days"),
            ("{pet} has learned to open the fridge, I'm not joking.", "learn to open"),
            ("The vet says {pet} has to lose a kilo, so it's diet food from now on.", "have to lose"),
        ],
    ),
}
PET_QUESTIONS = {
    "chew through": "What did {S}'s dog chew through?",
    "need stitches for": "Why did {S}'s dog need stitches?",
    "win at the town show": "What did {S}'s dog get at the town show?",
    "first see": "What did {S}'s dog see for the first time?",
    "break": "What did {S}'s cat break?",
    "do for two days": "What did {S}'s cat do for two days?",
    "learn to open": "What has {S}'s cat learned to open?",
    "have to lose": "What did the vet tell {S} about the cat?",
}
PET_NAMES = [
    "Pretzel",
    "Biscuit",
    "Mochi",
    "Pepper",
    "Ziggy",
    "Nori",
    "Waffles",
    "Juniper",
    "Tofu",
    "Clementine",
    "Truffle",
    "Pixel",
    "Olive",
    "Sprocket",
    "Miso",
    "Basil",
]
# (the turn, a question by the relation, what the relative did: for the question the other way round)
RELATIVE_NEWS = [
    (
        "{R} signed up for the Riverside Half Marathon, {he}'s out running every morning.",
        "What is {S}'s {rel} training for?",
        "signed up for the Riverside Half Marathon",
    ),
    (
        "{R} is opening a bike repair shop next to the station.",
        "What is {S}'s {rel} opening?",
        "is opening a bike repair shop",
    ),
    ("{R} got engaged on a hot-air balloon ride!", "How did {S}'s {rel} get engaged?", "got engaged in a balloon"),
    (
        "{R} won the regional chess open, beat a grandmaster in the last round.",
        "What did {S}'s {rel} win?",
        "won the regional chess open",
    ),
    (
        "{R} is learning to fly gliders at the weekends.",
        "What is {S}'s {rel} learning at the weekends?",
        "is learning to fly gliders",
    ),
    (
        "{R} broke a leg skiing, {he}'s on crutches for six weeks.",
        "How did {S}'s {rel} get hurt?",
        "broke a leg skiing",
    ),
    ("{R} published a cookbook of our grandmother's recipes.", "What did {S}'s {rel} publish?", "published a cookbook"),
    (
        "{R} bought an old farmhouse and is fixing the roof on {his} own.",
        "What did {S}'s {rel} buy?",
        "bought an old farmhouse",
    ),
    (
        "{R} started a podcast about forgotten inventors.",
        "What did {S}'s {rel} start?",
        "started a podcast about inventors",
    ),
    (
        "{R} got a black belt in judo after eight years.",
        "What did {S}'s {rel} achieve in judo?",
        "got a black belt in judo",
    ),
    (
        "{R} is sailing across the Baltic with two friends this summer.",
        "What is {S}'s {rel} doing this summer?",
        "is sailing across the Baltic",
    ),
    ("{R} was elected to the city council.", "What was {S}'s {rel} elected to?", "was elected to the city council"),
    (
        "{R} is restoring a vintage motorbike in the garage.",
        "What is {S}'s {rel} restoring?",
        "is restoring a vintage motorbike",
    ),
    ("{R} finished a PhD on coral reefs.", "What did {S}'s {rel} study for a PhD?", "finished a PhD on coral reefs"),
    (
        "{R} joined an orchestra as the second violin.",
        "Which orchestra part does {S}'s {rel} play?",
        "joined an orchestra as second violin",
    ),
    (
        "{R} volunteers at a wildlife rescue centre, mostly with owls.",
        "Where does {S}'s {rel} volunteer?",
        "volunteers with owls at a rescue centre",
    ),
]
PLACES = [
    "Lisbon",
    "the Dolomites",
    "Reykjavik",
    "Kyoto",
    "Marrakesh",
    "Edinburgh",
    "the Azores",
    "Crete",
    "Vilnius",
    "Seville",
    "Tallinn",
    "Bergen",
    "Naples",
    "Ljubljana",
    "Budapest",
    "Sardinia",
    "Dubrovnik",
    "Copenhagen",
    "Istanbul",
    "Malta",
    "Zermatt",
    "Valencia",
    "Bruges",
    "Salzburg",
    "Madeira",
    "Riga",
    "Cork",
    "Palermo",
    "Innsbruck",
    "Santorini",
    "Lofoten",
    "Krakow",
    "Tbilisi",
    "Sintra",
    "Bordeaux",
    "Hallstatt",
    "Mostar",
    "Gothenburg",
    "Cadiz",
    "Bologna",
    "Plovdiv",
    "Galway",
    "Utrecht",
    "Trieste",
    "Bled",
    "Kotor",
    "Aix",
    "Oslo",
]
TRIP_TURNS = [
    "Just got back from {place}. The food alone was worth it.",
    "We spent a long weekend in {place}, it rained every day and we didn't care.",
    "Back from {place}! I walked about twenty kilometres a day.",
    "{place} was wonderful, we rented a tiny car and got lost twice.",
    "Home again after a week in {place}, the hotel looked right over the harbour.",
]
# (two turns, a question neither shares a content word with)
HOBBIES = [
    (
        "I've been practising the cello every evening, the neighbours are very patient.",
        "The string quartet at the philharmonic on Friday gave me goosebumps.",
        "Would {S} enjoy a night at the opera?",
    ),
    (
        "Set up the telescope on the balcony and saw Saturn's rings for the first time.",
        "Stayed up till three for the meteor shower, counted forty-one.",
        "Would {S} like a trip to a dark-sky reserve?",
    ),
    (
        "My sourdough starter is six months old now, I feed it like a pet.",
        "Made croissants from scratch, it took me the whole Saturday.",
        "Would {S} appreciate a pastry course as a present?",
    ),
    (
        "Finally topped the overhang route at the bouldering gym.",
        "My fingers are raw from the limestone crags.",
        "Would {S} be up for a via ferrata in the mountains?",
    ),
    (
        "Spotted a kingfisher by the canal this morning, my first one this year.",
        "Bought new binoculars, the old ones fogged up in the marsh.",
        "Would {S} enjoy a guided dawn walk through a nature reserve?",
    ),
    (
        "Threw my first bowl on the wheel, it's wonky but it holds soup.",
        "The kiln at the studio cracked two of my mugs.",
        "Would {S} like a ceramics workshop?",
    ),
    (
        "Lost on time again in blitz, and I had a winning position.",
        "I study the Sicilian every night before bed.",
        "Would {S} enjoy a board game tournament?",
    ),
    (
        "Caught my first green wave on the course last week.",
        "The wetsuit is still drying on the balcony, the water was freezing.",
        "Would {S} like a holiday on the Atlantic coast?",
    ),
    (
        "Shot a whole roll of film at sunrise in the old town.",
        "Built a darkroom in the bathroom, my flatmate is thrilled.",
        "Would {S} enjoy an exhibition of street portraits?",
    ),
    (
        "The tomatoes on the allotment are finally turning red.",
        "Planted two hundred tulip bulbs along the fence.",
        "Would {S} like a visit to a botanical garden?",
    ),
    (
        "Spent Sunday on a watercolour of the river, the sky went muddy.",
        "Bought a proper easel at last, no more painting on the kitchen table.",
        "Would {S} like a week at a landscape art retreat?",
    ),
    (
        "Did a hundred kilometres on the road bike on Saturday.",
        "New cleats, I fell over twice at traffic lights.",
        "Would {S} enjoy watching a stage of the Tour de France?",
    ),
    (
        "Finished the first sleeve of the jumper, only one to go.",
        "The wool shop had merino on sale and I bought far too much.",
        "Would {S} like a trip to a yarn festival?",
    ),
    (
        "The saxophone lessons are paying off, I played a whole solo.",
        "Went to the jam session at the cellar bar and stayed till closing.",
        "Would {S} enjoy a jazz festival?",
    ),
    (
        "Paddled the whole gorge on Saturday and only capsized once.",
        "Patched the kayak again, those rocks are merciless.",
        "Would {S} be interested in a rafting trip?",
    ),
    (
        "Walked the ridge from hut to hut, three days with a heavy pack.",
        "My boots finally gave up on the scree.",
        "Would {S} enjoy a trek in the Himalayas?",
    ),
]
# (what the speaker did, the question's words for it: another way to say it)
LIFE_EVENTS = [
    ("passed my driving test, third time lucky", "get a driving licence"),
    ("ran my first 10k without stopping", "first run ten kilometres"),
    ("got promoted to team lead", "become a team lead"),
    ("signed the papers for a flat in the old town", "buy a home"),
    ("had my wisdom teeth out, I look like a hamster", "have dental surgery"),
    ("joined a choir, we sing on Tuesdays", "start singing with a group"),
    ("sold my old car to a collector", "get rid of the old car"),
    ("started Spanish lessons at the evening school", "begin learning Spanish"),
    ("gave my first talk at a conference", "speak at a conference"),
    ("broke my wrist falling off a ladder", "injure an arm"),
    ("finished the first draft of my novel", "complete a draft of the book"),
    ("donated blood for the first time", "first give blood"),
]
WHEN = ["Yesterday", "Last Saturday", "On Monday", "Two days ago", "This morning", "Last night"]
REACTIONS = [
    "Oh wow, congratulations!",
    "Send pictures!",
    "That sounds amazing.",
    "No way!",
    "Poor thing.",
    "How do you feel about it?",
    "Good for you, {S}.",
    "Ha, classic {S}.",
    "I'm so jealous.",
    "Tell me everything next time we meet.",
]
SMALL_TALK = [
    "Morning all!",
    "Hey {O}, how was your week?",
    "Busy, but good. You?",
    "Not bad, the usual chaos at work.",
    "Did anyone watch the match last night?",
    "I'm exhausted, this week never ends.",
    "The weather has been grim lately.",
    "Finally some sun today!",
    "I made a huge pot of soup, lunch is sorted for days.",
    "We should all meet up soon.",
    "Let's do dinner when things calm down.",
    "Anyone tried the new ramen place on the corner?",
    "I've been binge-watching a crime series, no regrets.",
    "My train was late again this morning.",
    "Work is fine, deadlines as always.",
    "I need a holiday.",
    "My neighbour's dog barks all night.",
    "I keep thinking about a trip somewhere warm.",
    "I'm thinking of taking up running again.",
    "Did you see the news about the new tram line?",
    "Can't talk long, I'm at the dentist's.",
    "Ha, that's so true.",
    "Same here.",
    "Talk soon!",
    "Good night everyone.",
    "Catch you later, {O}.",
    "I'll call you at the weekend, {O}.",
    "How is your family doing, {O}?",
    "All good here, thanks for asking.",
    "The kids have a cold again.",
    "I finally cleaned the flat.",
    "Burned the toast twice this morning.",
    "Bought a new plant, let's see how long it survives.",
    "Does anyone know a good plumber?",
    "The heating in my flat is broken again.",
    "I'm reading a great book about the history of salt.",
    "The traffic this morning was unreal.",
    "My colleague's cat had kittens, she's giving them away.",
    "I saw a dog in the park that looked just like a fox.",
    "My cousin keeps sending me marathon memes.",
    "The bakery near my office closed down.",
    "My parents want to visit {P} next year.",
    "I've never been to {P}, is it nice?",
    "Maybe I should learn an instrument.",
    "My boss wants us all to do a team run.",
    "I got my nephew a telescope for his birthday.",
    "Is it just me or is everything more expensive?",
    "I fell asleep on the sofa at nine.",
    "We had a power cut for three hours yesterday.",
    "Happy Friday!",
    "I'm trying to drink less coffee. It's not going well.",
    "The concert tickets sold out in a minute.",
    "My sister says hi, {O}.",
    "Remind me to send you that recipe, {O}.",
    "Work dinner tonight, wish me luck.",
    "The garden is a jungle after all that rain.",
    "Our landlord is finally fixing the windows.",
    "I started a puzzle with a thousand pieces, big mistake.",
    "Did you get my message, {O}?",
    "Sorry, I was offline all day.",
    "My brother finally got his driving licence, the roads are not safe.",
    "Our team lead got promoted, so now we need a new one.",
    "I should really give blood one day.",
    "A friend of mine just bought a flat, the prices are insane.",
    "Someone at work broke an arm playing football.",
    "My flatmate started learning Spanish, the whole flat says hola now.",
]
# Ways to ask the single-hop questions.
NAME_OF_PET = ["What is the name of {S}'s {species}?", "What did {S} call the new {species}?"]
MOVED_TO = ["Where did {S}'s {rel} move to?", "Which city does {S}'s {rel} live in now?"]
JOB_OF = ["What does {S} do for a living?", "What is {S}'s job?", "Where does {S} work?"]
START = datetime(2023, 3, 4, 18, 0, tzinfo=UTC)


@dataclass
class Fact:
    """A turn that states something: its speaker and text, and its record key once written."""

    speaker: str
    text: str
    key: str = ""


Place = Callable[[Fact, int], Fact]  # puts a fact into a session
Apart = Callable[..., list[int]]  # sessions for facts told in order, a gap apart
Asked = list[tuple[str, str, list[Fact]]]  # (question type, question, its evidence)


class Pools(TypedDict):
    """What each speaker slot draws (places: three a slot), sampled without replacement: no two speakers share one."""

    relative_names: list[str]
    pet_names: list[str]
    news: list[tuple[str, str, str]]
    hobbies: list[tuple[str, str, str]]
    jobs: list[int]  # indexes into JOBS
    places: list[str]


def pronouns(subject: str) -> dict[str, str]:
    return {"he": subject, "his": "his" if subject == "he" else "her"}


def article(noun: str) -> str:
    return f"{'an' if noun[0].lower() in 'aeiou' else 'a'} {noun}"


def build_sessions_corpus(seed: int = 11, conversations: int = 4, speakers: int = 4, sessions: int = 28) -> Corpus:
    rng = random.Random(f"sessions-{seed}")
    corpus = Corpus()
    names = rng.sample(SPEAKERS, conversations * speakers)
    pools: Pools = {
        "relative_names": rng.sample(sorted(RELATIVE_NAMES), len(names)),
        "pet_names": rng.sample(PET_NAMES, len(names)),
        "news": rng.sample(RELATIVE_NEWS, len(names)),
        "hobbies": rng.sample(HOBBIES, len(names)),
        "jobs": rng.sample(range(len(JOBS)), len(names)),
        "places": rng.sample(PLACES, 3 * len(names)),
    }
    for c in range(conversations):
        people = names[c * speakers : (c + 1) * speakers]
        add_conversation(rng, corpus, f"chat-{c}", people, [c * speakers + n for n in range(speakers)], pools, sessions)
    return corpus


def add_conversation(
    rng: random.Random,
    corpus: Corpus,
    thread: str,
    people: list[str],
    slots: list[int],
    pools: Pools,
    sessions: int,
) -> None:
    plan: list[list[Fact]] = [[] for _ in range(sessions)]
    questions: Asked = []

    def place(fact: Fact, session: int) -> Fact:
        plan[session].append(fact)
        return fact

    def apart(gap: int, count: int = 2) -> list[int]:
        """Sessions for facts told in order, at least `gap` sessions from one another."""
        while True:
            chosen = sorted(rng.sample(range(sessions), count))
            if all(b - a >= gap for a, b in itertools.pairwise(chosen)):
                return chosen

    for speaker, slot in zip(people, slots, strict=True):
        questions += pet_facts(rng, speaker, pools["pet_names"][slot], place, apart)
        questions += relative_facts(rng, speaker, pools["relative_names"][slot], pools["news"][slot], place, apart)
        questions += job_facts(rng, speaker, pools["jobs"][slot], place, sessions)
        questions += trip_facts(rng, speaker, pools["places"][3 * slot : 3 * slot + 3], place, apart)
        questions += hobby_facts(speaker, pools["hobbies"][slot], place, apart)
        questions += life_event_facts(rng, speaker, place, sessions)
    write_sessions(rng, corpus, thread, people, plan)
    for kind, text, facts in questions:
        corpus.questions.append(Question(kind, text, {fact.key for fact in facts}))


def pet_facts(rng: random.Random, speaker: str, pet: str, place: Place, apart: Apart) -> Asked:
    species = rng.choice(sorted(PETS))
    breeds, events = PETS[species]
    he = rng.choice(["he", "she"])
    first, later = apart(4)
    intro = place(
        Fact(speaker, f"We adopted a {rng.choice(breeds)} {species} at the weekend, {he}'s called {pet}."), first
    )
    event_text, asked = rng.choice(events)
    event = place(Fact(speaker, event_text.format(pet=pet, **pronouns(he))), later)
    return [
        ("single_hop", rng.choice(NAME_OF_PET).format(S=speaker, species=species), [intro]),
        ("multi_hop", PET_QUESTIONS[asked].format(S=speaker), [intro, event]),
        ("temporal", f"When did {speaker} adopt {pet}?", [intro]),
    ]


def relative_facts(
    rng: random.Random, speaker: str, relative: str, news: tuple[str, str, str], place: Place, apart: Apart
) -> Asked:
    he = RELATIVE_NAMES[relative]
    relation = rng.choice(RELATIONS[he])
    city, job = rng.choice(CITIES), rng.choice(JOBS)
    first, later = apart(5)
    intro = place(
        Fact(speaker, f"My {relation} {relative} just moved to {city}, {he} got a job there as {article(job)}."), first
    )
    text, by_relation, deed = news
    told = place(Fact(speaker, text.format(R=relative, **pronouns(he))), later)
    return [
        ("single_hop", rng.choice(MOVED_TO).format(S=speaker, rel=relation), [intro]),
        ("multi_hop", by_relation.format(S=speaker, rel=relation), [intro, told]),
        ("multi_hop", f"In which city does the person who {deed} live?", [told, intro]),
    ]


def job_facts(rng: random.Random, speaker: str, job: int, place: Place, sessions: int) -> Asked:
    session = rng.randrange(sessions - 6)
    intro = place(
        Fact(speaker, f"First week as {article(JOBS[job])} at {COMPANIES[job]} done, everyone is lovely."), session
    )
    place(Fact(speaker, f"Another late night at {COMPANIES[job]}, the deadline is close."), session + rng.randint(3, 6))
    return [("single_hop", rng.choice(JOB_OF).format(S=speaker), [intro])]


def trip_facts(rng: random.Random, speaker: str, places: list[str], place: Place, apart: Apart) -> Asked:
    sessions = apart(3, rng.choice([2, 3]))
    told = rng.sample(TRIP_TURNS, len(sessions))
    trips = [
        place(Fact(speaker, text.format(place=where)), session)
        for text, where, session in zip(told, places, sessions, strict=False)
    ]
    first, second = places[0], places[1]
    return [
        ("multi_hop", f"Which places has {speaker} travelled to?", trips),
        ("temporal", f"Which did {speaker} visit first, {strip_article(second)} or {strip_article(first)}?", trips[:2]),
    ]


def strip_article(place_name: str) -> str:
    return place_name.removeprefix("the ")


def hobby_facts(speaker: str, hobby: tuple[str, str, str], place: Place, apart: Apart) -> Asked:
    first_text, second_text, asked = hobby
    first, second = apart(3)
    turns = [place(Fact(speaker, first_text), first), place(Fact(speaker, second_text), second)]
    return [("open_domain", asked.format(S=speaker), turns)]


def life_event_facts(rng: random.Random, speaker: str, place: Place, sessions: int) -> Asked:
    found = []
    for deed, asked in rng.sample(LIFE_EVENTS, 2):
        turn = place(Fact(speaker, f"{rng.choice(WHEN)} I {deed}!"), rng.randrange(sessions))
        found.append(("temporal", f"When did {speaker} {asked}?", [turn]))
    return found


def write_sessions(rng: random.Random, corpus: Corpus, thread: str, people: list[str], plan: list[list[Fact]]) -> None:
    """Each session: who takes part, small talk around its facts (each fact answered by someone
    else), its turns written with the session's date, and 3-turn windows inside the session."""
    position = 0
    started = START
    for facts in plan:
        rng.shuffle(facts)
        speakers = {fact.speaker for fact in facts}
        others = [p for p in people if p not in speakers]
        present = sorted(speakers | set(rng.sample(others, min(len(others), rng.randint(1, 2)))))
        if len(present) < 2:
            present = sorted(set(present) | {rng.choice([p for p in people if p not in present])})
        lines = rng.sample(SMALL_TALK, len(SMALL_TALK))  # no line twice in a session
        fact: Fact | None  # each of the session's facts, then of its turns (None: small talk)
        turns: list[tuple[str, str, Fact | None]] = [(rng.choice(present), small_talk(rng, lines, present, None), None)]
        for fact in facts:
            turns += [(s, small_talk(rng, lines, present, s), None) for s in rng.sample(present, 2)]
            turns.append((fact.speaker, fact.text, fact))
            listener = rng.choice([p for p in present if p != fact.speaker])
            turns.append((listener, rng.choice(REACTIONS).format(S=fact.speaker), None))
        while len(turns) < 22:
            speaker = rng.choice(present)
            turns.insert(rng.randint(1, len(turns)), (speaker, small_talk(rng, lines, present, speaker), None))
        keys = []
        for n, (speaker, text, fact) in enumerate(turns):
            at = (started + timedelta(minutes=2 * n)).isoformat()
            key = add_turn(corpus, thread, position, speaker, text, occurred_at=at)
            if fact is not None:
                fact.key = key
            keys.append(key)
            position += 1
        corpus.windows.extend(keys[i : i + 3] for i in range(len(keys) - 2))
        started += timedelta(days=rng.randint(5, 16))


def small_talk(rng: random.Random, lines: list[str], present: list[str], speaker: str | None) -> str:
    """The next line of the session's small talk, addressed to someone present."""
    other = rng.choice([p for p in present if p != speaker])
    return lines.pop().format(O=other, P=rng.choice(PLACES))
