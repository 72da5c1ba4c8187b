"""Question analysis, as pure Python (the same module runs inside the database)."""

import pytest

from emem_db.analysis import Analyser, tokens
from emem_db.lexicon import Lexicon
from emem_db.profile import ProfileError, parse_profile


@pytest.fixture(scope="module")
def analyser() -> Analyser:
    return Analyser(Lexicon.load())


@pytest.mark.parametrize(
    "code", ["INV-2031", "Q3", "1200", "$1,200", "4,311.60", "jan.kowalski@acme.com", "max_wal_senders"]
)
def test_codes_names_and_figures_survive_tokenisation(code: str) -> None:
    assert tokens(f"what about {code}?") == ["what", "about", code]


def test_plural_matches_its_lemma(analyser: Analyser) -> None:
    assert analyser.analyse("Which invoices?").terms == ("invoice",)
    assert analyser.label_terms("invoice") == ["invoice"]


def test_case_and_punctuation_are_normalised(analyser: Analyser) -> None:
    assert analyser.analyse("PROJECT, (Apollo)!").terms == ("project", "apollo")


def test_stop_words_are_dropped(analyser: Analyser) -> None:
    assert analyser.analyse("what is the status of it").terms == ("status",)


def test_terms_wordnet_does_not_know_go_to_full_text_as_typed(analyser: Analyser) -> None:
    analysis = analyser.analyse("Did Kowalski bill INV-2031 invoices?")
    assert analysis.unknown_terms == ("Kowalski", "INV-2031")
    assert analysis.known_words == ("bill", "invoice")


def test_figures_count_as_unknown_even_where_wordnet_lists_the_number(analyser: Analyser) -> None:
    assert analyser.lexicon.lemma("ten") is not None
    assert analyser.analyse("41 boxes and 4,311.60 EUR").unknown_terms[:2] == ("41", "4,311.60")


def test_possessive_is_dropped(analyser: Analyser) -> None:
    assert analyser.analyse("Kowalski's invoice").unknown_terms == ("Kowalski",)


def test_multi_word_label_has_each_word(analyser: Analyser) -> None:
    assert analyser.label_terms("Project Apollo") == ["apollo", "project"]
    assert analyser.label_terms("customer:acme") == ["acme", "customer"]


def test_seed_profile_is_the_default() -> None:
    assert parse_profile(None) == {"record_vectors": 40, "tags": 35, "window_vectors": 20, "fulltext": 5}
    assert parse_profile("fulltext, tags") == {"tags": 35, "fulltext": 5}


def test_profile_weights() -> None:
    assert parse_profile("tags:3, record_vectors:1") == {"record_vectors": 1, "tags": 3}


@pytest.mark.parametrize("profile", ["tags, colour", "tags, tags", "tags:0", "tags:-1", "tags:x", "tags:inf", "tags;"])
def test_bad_profiles_are_refused(profile: str) -> None:
    with pytest.raises(ProfileError):
        parse_profile(profile)
