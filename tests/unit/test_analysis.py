"""Question analysis, as pure Python (the same module runs inside the database)."""

import re

import pytest
from checkout import ROOT

from emem_db.analysis import Analyser, tokens
from emem_db.lexicon import Lexicon
from emem_db.profile import ProfileError, parse_profile
from emem_db.stopwords import NOT_SEARCHED


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


def matches(analyser: Analyser, label: str, question: str) -> bool:
    """The SQL test (fragments.labels_within): the label has terms and all are the question's."""
    terms = set(analyser.label_terms(label))
    return bool(terms) and terms <= set(analyser.analyse(question).terms_for_labels)


@pytest.mark.parametrize(
    ("label", "question"),
    [
        ("customer:north-wind", "What did we ship for North Wind?"),
        ("customer:north-wind", "customer north-wind"),
        ("sensor-offline", "Which sensors are offline?"),
        ("sensor-offline", "Which sensors went offline?"),
        ("offline sensors", "any sensor-offline alerts?"),
        ("q3-2024", "Revenue in Q3 2024"),
        ("q3_2024", "the Q3/2024 numbers"),
        ("purchase-order", "Who signed the purchase order?"),
        ("purchase order", "the purchase-order form"),
        ("max_wal_senders", "how many wal senders at max?"),
        ("runbooks", "Where is the runbook?"),
        ("runbook", "Which runbooks changed?"),
        ("SLAs", "our SLA"),
        ("INV-2031", "What about inv-2031?"),
        ("INV-2031", "INV 2031, please"),
    ],
)
def test_labels_match_as_people_write_them(analyser: Analyser, label: str, question: str) -> None:
    assert matches(analyser, label, question)


@pytest.mark.parametrize(
    ("label", "question"),
    [
        ("INV-2031", "What about INV-2032?"),
        ("INV-2031", "anything from 2031?"),
        ("INV-2031", "INV-2032, dated 2031"),
        ("INV-2031", "2031 INV"),
        ("inv", "What about INV-2031?"),  # a code is one term, never its parts
        ("Q3 2024", "the Q3-2024 numbers"),
        ("q3-2024", "Q3 2023 and 2024"),
        ("customer:north-wind", "Which customer?"),
        ("customer:north-wind", "north side"),
        ("sensor-offline", "offline"),
        ("won", "We won't."),
    ],
)
def test_codes_match_whole_and_every_word_counts(analyser: Analyser, label: str, question: str) -> None:
    assert not matches(analyser, label, question)


def test_a_namespace_is_left_out_of_a_labels_terms(analyser: Analyser) -> None:
    assert analyser.label_terms("customer:north-wind") == ["north", "wind"]
    assert analyser.label_terms("10:30") == ["10", "30"]  # a time is no namespace


def test_a_code_is_one_term_written_with_hyphens(analyser: Analyser) -> None:
    assert analyser.label_terms("INV_2031") == analyser.label_terms("inv/2031") == ["inv-2031"]
    assert analyser.label_terms("v1.2") == ["v1.2"]  # a dot between digits belongs to the number
    assert analyser.label_terms("jan.kowalski@acme.com") == ["jan.kowalski@acme.com"]


def test_consecutive_words_of_a_question_make_a_code(analyser: Analyser) -> None:
    assert analyser.analyse("Q3-2024").terms == ("q3-2024",)
    assert analyser.analyse("Q3 2024").terms == ("q3", "2024", "q3-2024")
    assert analyser.analyse("Q3 of 2024").terms == ("q3", "2024")  # a stop word breaks a code


@pytest.mark.parametrize(
    ("label", "question"),
    [("won", "Which deals have we won?"), ("to do", "What is left to do?"), ("to-do", "Anything to do?")],
)
def test_a_label_made_of_stop_words_matches_its_own_words(analyser: Analyser, label: str, question: str) -> None:
    assert analyser.label_terms(label)
    assert matches(analyser, label, question)
    assert not matches(analyser, label, "Which deals did we lose?")


def test_a_word_whose_lemma_is_a_stop_word_keeps_its_own_form(analyser: Analyser) -> None:
    assert analyser.label_terms("done") == ["done"]
    assert matches(analyser, "done", "Which tasks are done?")
    assert not matches(analyser, "done", "What is left to do?")
    assert not matches(analyser, "to do", "Which tasks are done?")


def test_stop_words_in_a_label_with_content_are_dropped(analyser: Analyser) -> None:
    assert analyser.label_terms("to-do list") == ["list"]


def test_unknown_plurals_are_one_term_in_both_directions(analyser: Analyser) -> None:
    assert analyser.lexicon.lemma("runbooks") is None
    assert analyser.label_terms("runbooks") == analyser.label_terms("runbook") == ["runbook"]
    assert analyser.analyse("queries on proxies").terms == ("query", "proxy")  # WordNet's lemmas
    assert analyser.label_terms("kubernetes") == analyser.label_terms("Kubernetes")
    assert analyser.label_terms("aws") == ["aws"]  # short words keep their s


@pytest.mark.parametrize(
    "question",
    [
        "Would Kowalski enjoy it?",
        "Could Kowalski come?",
        "Whose trip was it, Kowalski?",
        "I'm Kowalski",
        "I\u2019m Kowalski",
    ],
)
def test_modal_verbs_and_question_words_are_never_full_text_terms(analyser: Analyser, question: str) -> None:
    analysis = analyser.analyse(question)
    assert analysis.unknown_terms == ("Kowalski",)
    assert all(typed == "Kowalski" or typed.lower() in {"enjoy", "come", "trip"} for typed, _ in analysis.content_words)


def test_the_docs_list_the_words_never_searched() -> None:
    how_find_works = (ROOT / "docs" / "how-find-works.md").read_text()
    listed = re.search(r"never full-text terms[^:]*: ([^.]*)\.", how_find_works)
    assert listed is not None
    assert set(re.findall(r"`([^`]+)`", listed.group(1))) == set(NOT_SEARCHED)


def test_seed_profile_is_the_default() -> None:
    assert parse_profile(None) == {"record_vectors": 40, "tags": 35, "window_vectors": 20, "fulltext": 5}
    assert parse_profile("fulltext, tags") == {"tags": 35, "fulltext": 5}


def test_profile_weights() -> None:
    assert parse_profile("tags:3, record_vectors:1") == {"record_vectors": 1, "tags": 3}


@pytest.mark.parametrize("profile", ["tags, colour", "tags, tags", "tags:0", "tags:-1", "tags:x", "tags:inf", "tags;"])
def test_bad_profiles_are_refused(profile: str) -> None:
    with pytest.raises(ProfileError):
        parse_profile(profile)
