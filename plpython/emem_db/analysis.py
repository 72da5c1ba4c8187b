"""Question analysis: tokens that keep codes, names and figures whole, normalised the same way
for questions and for labels (tags, edge properties and relation names)."""

import re
import unicodedata
from dataclasses import dataclass

from emem_db.lexicon import Lexicon
from emem_db.stopwords import STOP_WORDS

# A token is a run of word characters joined by inner punctuation, so that `INV-2031`,
# `max_wal_senders`, `jan.kowalski@acme.com`, `4,311.60` and `$1,200` stay whole; a comma
# joins only digits, so "apples,pears" is two tokens.
TOKEN_PATTERN = re.compile(r"[$€£]?\w+(?:(?:[-.@'\u2019/+&]|(?<=\d),(?=\d))\w+)*%?")
POSSESSIVE_SUFFIXES = ("'s", "\u2019s")  # straight and typographic apostrophes


@dataclass(frozen=True)
class QuestionAnalysis:
    """What the lookups need from a question.

    terms: the normalised content words (stop words dropped), matched against labels.
    known_words: the terms WordNet knows (as lemmas).
    unknown_terms: the tokens WordNet does not know, and every token with a digit, as typed:
        full text searches each of them whole.
    content_words: every token that is not a stop word, as typed, with its normalised term
        (full text over all content words searches both).
    """

    terms: tuple[str, ...]
    known_words: tuple[str, ...]
    unknown_terms: tuple[str, ...]
    content_words: tuple[tuple[str, str], ...] = ()


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


class Analyser:
    """Normalises words with WordNet lemmas; memoises, since labels and questions repeat."""

    def __init__(self, lexicon: Lexicon, memo_size: int = 50_000) -> None:
        self.lexicon = lexicon
        self.memo_size = memo_size
        self._normal_forms: dict[str, tuple[str, bool]] = {}

    def normal_form(self, token: str) -> tuple[str, bool]:
        """(the normalised term, whether WordNet knows it). Figures are never 'known'."""
        cached = self._normal_forms.get(token)
        if cached is None:
            lower = token.casefold()
            lemma = None if has_digit(lower) else self.lexicon.lemma(lower)
            cached = (lemma or lower, lemma is not None)
            if len(self._normal_forms) >= self.memo_size:
                self._normal_forms.clear()
            self._normal_forms[token] = cached
        return cached

    def label_terms(self, label: str) -> list[str]:
        """The sorted, distinct normalised terms of a label; stop words are dropped."""
        return sorted({self.normal_form(t)[0] for t in tokens(label) if t.casefold() not in STOP_WORDS})

    def analyse(self, question: str) -> QuestionAnalysis:
        terms: dict[str, None] = {}
        known: dict[str, None] = {}
        unknown: dict[str, str] = {}
        words: dict[str, tuple[str, str]] = {}
        for token in tokens(question):
            if token.casefold() in STOP_WORDS:
                continue
            term, is_known = self.normal_form(token)
            terms[term] = None
            words.setdefault(token.casefold(), (token, term))
            if is_known:
                known[term] = None
            else:
                unknown.setdefault(token.casefold(), token)
        return QuestionAnalysis(tuple(terms), tuple(known), tuple(unknown.values()), tuple(words.values()))
