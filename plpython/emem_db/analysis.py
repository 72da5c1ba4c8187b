"""Question analysis: tokens that keep codes, names and figures whole, normalised the same way
for questions and for labels (tags, edge properties and relation names).

A label matches a question when every one of its terms is among the question's (the SQL test is
`label_terms <@ question terms`, with a GIN index on the label side). The term forms are chosen so
that labels match as people write them, and codes still match whole:
- a namespace is optional: `customer:north-wind` has the terms of `north-wind` only (its
  namespace terms, `customer`, are kept apart: the seed's `tags` lookup still asks for them);
- a word joined by separators (`-`, `_`, `/`, and `.` outside a number) stands for its parts
  (`sensor-offline`: `sensor`, `offline`), in any order, on both sides;
- a token with a digit and separators is a code: one term, whole, its separators written `-`
  (`INV-2031`, `inv_2031`: `inv-2031`), never its parts, so `2031`, `INV-2032` or a tag `inv` do
  not match it; consecutive question words that make a code with a digit count as that code too
  ("Q3 2024" matches the tag `q3-2024`);
- a word WordNet does not know loses a plural ending (`runbooks`: `runbook`);
- a label made only of stop words (`won`, `to do`) keeps them, and a question's stop words
  match it: a tag always, an edge's relation name or property value (`about`, `with`) only where
  such an edge ends at a record holding a tag the question matches ("about Kestrel": the edges
  `about` the client tagged `kestrel`; "What do we know about them?": no edge).
"""

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from .lexicon import Lexicon
from .stopwords import NOT_SEARCHED, STOP_WORDS

# A token is a run of word characters joined by inner punctuation, so that `INV-2031`,
# `max_wal_senders`, `jan.kowalski@acme.com`, `4,311.60` and `$1,200` stay whole; a comma
# joins only digits, so "apples,pears" is two tokens.
TOKEN_PATTERN = re.compile(r"[$€£]?\w+(?:(?:[-.@'\u2019/+&]|(?<=\d),(?=\d))\w+)*%?")
POSSESSIVE_SUFFIXES = ("'s", "\u2019s")  # straight and typographic apostrophes
# What joins the parts of a compound word or a code; a dot between digits belongs to a number.
SEPARATOR = re.compile(r"[-_/]|(?<!\d)\.|\.(?!\d)")
# `key:value` at the start of a label, without spaces (a time such as 10:30 starts with a digit).
NAMESPACE = re.compile(r"^\s*[^\W\d_][\w-]*:(?=\w)")
# The most consecutive question words read as one code ("FY 2024 Q3").
MAX_CODE_PARTS = 4
# A word WordNet does not know, shorter than this, keeps a final s (`aws`, `ios`).
MIN_PLURAL_LENGTH = 4


@dataclass(frozen=True)
class QuestionAnalysis:
    """What the lookups need from a question.

    terms: the normalised content words (stop words dropped), matched against labels: compound
        words as their parts, and the codes consecutive words make.
    known_words: the terms WordNet knows (as lemmas).
    unknown_terms: the tokens WordNet does not know, and every token with a digit, as typed:
        full text searches each of them whole (never a word of NOT_SEARCHED).
    content_words: every token that is not a stop word nor in NOT_SEARCHED, as typed, with its
        normalised term (full text over all content words searches both).
    stop_words: the question's stop words, which match only labels made of stop words (edge labels
        only beside a tag the question matches: lookups.edges.grammar).
    """

    terms: tuple[str, ...]
    known_words: tuple[str, ...]
    unknown_terms: tuple[str, ...]
    content_words: tuple[tuple[str, str], ...] = ()
    stop_words: tuple[str, ...] = ()

    @property
    def terms_for_labels(self) -> tuple[str, ...]:
        """Everything a label's terms are matched against."""
        return self.terms + self.stop_words


def tokens(text: str) -> list[str]:
    """Tokens as typed (in Unicode's composed form, NFC, as stored text is searched), without a
    trailing possessive."""
    found = []
    for token in TOKEN_PATTERN.findall(unicodedata.normalize("NFC", text)):
        for suffix in POSSESSIVE_SUFFIXES:
            if token.lower().endswith(suffix) and len(token) > len(suffix):
                token = token[: -len(suffix)]
        found.append(token)
    return found


def has_digit(token: str) -> bool:
    return any(c.isdigit() for c in token)


def word_key(token: str) -> str:
    """How a token is looked up in the word lists: case-folded, with a straight apostrophe."""
    return token.casefold().replace("\u2019", "'")


def is_stop_word(token: str) -> bool:
    return word_key(token) in STOP_WORDS


def parts_of(token: str) -> list[str]:
    """A token's parts between separators (one part for a token without any; an e-mail address
    is one part)."""
    if "@" in token:
        return [token]
    return [part for part in SEPARATOR.split(token) if part]


def without_namespace(label: str) -> str:
    """A label without its `key:` prefix, if it has one."""
    return NAMESPACE.sub("", label, count=1)


