"""WordNet lemmatisation from the compact lexicon built by build_lexicon.py.

The rules are WordNet's morphy, as nltk implements it (`WordNetCorpusReader._morphy`): the
exception lists first, then suffix substitutions, keeping only forms WordNet lists.
"""

import json
from dataclasses import dataclass
from pathlib import Path

LEXICON_PATH = Path(__file__).with_name("lexicon.json")

# Tried in this order; the first part of speech that yields a lemma wins (as nltk's morphy).
PARTS_OF_SPEECH = ("n", "v", "a", "r")

SUFFIX_SUBSTITUTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "n": (
        ("s", ""),
        ("ses", "s"),
        ("ves", "f"),
        ("xes", "x"),
        ("zes", "z"),
        ("ches", "ch"),
        ("shes", "sh"),
        ("men", "man"),
        ("ies", "y"),
    ),
    "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")),
    "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "r": (),
}


@dataclass(frozen=True)
class Lexicon:
    lemmas: dict[str, frozenset[str]]
    exceptions: dict[str, dict[str, list[str]]]

    @classmethod
    def load(cls, path: Path = LEXICON_PATH) -> "Lexicon":
        data = json.loads(path.read_text())
        return cls(
            lemmas={pos: frozenset(words) for pos, words in data["lemmas"].items()},
            exceptions=data["exceptions"],
        )

    def lemma(self, word: str) -> str | None:
        """The lemma WordNet gives a lower-case word, or None when WordNet does not know it."""
        for pos in PARTS_OF_SPEECH:
            found = self._morphy(word, pos)
            if found:
                return found[0]
        return None

    def _morphy(self, form: str, pos: str) -> list[str]:
        known = self.lemmas[pos]
        substitutions = SUFFIX_SUBSTITUTIONS[pos]

        def apply_rules(forms: list[str]) -> list[str]:
            return [f[: -len(old)] + new for f in forms for old, new in substitutions if f.endswith(old)]

        def listed(forms: list[str]) -> list[str]:
            return list(dict.fromkeys(f for f in forms if f in known))

        exceptions = self.exceptions[pos]
        if form in exceptions:
            return listed([form, *exceptions[form]])
        forms = apply_rules([form])
        found = listed([form, *forms])
        while not found and forms:
            forms = apply_rules(forms)
            found = listed(forms)
        return found