def singular(word: str) -> str:
    """A word WordNet does not know, without an English plural ending (applied to both sides,
    so only the match matters: `kubernetes` and `kubernete` are one term)."""
    if len(word) < MIN_PLURAL_LENGTH or not word.isalpha() or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies") and len(word) > MIN_PLURAL_LENGTH:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "zes", "ches", "shes")):
        return word[:-2]
    return word[:-1] if word.endswith("s") else word


def code_runs(found: list[str]) -> Iterable[list[str]]:
    """The runs of consecutive question tokens that may make a code together: plain tokens (no
    separators), not stop words."""
    run: list[str] = []
    for token in found:
        if is_stop_word(token) or len(parts_of(token)) > 1:
            if len(run) > 1:
                yield run
            run = []
        else:
            run.append(token)
    if len(run) > 1:
        yield run


def joined_codes(found: list[str]) -> list[str]:
    """The codes consecutive question words make ("Q3 2024": `q3-2024`): every 2 to
    MAX_CODE_PARTS consecutive plain words with a digit among them, joined as codes are."""
    codes = []
    for run in code_runs(found):
        for size in range(2, MAX_CODE_PARTS + 1):
            for start in range(len(run) - size + 1):
                words = run[start : start + size]
                if any(has_digit(word) for word in words):
                    codes.append("-".join(word.casefold() for word in words))
    return codes


class Analyser:
    """Normalises words with WordNet lemmas; memoises, since labels and questions repeat."""

    def __init__(self, lexicon: Lexicon, memo_size: int = 50_000) -> None:
        self.lexicon = lexicon
        self.memo_size = memo_size
        self._normal_forms: dict[str, tuple[str, bool]] = {}

    def normal_form(self, token: str) -> tuple[str, bool]:
        """(the normalised term, whether WordNet knows it). Figures are never 'known'; a word
        WordNet does not know loses a plural ending; a word whose lemma is a stop word keeps its
        own form (`done` is not `do`, which only labels made of stop words match)."""
        cached = self._normal_forms.get(token)
        if cached is None:
            lower = word_key(token)
            lemma = None if has_digit(lower) else self.lexicon.lemma(lower)
            if lemma in STOP_WORDS:
                lemma = lower
            cached = (lemma, True) if lemma is not None else (lower if has_digit(lower) else singular(lower), False)
            if len(self._normal_forms) >= self.memo_size:
                self._normal_forms.clear()
            self._normal_forms[token] = cached
        return cached

    def token_terms(self, token: str) -> tuple[list[str], list[str]]:
        """(the terms a token stands for, its stop words): a code is one term, a compound word
        its parts."""
        parts = parts_of(token)
        if len(parts) > 1 and any(has_digit(part) for part in parts):
            return ["-".join(part.casefold() for part in parts)], []
        return self.words_of(parts)

    def words_of(self, words: list[str]) -> tuple[list[str], list[str]]:
        """(the normal forms of the words that are not stop words, the stop words)."""
        content = [self.normal_form(word)[0] for word in words if not is_stop_word(word)]
        return content, [word_key(word) for word in words if is_stop_word(word)]

    def label_terms(self, label: str) -> list[str]:
        """The sorted, distinct terms of a label (its namespace left out). Stop words are
        dropped, unless the label is made of nothing else."""
        content: set[str] = set()
        stop: set[str] = set()
        for token in tokens(without_namespace(label)):
            token_content, token_stop = self.token_terms(token)
            content.update(token_content)
            stop.update(token_stop)
        return sorted(content or stop)

    def namespace_terms(self, label: str) -> list[str]:
        """The terms of a label's `key:` namespace ([] without one). The seed's tags lookup asks
        for them in the question (as before labels were matched as people write them); the
        opt-in components do not."""
        found = NAMESPACE.match(label)
        if found is None:
            return []
        content, stop = self.words_of(parts_of(found.group(0).strip()[:-1]))
        return sorted(set(content or stop))

    def analyse(self, question: str) -> QuestionAnalysis:
        found = tokens(question)
        terms: dict[str, None] = {}
        stop: dict[str, None] = {}
        known: dict[str, None] = {}
        unknown: dict[str, str] = {}
        words: dict[str, tuple[str, str]] = {}
        for token in found:
            token_content, token_stop = self.token_terms(token)
            terms.update(dict.fromkeys(token_content))
            stop.update(dict.fromkeys(token_stop))
            key = word_key(token)
            if key in STOP_WORDS or key in NOT_SEARCHED:
                continue
            term, is_known = self.normal_form(token)
            words.setdefault(key, (token, term))
            if is_known:
                known[term] = None
            else:
                unknown.setdefault(key, token)
        terms.update(dict.fromkeys(joined_codes(found)))
        return QuestionAnalysis(tuple(terms), tuple(known), tuple(unknown.values()), tuple(words.values()), tuple(stop))
