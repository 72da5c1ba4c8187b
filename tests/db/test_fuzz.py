"""Bad input is refused with a clear error and changes nothing.

Property-based fuzzing (hypothesis) of e_gather_find's question text, vectors, page bounds and
settings, and of every write function, against the real extension. Each test reuses one
database for all its cases. For every case:

- the server still answers (and never restarted: its start time is checked at the end);
- a refused call changed nothing: every table of schema emem keeps its row count and newest
  row version (xmin), compared after each failing call;
- a refusal has an expected SQLSTATE: class 22 (data exception), 42501 (a lane the role may not
  write or a function it may not call), and for put_record(s) 23505 (a conversation position or
  source_key that is taken); never XX000, never a PL/Python exception class leaking
  (`spiexceptions.`), never an empty message or the hint `None`;
- where the input is clearly valid or clearly invalid, the call succeeds or fails accordingly.

Wrong verdicts and wrong errors are collected over all cases and reported together at the end
of each test (with the shortest input that shows each); a crash, a partial write or a write that
is not whole (checked after clearly valid writes) stops at once.

Each test runs in two tiers: the default run tries a quarter of its cases (about 2,650 in all), the
slow tier (-m slow) all of them (about 10,600). EMEM_FUZZ_SCALE multiplies every test's number of
cases (e.g. EMEM_FUZZ_SCALE=10 -m slow for a long run).
"""

import itertools
import json
import math
import os
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeGuard, TypeVar

import figures
import psycopg
import pytest
from databases import MakeRole
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.errors import Diagnostic
from queries import row, scalar
from writes import put

pytest_plugins = ["figures"]

SCALE = float(os.environ.get("EMEM_FUZZ_SCALE", "1"))
QUICK_SHARE = 0.25  # of each test's cases, in the default run
KINDS = ("note", "conversation", "file", "entity")
EXPECTED_STATES = {"42501"}
# pgvector's own input function refuses a vector literal of more than 16000 dimensions with
# 54000 (program_limit_exceeded) before any emem function runs: documented by pgvector, accepted.
PGVECTOR_LIMIT = ("54000", "vector cannot have more than")
TAKEN_KEY = "23505"
MAX_QUESTION_CHARS = 10_000
MAX_CONTENT_CHARS = 200_000  # a record's content; longer text goes into file chunks
F32_MAX = 3.4028234663852886e38
F32_SMALLEST_NORMAL = 1.1754943508222875e-38
UNIQUE = itertools.count(1)
T = TypeVar("T")

# ---- strategies ---------------------------------------------------------------------------------

# Text a client can send: anything but NUL (PostgreSQL text cannot hold it; psycopg refuses it).
CHARS = st.characters(codec="utf-8", exclude_characters="\x00")
TEXT = st.text(CHARS, max_size=60)
SYNTAX = st.sampled_from(
    [
        "'",
        "''",
        '"',
        "\\",
        "\\\\",
        "&",
        "|",
        "!",
        "(",
        ")",
        ":*",
        "<->",
        "<2>",
        "--",
        ";",
        "/*",
        "*/",
        "$$",
        "$1",
        "%s",
        "%",
        "_",
        "*",
        "select",
        "SELECT * FROM pg_authid",
        "drop table emem.records;",
        "' or 1=1 --",
        "'); delete from emem.records; --",
        "\\x00",
        "\\u0000",
        "E'\\\\'",
        "pg_sleep(10)",
        "\t",
        "\n",
        "\r\n",
        "\x01",
        "\x1f",
        "\x7f",
        "\u00a0",
        "\u2028",
        "\u200b",
        "\ufeff",
        "\u202e",
        "\U0001f642",
        "日本語",
        "ünïcödé",
        "ǅ",
        "ﬁ",
        "INV-2031",
        "$1,200",
        "4,311.60",
        "jan@acme.com",
        "Q3",
        "max_wal_senders",
        "invoices",
        "Kowalski",
        "NULL",
        "true",
        "null",
        "{}",
        "[]",
        "[1,2,3]",
        "a:b",
        "x'y",
        "-1",
        "1e400",
        "NaN",
        "Infinity",
    ]
)
WORDS = st.one_of(TEXT, SYNTAX, st.sampled_from(["invoice", "apollo", "project", "turn", "chunk", "billed", "EUR"]))
SENTENCES = st.lists(WORDS, max_size=12).map(" ".join)


@st.composite
def long_text(draw: st.DrawFn, limit: int = 1_048_576) -> str:
    """Up to 1 MB (or `limit`) of text, repeating a short chunk, so that it is cheap to build."""
    chunk = draw(st.text(CHARS, min_size=1, max_size=40) | SYNTAX)
    length = draw(
        st.integers(1, 20_000)
        | st.sampled_from(
            [MAX_QUESTION_CHARS - 1, MAX_QUESTION_CHARS, MAX_QUESTION_CHARS + 1, 65_536, MAX_CONTENT_CHARS + 1, limit]
        )
    )
    length = min(length, limit)
    return (chunk * (length // len(chunk) + 1))[:length]


QUESTIONS = st.one_of(st.none(), TEXT, SENTENCES, SENTENCES, long_text())
FLOATS = st.one_of(
    st.floats(),
    st.floats(width=32),
    st.integers(-5, 5).map(float),
    st.sampled_from(
        [
            0.0,
            -0.0,
            1e-45,
            1e-46,
            1e-320,
            F32_SMALLEST_NORMAL,
            F32_MAX,
            3.5e38,
            1e39,
            -1e39,
            math.nan,
            math.inf,
            -math.inf,
        ]
    ),
)
VECTOR_SYNTAX = st.sampled_from(
    [
        "",
        "[",
        "]",
        "[]",
        "[,]",
        "[1,,2]",
        "1,2,3",
        "[1 2 3]",
        "{1,2,3}",
        "[1,2,3",
        "[1;2;3]",
        "[0x1,2,3]",
        "[1e999,0,0]",
        "[nan,1,1]",
        "[-inf,1,1]",
        "[ 1 , 2 , 3 ]",
        "[1,2,3]x",
        "[1,2,3,]",
        "['1',2,3]",
        "[+1,-2,3]",
        "[" + ",".join(["1"] * 16_001) + "]",
        "[" + ",".join(["1"] * 2_001) + "]",
    ]
)


@dataclass(frozen=True)
class VectorInput:
    literal: str | None
    values: tuple[float, ...] | None  # None: not a list of numbers we can judge


def vector_literal(values: list[float]) -> VectorInput:
    return VectorInput("[" + ",".join(repr(v) for v in values) + "]", tuple(values))


VECTORS = st.one_of(
    st.none().map(lambda _: VectorInput(None, None)),
    st.lists(FLOATS, max_size=6).map(vector_literal),
    st.lists(FLOATS, min_size=3, max_size=3).map(vector_literal),
    st.lists(st.floats(-10, 10), min_size=3, max_size=4).map(vector_literal),
    (VECTOR_SYNTAX | TEXT).map(lambda text: VectorInput(text, None)),
)


# Any JSON, including what PostgreSQL cannot read (NaN, Infinity, \\u0000 in strings).
JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=30),
        st.sampled_from([-0.0, 10**30, 0.5, "", " ", "\t"]),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=30), inner, max_size=3),
    max_leaves=6,
)
SAFE_WORD = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)
# Texts around a length limit, built from one word (drawing 200 characters one by one is slow).
AROUND_200 = st.builds(lambda word, length: (word * 300)[:length], SAFE_WORD, st.sampled_from([199, 200, 201, 250]))
VALID_TAGS = st.lists(
    st.builds(lambda a, b: f"{a} {b}".strip(), SAFE_WORD, st.sampled_from(["", "x", "Q3"])), max_size=4
)
TAG_LISTS = st.one_of(st.none(), VALID_TAGS, st.lists(st.one_of(st.none(), TEXT, SYNTAX, AROUND_200), max_size=4))
ROLE_NAMES = st.one_of(TEXT, st.sampled_from(["postgres", "pg_read_all_data", "public", "", "no_such_role_zz"]))
INT4 = st.integers(-(2**31), 2**31 - 1)
BIG_INTS = st.integers(-(2**70), 2**70)
TIMES = st.one_of(
    st.none(),
    st.datetimes(timezones=st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))),
    st.sampled_from(
        [
            "infinity",
            "-infinity",
            "epoch",
            "now",
            "today",
            "2026-02-30",
            "garbage",
            "",
            "294277-01-01",
            "4714-11-24 BC",
            "2026-01-01T00:00:00Z",
        ]
    ),
)


# ---- verdicts: what the API must do with clearly valid or clearly invalid input ----------------

VALID, INVALID, EITHER = "valid", "invalid", "either"


def combine(*verdicts: str) -> str:
    if INVALID in verdicts:
        return INVALID
    return EITHER if EITHER in verdicts else VALID


def f32(value: float) -> float:
    rounded: float = struct.unpack("f", struct.pack("f", value))[0]
    return rounded


def vector_verdict(vector: VectorInput, dimension: int | None, null_is_valid: bool) -> str:
    if vector.literal is None:
        return VALID if null_is_valid else INVALID
    if vector.values is None:
        return EITHER
    values = vector.values
    if dimension is None or len(values) != dimension or any(math.isnan(v) or math.isinf(v) for v in values):
        return INVALID
    if any(abs(v) > F32_MAX or 0 < abs(v) < F32_SMALLEST_NORMAL for v in values):
        return EITHER  # out of float4 range: pgvector refuses or rounds; either way class 22
    return INVALID if all(f32(v) == 0 for v in values) else VALID


# White space in any script counts as white space (emem._is_blank); other characters Python calls
# space may or may not be, depending on the server's locale.
UNICODE_SPACES = "\u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff" + "".join(map(chr, range(0x2000, 0x200C)))


def blankness(value: str) -> str | None:
    """INVALID for a text of only white space, EITHER where the server's locale decides, else None."""
    if all(c in " \t\n\r\x0b\x0c" + UNICODE_SPACES for c in value):
        return INVALID
    if all(c.isspace() or c in UNICODE_SPACES for c in value):
        return EITHER
    return None


def tag_verdict(tags: list[str | None] | None, empty_is_valid: bool = False) -> str:
    if tags is None or (not tags and not empty_is_valid) or len(tags) > 1000:
        return INVALID
    verdicts = []
    for tag in tags:
        if tag is None or len(tag) > 200 or blankness(tag) == INVALID:
            return INVALID
        if blankness(tag) == EITHER:
            verdicts.append(EITHER)
            continue
        verdicts.append(VALID if re.search(r"[a-z0-9]", tag, flags=re.ASCII | re.IGNORECASE) else EITHER)
    return combine(*verdicts)


def text_verdict(value: str | None) -> str:
    if value is None or blankness(value) == INVALID:
        return INVALID
    if blankness(value) == EITHER:
        return EITHER
    return VALID if re.search(r"[a-z0-9]", value, flags=re.ASCII | re.IGNORECASE) else EITHER


def has_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    return isinstance(value, list) and any(has_nul(v) for v in value)


def json_text(value: object) -> tuple[str, str]:
    """The JSON text sent for a value, and whether PostgreSQL can read it (NaN and Infinity are not
    JSON; jsonb refuses the escape of NUL)."""
    text = json.dumps(value)
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return text, INVALID
    return text, INVALID if has_nul(value) else VALID


def authority_verdict(authority: float | None) -> str:
    if authority is None or authority == 0 or 1e-30 < authority <= 1:
        return VALID
    if math.isnan(authority) or authority < -1e-6 or authority > 1.0001:
        return INVALID
    return EITHER  # rounds into range as a real, or underflows


def int_in(value: int | None, low: int, high: int) -> TypeGuard[int]:
    return value is not None and low <= value <= high


def all_present(values: Sequence[T | None] | None) -> TypeGuard[Sequence[T]]:
    """Whether there are values and none of them is None."""
    return values is not None and None not in values


def normal_tag(tag: str) -> str:
    return re.sub(r"\s+", " ", tag.strip(" ")).lower()


# ---- the guard around every call ----------------------------------------------------------------


@dataclass
class Problem:
    count: int
    example: str


@dataclass
class Guard:
    """Calls the extension with generated input and checks what every call must keep true."""

    conn: psycopg.Connection
    owner: psycopg.Connection
    function: str
    extra_states: frozenset[str] = frozenset()
    problems: dict[tuple[str, str, str, str], Problem] = field(default_factory=dict)

    def __post_init__(self) -> None:
        tables = [
            r[0]
            for r in self.owner.execute(
                "select c.oid::regclass::text from pg_class c where c.relnamespace = 'emem'::regnamespace"
                " and c.relkind in ('r', 'p') order by 1"
            )
        ]
        parts = [f"(select count(*) from {t}), (select coalesce(max(xmin::text::bigint), 0) from {t})" for t in tables]
        self.snapshot_sql = f"select array[{', '.join(parts)}]::bigint[]"
        self.started = scalar(self.owner, "select pg_postmaster_start_time()")
        self.state = self.snapshot()

    def snapshot(self) -> list[int]:
        counts: list[int] = scalar(self.owner, self.snapshot_sql)
        return counts

    def call(
        self,
        statement: str,
        args: tuple[object, ...],
        verdict: str = EITHER,
        function: str | None = None,
        expected_state: str | None = None,
        context: str = "",
    ) -> list[tuple[Any, ...]] | psycopg.Error:
        """`context`: what else the case set (settings), shown with its input when it goes wrong."""
        function = function or self.function
        args_shown = (*args, context) if context else args
        figures.add("cases tried", detail=function)
        try:
            rows = self.conn.execute(statement, args).fetchall()
        except psycopg.Error as error:
            assert error.sqlstate, f"{function}: no SQLSTATE (client-side error?): {error!r}"
            assert self.snapshot() == self.state, f"{function} failed but wrote something: {args!r:.300}"
            self.judge(error.sqlstate, error.diag, function, args_shown, verdict, expected_state)
            return error
        if verdict == INVALID:
            self.note(function, "accepted clearly invalid input", "-", f"{rows!r:.80}", args_shown)
        self.state = self.snapshot()
        return rows

    def judge(
        self,
        state: str,
        diag: Diagnostic,
        function: str,
        args: tuple[object, ...],
        verdict: str,
        expected_state: str | None,
    ) -> None:
        """Records what makes an error (its SQLSTATE and diagnostics) wrong, unclear or unexpected;
        finish() reports them all."""
        primary = diag.message_primary or ""
        issues = []
        if verdict == VALID:
            issues.append("refused clearly valid input")
        elif (
            verdict == INVALID
            and expected_state
            and not state.startswith(expected_state)
            and ((state, primary[: len(PGVECTOR_LIMIT[1])]) != PGVECTOR_LIMIT)
        ):
            issues.append(f"SQLSTATE other than {expected_state}")
        if not (
            state.startswith("22")
            or state in EXPECTED_STATES
            or state in self.extra_states
            or (state, primary[: len(PGVECTOR_LIMIT[1])]) == PGVECTOR_LIMIT
        ):
            issues.append("unexpected SQLSTATE")
        if not primary.strip():
            issues.append("empty message")
        if primary.startswith("spiexceptions.") or "Traceback" in primary:
            issues.append("a PL/Python exception leaks")
        if diag.message_hint == "None":
            issues.append("the hint reads 'None'")
        for issue in issues:
            self.note(function, issue, state, primary, args)

    def note(self, function: str, issue: str, state: str, message: str, args: tuple[object, ...]) -> None:
        pattern = re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message))[:120]
        key = (function, issue, state, pattern)
        example = f"{args!r:.400}"
        known = self.problems.get(key)
        if known is None:
            self.problems[key] = Problem(1, example)
        else:
            known.count += 1
            if len(example) < len(known.example):
                known.example = example

    def finish(self) -> None:
        assert scalar(self.owner, "select pg_postmaster_start_time()") == self.started, (
            "the server restarted during the run"
        )
        assert self.conn.execute("select 1").fetchone() == (1,)
        report = [
            f"{function}: {issue} ({state}) x{p.count}: {pattern!r}\n    shortest input: {p.example}"
            for (function, issue, state, pattern), p in sorted(self.problems.items())
        ]
        assert not report, "wrong, unclear or unexpected answers:\n" + "\n".join(report)


@pytest.fixture(params=[pytest.param(QUICK_SHARE, id="quick"), pytest.param(1.0, id="full", marks=pytest.mark.slow)])
def share(request: pytest.FixtureRequest) -> float:
    """The share of a test's cases its tier tries: a quarter in the default run, all in the slow tier."""
    value: float = request.param
    return value


def fuzz_settings(cases: int, share: float) -> settings:
    """Hypothesis's settings for `cases` cases, of which the tier tries its share."""
    return settings(
        max_examples=max(1, int(cases * share * SCALE)),
        deadline=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )


# ---- the corpus each test starts from -----------------------------------------------------------


@dataclass
class Corpus:
    db: psycopg.Connection
    notes: list[int]
    conversation: list[int]
    file: list[int]
    other_lane: list[int]

    @property
    def ids(self) -> list[int]:
        return self.notes + self.conversation + self.file + self.other_lane

    def record_ids(self) -> st.SearchStrategy[int | None]:
        return st.one_of(
            st.sampled_from(self.ids),
            st.none(),
            st.sampled_from([0, -1, 2**63 - 1, 10**6]),
            st.integers(-(2**63), 2**63 - 1),
        )

    def thread_of(self, ids: Sequence[int]) -> list[int] | None:
        for thread in (self.conversation, self.file, self.other_lane):
            if set(ids) <= set(thread):
                return thread
        return None

    def guard(
        self, function: str, conn: psycopg.Connection | None = None, extra_states: Iterable[str] = frozenset()
    ) -> Guard:
        return Guard(conn or self.db, self.db, function, frozenset(extra_states))


def records_of_each_kind(db: psycopg.Connection, make_role: MakeRole) -> dict[str, list[int]]:
    """Notes, an entity, a conversation with a window, a file and another lane's conversation, an
    edge, and two embedding spaces (the active one of 3 dimensions)."""
    db.execute("select emem.create_lane('sales'), emem.create_lane('hr')")
    db.execute("select emem.create_agent_profile('sales_agent', array['sales'])")
    db.execute("select emem.create_embedding_space('fuzz-model', 3, 'fp', true)")
    db.execute("select emem.create_embedding_space('other-model', 4)")
    notes = put(
        db,
        [
            {
                "kind": "note",
                "content": f"Kowalski billed INV-2031 for 1200 EUR, note {i}",
                "lane": "sales",
                "tags": ["invoice", "apollo project"],
                "vector": [1, i, 0],
                "source_key": f"note-{i}",
            }
            for i in range(4)
        ]
        + [{"kind": "entity", "content": "Kowalski", "lane": "sales"}],
    )
    conversation = put(
        db,
        [
            {
                "kind": "conversation",
                "content": f"turn {i}",
                "lane": "sales",
                "thread_id": "c1",
                "thread_position": i,
                "vector": [0, 1, i],
            }
            for i in range(5)
        ],
    )
    file = put(
        db,
        [
            {"kind": "file", "content": f"chunk {i}", "lane": "sales", "thread_id": "f1", "thread_position": i}
            for i in range(3)
        ],
    )
    other_lane = put(
        db,
        [
            {"kind": "conversation", "content": f"hr turn {i}", "lane": "hr", "thread_id": "c2", "thread_position": i}
            for i in range(2)
        ],
    )
    db.execute("select emem.put_window(%s, '[0,1,1]')", (conversation[:3],))
    db.execute("select emem.link_records(%s, %s, 'billed', '{\"invoice\": \"INV-2031\"}')", (notes[0], notes[4]))
    return {"notes": notes, "conversation": conversation, "file": file, "other_lane": other_lane}


# Every test writes (what it is given, and what it was right to accept): each on a clone.
pytestmark = pytest.mark.corpus(records_of_each_kind, read_only=False)


@pytest.fixture
def corpus(db: psycopg.Connection, built: dict[str, list[int]]) -> Corpus:
    return Corpus(db, **built)


# ---- e_gather_find --------------------------------------------------------------------------------

FIND_CALLS = {
    "e_gather_find_envelope": "select emem.e_gather_find_envelope(%s, %s::vector, %s::integer, %s::integer)",
    "e_gather_find": "select to_jsonb(f) from emem.e_gather_find(%s, %s::vector, %s::integer, %s::integer) as f",
    "e_gather_explain": "select emem.e_gather_explain(%s, %s::vector)",
}


def call_find(
    guard: Guard,
    how: str,
    question: str | None,
    vector: str | None,
    page: int | None = 1,
    page_size: int | None = 30,
    verdict: str = EITHER,
    context: str = "",
) -> list[tuple[Any, ...]] | psycopg.Error:
    args = (question, vector) if how == "e_gather_explain" else (question, vector, page, page_size)
    return guard.call(FIND_CALLS[how], args, verdict, function=how, expected_state="22", context=context)


def question_verdict(question: str | None) -> str:
    if question is None or not question.strip() or len(question) > MAX_QUESTION_CHARS:
        return INVALID
    return VALID


def test_find_refuses_bad_question_text_and_treats_the_rest_as_data(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("e_gather_find")
    known = set(corpus.ids)

    @fuzz_settings(1500, share)
    @given(question=QUESTIONS, how=st.sampled_from(sorted(FIND_CALLS)), with_vector=st.booleans())
    def run(question: str | None, how: str, with_vector: bool) -> None:
        result = call_find(guard, how, question, "[1,0,0]" if with_vector else None, verdict=question_verdict(question))
        if not isinstance(result, psycopg.Error) and how == "e_gather_find_envelope":
            envelope = result[0][0]
            assert {row["record_id"] for row in envelope["rows"]} <= known
            assert envelope["total_pages"] == math.ceil(envelope["total_candidates"] / 30)

    run()
    guard.finish()


def test_find_refuses_bad_vectors(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("e_gather_find")

    @fuzz_settings(1000, share)
    @given(vector=VECTORS, how=st.sampled_from(sorted(FIND_CALLS)))
    def run(vector: VectorInput, how: str) -> None:
        call_find(
            guard,
            how,
            "invoice apollo INV-2031 turn",
            vector.literal,
            verdict=vector_verdict(vector, 3, null_is_valid=True),
        )

    run()
    guard.finish()


def test_find_refuses_pages_out_of_range(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("e_gather_find")
    bounds = st.one_of(
        st.none(),
        INT4,
        BIG_INTS,
        st.sampled_from([0, 1, 2, 30, 999, 1000, 1001, 99_999, 100_000, 100_001, -1, 2**31 - 1, 2**31]),
    )

    @fuzz_settings(1200, share)
    @given(
        page=bounds,
        page_size=bounds,
        how=st.sampled_from(["e_gather_find_envelope", "e_gather_find"]),
        vector=st.sampled_from([None, "[1,0,0]"]),
    )
    def run(page: int | None, page_size: int | None, how: str, vector: str | None) -> None:
        reach_ok = int_in(page, 1, 100_000) and int_in(page_size, 1, 1_000) and page * page_size <= 100_000
        verdict = VALID if reach_ok else INVALID
        call_find(guard, how, "invoice turn INV-2031", vector, page, page_size, verdict)

    run()
    guard.finish()


MAX_CANDIDATES = 1_000  # docs/profiles.md: emem.record_vector_candidates and emem.window_vector_candidates, 1 to 1000


def test_find_refuses_bad_pipeline_settings(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("e_gather_find(settings)")
    lookups = ["record_vectors", "tags", "window_vectors", "fulltext"]
    entry = st.builds(
        lambda name, weight: name + (f":{weight}" if weight is not None else ""),
        st.sampled_from(lookups) | TEXT,
        st.none() | st.sampled_from(["1", "0", "-1", "2.5", "nan", "inf", "1e400", "x", ""]) | TEXT,
    )
    profiles = st.one_of(st.none(), st.lists(entry, max_size=5).map(", ".join), TEXT, SYNTAX)
    counts = st.one_of(
        st.integers(-5, 20_000),
        st.sampled_from([1, 1000, 1001, MAX_CANDIDATES, MAX_CANDIDATES + 1]),
        TEXT,
        st.sampled_from(["", " 5", "1e3", "0x10"]),
    )

    @fuzz_settings(350, share)
    @given(profile=profiles, record_candidates=counts, window_candidates=counts)
    def run(profile: str | None, record_candidates: int | str, window_candidates: int | str) -> None:
        guard.conn.execute(
            "select set_config('emem.pipeline_profile', %s, false),"
            " set_config('emem.record_vector_candidates', %s, false),"
            " set_config('emem.window_vector_candidates', %s, false)",
            (profile or "", str(record_candidates), str(window_candidates)),
        )
        counted = [c for c in (record_candidates, window_candidates) if isinstance(c, int)]
        verdict = EITHER
        if profile is None and len(counted) == 2:  # the default profile and two whole numbers
            verdict = VALID if all(1 <= c <= MAX_CANDIDATES for c in counted) else INVALID
        call_find(
            guard,
            "e_gather_find_envelope",
            "invoice turn",
            "[1,0,0]",
            verdict=verdict,
            context=f"pipeline_profile={profile!r} record_vector_candidates={record_candidates!r}"
            f" window_vector_candidates={window_candidates!r}",
        )

    try:
        run()
    finally:
        guard.conn.execute("reset all")
    guard.finish()


# ---- the write API ----------------------------------------------------------------------------------

PUT_RECORD = (
    "select emem.put_record(%s::text, %s::text, %s::text, %s::text[], %s::real, %s::timestamptz,"
    " %s::text, %s::integer, %s::jsonb, %s::text)"
)


def test_put_record_refuses_bad_fields(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("put_record", extra_states={TAKEN_KEY})
    metadata = st.one_of(st.none(), st.dictionaries(TEXT, JSON, max_size=3), JSON)

    @fuzz_settings(700, share)
    @given(
        kind=st.sampled_from(KINDS) | TEXT,
        content=st.one_of(TEXT, SENTENCES, long_text()),
        lane=st.sampled_from(["sales", "hr", "nowhere"]) | TEXT,
        tags=TAG_LISTS,
        authority=st.none() | FLOATS,
        occurred_at=TIMES,
        thread=st.booleans(),
        thread_id=st.none() | TEXT,
        position=st.none() | INT4 | st.sampled_from([0, 999_999_999, 10**9]),
        metadata=metadata,
        source_key=st.none() | TEXT | st.just(""),
    )
    def run(
        kind: str,
        content: str,
        lane: str,
        tags: list[str | None] | None,
        authority: float | None,
        occurred_at: object,
        thread: bool,
        thread_id: str | None,
        position: int | None,
        metadata: object,
        source_key: str | None,
    ) -> None:
        threaded = kind in ("conversation", "file")
        if thread and threaded:  # a fresh thread: the position cannot be taken
            thread_id, position = f"fuzz-thread-{next(UNIQUE)}", abs(position or 0) % 1000
        if source_key:
            source_key = f"{source_key}-{next(UNIQUE)}"
        metadata_text, metadata_verdict = (None, VALID) if metadata is None else json_text(metadata)
        if metadata is not None and not isinstance(metadata, dict):
            metadata_verdict = INVALID
        verdict = combine(
            VALID if kind in KINDS else INVALID,
            text_verdict(content) if len(content) <= MAX_CONTENT_CHARS else INVALID,
            VALID if lane in ("sales", "hr") else INVALID,
            tag_verdict(tags or [], empty_is_valid=True),
            authority_verdict(authority),
            VALID if occurred_at is None or isinstance(occurred_at, datetime) else EITHER,
            (VALID if thread else EITHER)
            if threaded and thread_id and int_in(position, 0, 999_999_999)
            else INVALID
            if threaded or thread_id is not None or position is not None
            else VALID,
            metadata_verdict,
            INVALID if source_key == "" else VALID,
        )
        args = (kind, content, lane, tags, authority, occurred_at, thread_id, position, metadata_text, source_key)
        result = guard.call(PUT_RECORD, args, verdict)
        if not isinstance(result, psycopg.Error) and verdict == VALID:
            stored = row(
                corpus.db,
                "select content, lane_name, array(select tag from emem.record_tags t"
                " where t.record_id = r.record_id) from emem.records r"
                " where record_id = %s",
                (result[0][0],),
            )
            assert stored[:2] == (content, lane)
            written = tags or []
            assert all_present(written)  # a valid verdict: no tag is NULL
            if all(t.isascii() for t in written):
                assert sorted(stored[2]) == sorted({normal_tag(t) for t in written})

    run()
    guard.finish()


OPTIONAL_FIELDS = {
    "tags": st.lists(SAFE_WORD, max_size=3),
    "authority": st.sampled_from([0, 0.25, 1]) | st.floats(1e-6, 1),
    "metadata": st.dictionaries(SAFE_WORD, SAFE_WORD | st.integers(), max_size=2),
    "occurred_at": st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat),
    "source_key": SAFE_WORD,
    "vector": st.lists(
        st.integers(-5, 5) | st.floats(-10, 10).filter(lambda x: abs(x) > 1e-3), min_size=3, max_size=3
    ).filter(lambda v: max(map(abs, v)) > 1e-3),
}
CONTENTS = st.sampled_from(
    [
        "about INV-2031 and $1,200",
        "日本語 ünïcödé 🙂",
        "'); drop table emem.records; --",
        "",
        "a\tb\nc",
        "x" * 300,
        "\\u0000 is not NUL",
    ]
)
KEYS = st.sampled_from(
    [
        "kind",
        "content",
        "lane",
        "tags",
        "authority",
        "occurred_at",
        "thread_id",
        "thread_position",
        "metadata",
        "source_key",
        "vector",
    ]
)


@st.composite
def record_items(draw: st.DrawFn) -> tuple[object, str]:
    """A put_records argument and whether it is clearly valid: an array of valid items, some of
    them mutated (a key set to any JSON, a key added, a key dropped), or any JSON at all."""
    shape = draw(st.sampled_from(["valid", "mutated", "mutated", "any"]))
    if shape == "any":
        return draw(JSON), EITHER
    records: list[dict[str, object]] = []
    for _ in range(draw(st.integers(0 if shape == "mutated" else 1, 3))):
        kind = draw(st.sampled_from(KINDS))
        item: dict[str, object] = {
            "kind": kind,
            "content": f"{draw(SAFE_WORD)} {draw(CONTENTS)}",
            "lane": draw(st.sampled_from(["sales", "hr"])),
        }
        if kind in ("conversation", "file"):
            item |= {"thread_id": "fuzz-bulk", "thread_position": 0}
        for key in sorted(draw(st.sets(st.sampled_from(sorted(OPTIONAL_FIELDS)), max_size=3))):
            item[key] = draw(OPTIONAL_FIELDS[key])
        records.append(item)
    items: list[object] = list(records)  # a mutation may put any JSON in place of a record
    if shape == "mutated" and records:
        item = draw(st.sampled_from(records))
        action = draw(st.sampled_from(["set", "add", "drop", "replace"]))
        key = draw(KEYS | TEXT)
        if action == "set":
            item[key] = draw(JSON)
        elif action == "add":
            item[draw(TEXT)] = draw(JSON)
        elif action == "drop":
            item.pop(key, None)
        else:
            items[items.index(item)] = draw(JSON)
    return items, VALID if shape == "valid" else EITHER


def unique_keys(items: object) -> object:
    """Fresh thread ids and source keys for the valid items, so that no earlier case took them."""
    if isinstance(items, list):
        for item in items:
            if isinstance(item, dict) and str(item.get("thread_id", "")).startswith("fuzz-bulk"):
                item["thread_id"] += f"-{next(UNIQUE)}"
            if isinstance(item, dict) and isinstance(item.get("source_key"), str):
                item["source_key"] += f"-{next(UNIQUE)}"
    return items


def test_put_records_refuses_any_bad_json_whole(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("put_records", extra_states={TAKEN_KEY})

    @fuzz_settings(800, share)
    @given(drawn=record_items(), space=st.sampled_from([None, None, None, 1, 2, 999]))
    def run(drawn: tuple[object, str], space: int | None) -> None:
        items, verdict = drawn
        items = unique_keys(items)
        has_vector = isinstance(items, list) and any(isinstance(i, dict) and "vector" in i for i in items)
        if has_vector and space in (2, 999):
            verdict = combine(verdict, INVALID)
        if not (isinstance(items, list) and items):
            verdict = combine(verdict, EITHER)
        text, readable = json_text(items)
        result = guard.call(
            "select item_number, record_id, created from emem.put_records(%s::jsonb, %s::integer)",
            (text, space),
            combine(verdict, readable),
        )
        if isinstance(result, psycopg.Error) or verdict != VALID:
            return
        assert isinstance(items, list)  # a valid verdict: a list of records
        assert [r[0] for r in result] == list(range(1, len(items) + 1))
        for item, (_, record_id, created) in zip(items, result, strict=True):
            assert created
            stored = row(
                corpus.db,
                "select content, lane_name, array(select tag from emem.record_tags t where t.record_id = r.record_id"
                " order by tag), (select count(*) from emem.record_vectors v where v.record_id = r.record_id)"
                " from emem.records r where record_id = %s",
                (record_id,),
            )
            assert (stored[0], stored[1], sorted(stored[2]), stored[3]) == (
                item["content"],
                item["lane"],
                sorted({normal_tag(t) for t in item.get("tags", [])}),
                1 if "vector" in item else 0,
            )
        figures.add("records checked", len(result), detail="put_records fuzz")

    run()
    guard.finish()


def test_put_records_as_an_agent_refuses_other_lanes(
    corpus: Corpus, share: float, make_role: Callable[..., str], dsn: Callable[..., str]
) -> None:
    with psycopg.connect(dsn(make_role("fuzz", "sales_agent")), autocommit=True) as agent:
        guard = corpus.guard("put_records(agent)", conn=agent, extra_states={TAKEN_KEY})

        @fuzz_settings(300, share)
        @given(drawn=record_items())
        def run(drawn: tuple[object, str]) -> None:
            items, verdict = drawn
            items = unique_keys(items)
            lanes = [i.get("lane") for i in items if isinstance(i, dict)] if isinstance(items, list) else []
            if verdict == VALID and any(lane != "sales" for lane in lanes):
                verdict = INVALID
            text, readable = json_text(items)
            guard.call(
                "select * from emem.put_records(%s::jsonb)",
                (text,),
                combine(verdict, readable),
                expected_state="42501" if readable == VALID else "22",
            )

        run()
        guard.finish()


def test_tag_and_untag_refuse_bad_tags_and_unknown_records(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("tag_record")
    known = set(corpus.ids)

    @fuzz_settings(700, share)
    @given(record_id=corpus.record_ids(), tags=TAG_LISTS, untag=st.booleans())
    def run(record_id: int | None, tags: list[str | None] | None, untag: bool) -> None:
        function = "untag_record" if untag else "tag_record"
        verdict = combine(VALID if record_id in known else INVALID, tag_verdict(tags))
        result = guard.call(
            f"select emem.{function}(%s::bigint, %s::text[])",
            (record_id, tags),
            verdict,
            function=function,
            expected_state="22023",
        )
        if not isinstance(result, psycopg.Error) and verdict == VALID:
            assert all_present(tags)  # a valid verdict: a list, no tag NULL
            stored = {
                r[0] for r in corpus.db.execute("select tag from emem.record_tags where record_id = %s", (record_id,))
            }
            wanted = {normal_tag(t) for t in tags}
            if all(t.isascii() for t in tags):
                assert wanted.isdisjoint(stored) if untag else wanted <= stored, (function, tags, stored)

    run()
    guard.finish()


def test_link_records_refuses_bad_ends_relations_and_properties(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("link_records")
    known = set(corpus.ids)

    @fuzz_settings(500, share)
    @given(
        ends=st.tuples(corpus.record_ids(), corpus.record_ids()),
        relation=st.one_of(st.none(), SAFE_WORD, TEXT, SYNTAX, AROUND_200),
        properties=st.one_of(st.none(), st.dictionaries(TEXT, JSON, max_size=4), JSON),
    )
    def run(ends: tuple[int | None, int | None], relation: str | None, properties: object) -> None:
        relation_verdict = (
            INVALID
            if relation is None or len(relation) > 200 or re.search(r"[\x00-\x1f\x7f-\x9f]", relation)
            else text_verdict(relation)
        )
        properties_json, readable = (None, INVALID) if properties is None else json_text(properties)
        verdict = combine(
            VALID if set(ends) <= known else INVALID,
            relation_verdict,
            readable if isinstance(properties, dict) else INVALID,
        )
        result = guard.call(
            "select emem.link_records(%s::bigint, %s::bigint, %s::text, %s::jsonb)",
            (*ends, relation, properties_json),
            verdict,
        )
        if not isinstance(result, psycopg.Error):
            edge = corpus.db.execute(
                "select from_record_id, to_record_id from emem.edges where edge_id = %s", (result[0][0],)
            ).fetchone()
            assert edge == ends

    run()
    guard.finish()


SPACES = {None: 3, 1: 3, 2: 4, 999: None, -1: None}


def test_put_record_vector_refuses_bad_vectors_records_and_spaces(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("put_record_vector")
    known = set(corpus.ids)

    @fuzz_settings(600, share)
    @given(record_id=corpus.record_ids(), vector=VECTORS, space=st.sampled_from(sorted(SPACES, key=str)))
    def run(record_id: int | None, vector: VectorInput, space: int | None) -> None:
        verdict = combine(
            VALID if record_id in known else INVALID,
            INVALID if SPACES[space] is None else VALID,
            vector_verdict(vector, SPACES[space], null_is_valid=False),
        )
        guard.call(
            "select emem.put_record_vector(%s::bigint, %s::vector, %s::integer)",
            (record_id, vector.literal, space),
            verdict,
            expected_state="22",
        )

    run()
    guard.finish()


def test_put_window_refuses_members_that_are_no_run_of_one_thread(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("put_window")
    runs = [
        thread[i:j]
        for thread in (corpus.conversation, corpus.file, corpus.other_lane)
        for i in range(len(thread))
        for j in range(i + 1, len(thread) + 1)
    ]
    members: st.SearchStrategy[Sequence[int | None] | None] = st.one_of(
        st.sampled_from(runs),
        st.sampled_from(runs).flatmap(st.permutations),
        st.lists(corpus.record_ids(), max_size=5),
        st.just([]),
        st.none(),
    )

    @fuzz_settings(600, share)
    @given(member_ids=members, vector=VECTORS, space=st.sampled_from(sorted(SPACES, key=str)))
    def run(member_ids: Sequence[int | None] | None, vector: VectorInput, space: int | None) -> None:
        is_run = (
            bool(member_ids)
            and all_present(member_ids)
            and bool(corpus.thread_of(member_ids))
            and len(set(member_ids)) == len(member_ids)
            and any(sorted(member_ids) == r for r in runs)
        )
        verdict = combine(
            VALID if is_run else INVALID,
            INVALID if SPACES[space] is None else VALID,
            vector_verdict(vector, SPACES[space], null_is_valid=True),  # NULL: queued for embedding
        )
        result = guard.call(
            "select emem.put_window(%s::bigint[], %s::vector, %s::integer)",
            (member_ids, vector.literal, space),
            verdict,
            expected_state="22",
        )
        if not isinstance(result, psycopg.Error):
            assert member_ids is not None  # accepted: a run of record ids
            stored = {
                r[0]
                for r in corpus.db.execute(
                    "select record_id from emem.window_members where window_id = %s", (result[0][0],)
                )
            }
            assert stored == set(member_ids)

    run()
    guard.finish()


def test_lanes_profiles_and_bindings_refuse_bad_names(
    corpus: Corpus, share: float, make_role: Callable[..., str]
) -> None:
    guard = corpus.guard("create_lane")
    role = make_role("fuzzbind")
    name_pattern = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,62}")
    names = st.one_of(TEXT, SYNTAX, st.from_regex(name_pattern, fullmatch=True), st.sampled_from(["sales", "hr", ""]))
    lane_lists = st.one_of(
        st.none(), st.lists(st.one_of(st.sampled_from(["sales", "hr", "nowhere"]), st.none(), TEXT), max_size=4)
    )

    @fuzz_settings(500, share)
    @given(
        what=st.sampled_from(["create_lane", "create_agent_profile", "bind_role"]),
        name=names,
        lanes=lane_lists,
        role_name=st.one_of(st.just(role), ROLE_NAMES),
    )
    def run(what: str, name: str, lanes: list[str | None] | None, role_name: str) -> None:
        name_ok = name_pattern.fullmatch(name) is not None
        if what == "create_lane":
            guard.call(
                "select emem.create_lane(%s::text)",
                (name,),
                VALID if name_ok else INVALID,
                function=what,
                expected_state="22023",
            )
        elif what == "create_agent_profile":
            lanes_ok = lanes is not None and set(lanes) <= {"sales", "hr"} | set(
                r[0] for r in corpus.db.execute("select lane_name from emem.lanes")
            )
            guard.call(
                "select emem.create_agent_profile(%s::text, %s::text[])",
                (name, lanes),
                VALID if name_ok and lanes_ok else INVALID,
                function=what,
                expected_state="22023",
            )
        else:
            profile = name if name_ok else "sales_agent"
            exists = scalar(
                corpus.db, "select exists (select from emem.agent_profiles where profile_name = %s)", (profile,)
            )
            verdict = combine(VALID if role_name == role else EITHER, VALID if exists else INVALID)
            guard.call(
                "select emem.bind_role(%s::name, %s::text)",
                (role_name, profile),
                verdict,
                function=what,
                expected_state="22023",
            )

    run()
    guard.finish()


def test_embedding_spaces_refuse_bad_models_and_dimensions(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("create_embedding_space")

    @fuzz_settings(250, share)
    @given(
        model=st.one_of(st.none(), SAFE_WORD.map(lambda w: f"fuzz-{w}"), TEXT, SYNTAX),
        dimension=st.one_of(st.none(), st.integers(-3, 2003), INT4, BIG_INTS),
        fingerprint=st.none() | TEXT,
        activate=st.booleans(),
        activate_id=st.one_of(st.none(), st.integers(-2, 5), BIG_INTS),
    )
    def run(
        model: str | None, dimension: int | None, fingerprint: str | None, activate: bool, activate_id: int | None
    ) -> None:
        model_verdict = (
            INVALID if model is None or len(model) > 200 or blankness(model) == INVALID else blankness(model) or VALID
        )
        verdict = combine(model_verdict, VALID if int_in(dimension, 1, 2000) else INVALID)
        # Keep the fuzz corpus's space active: activating another would change every later case.
        guard.call(
            "select emem.create_embedding_space(%s::text, %s::integer, %s::text, false)",
            (model, dimension, fingerprint),
            verdict,
            expected_state="22",
        )
        if activate:
            spaces = {r[0] for r in corpus.db.execute("select space_id from emem.embedding_spaces")}
            guard.call(  # forced: the fuzz corpus's other spaces lack vectors (test_embed tests the refusal)
                "select emem.activate_embedding_space(%s::integer, true)",
                (activate_id,),
                VALID if activate_id in spaces else INVALID,
                function="activate_embedding_space",
                expected_state="22",
            )
            corpus.db.execute("select emem.activate_embedding_space(1, true)")
            guard.state = guard.snapshot()

    run()
    guard.finish()


# ---- the reads ----------------------------------------------------------------------------------------


def test_label_intersection_refuses_bad_tags(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("records_with_all_tags")
    known = set(corpus.ids)

    @fuzz_settings(500, share)
    @given(tags=st.one_of(TAG_LISTS, st.just(["invoice", "Apollo  Project"])))
    def run(tags: list[str | None] | None) -> None:
        result = guard.call(
            "select record_id from emem.records_with_all_tags(%s::text[])",
            (tags,),
            tag_verdict(tags),
            expected_state="22023",
        )
        if not isinstance(result, psycopg.Error):
            assert {r[0] for r in result} <= known

    run()
    guard.finish()


def test_timeline_refuses_bad_bounds_pages_and_filters(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("e_timeline")
    bounds = st.one_of(st.none(), st.integers(-3, 3), INT4, BIG_INTS, st.sampled_from([1000, 1001, 100_000, 100_001]))

    @fuzz_settings(600, share)
    @given(
        start=TIMES,
        end=TIMES,
        page=bounds,
        page_size=bounds,
        kinds=st.one_of(st.none(), st.lists(st.sampled_from(KINDS) | TEXT | st.none(), max_size=3)),
        tags=st.one_of(st.none(), TAG_LISTS),
    )
    def run(
        start: object,
        end: object,
        page: int | None,
        page_size: int | None,
        kinds: list[str | None] | None,
        tags: list[str | None] | None,
    ) -> None:
        if isinstance(start, datetime) and isinstance(end, datetime):
            times = VALID if start <= end else INVALID
        elif isinstance(start, datetime) and end is None:
            times = VALID  # no upper bound
        else:
            times = INVALID if start is None else EITHER
        verdict = combine(
            times,
            VALID if int_in(page, 1, 100_000) else INVALID,
            VALID if int_in(page_size, 1, 1000) else INVALID,
            VALID if kinds is None or set(kinds) <= set(KINDS) else INVALID,
            VALID if tags is None else tag_verdict(tags),
        )
        guard.call(
            "select record_id from emem.e_timeline(%s::timestamptz, %s::timestamptz, %s::integer,"
            " %s::integer, %s::text[], %s::text[])",
            (start, end, page, page_size, kinds, tags),
            verdict,
            expected_state="22",
        )

    run()
    guard.finish()


def test_health_and_analysis_take_any_text(corpus: Corpus, share: float) -> None:
    guard = corpus.guard("e_health")

    @fuzz_settings(400, share)
    @given(
        what=st.sampled_from(["e_health", "analyse_question"]),
        text=st.one_of(st.none(), TEXT, SENTENCES),
        dimension=st.one_of(st.none(), INT4),
        fingerprint=st.none() | TEXT,
    )
    def run(what: str, text: str | None, dimension: int | None, fingerprint: str | None) -> None:
        if what == "e_health":
            result = guard.call(
                "select emem.e_health(%s::text, %s::integer, %s::text)",
                (text, dimension, fingerprint),
                VALID,
                function=what,
            )
            assert not isinstance(result, psycopg.Error), f"e_health refused: {result}"
            assert result[0][0]["status"] in ("ok", "degraded")
        else:
            guard.call(f"select emem.{what}(%s::text)", (text,), VALID, function=what)

    run()
    guard.finish()


# ---- what the fuzzers found, pinned -----------------------------------------------------------------


def refused(result: list[tuple[Any, ...]] | psycopg.Error) -> psycopg.Error:
    """The error of a call that must have been refused."""
    assert isinstance(result, psycopg.Error), f"accepted: {result!r:.80}"
    return result


def test_content_too_big_to_index_gets_a_clear_error(corpus: Corpus) -> None:
    """More than 1 MB of distinct words exceeds what a tsvector holds: a clear 22xxx error with
    the accepted size, not a program-limit error from deep inside full text."""
    guard = corpus.guard("put_record(huge content)")
    content = " ".join(f"w{i:07d}" for i in range(150_000))
    result = refused(guard.call("select emem.put_record('note', %s, 'sales')", (content,), INVALID))
    assert result.sqlstate is not None and result.sqlstate.startswith("22"), (
        f"{result.sqlstate}: {result.diag.message_primary}"
    )


def test_whitespace_only_tag_gets_a_clear_error(corpus: Corpus) -> None:
    """A tag of tabs and newlines is as empty as one of spaces: 22023, not a check-constraint violation."""
    guard = corpus.guard("tags of whitespace")
    states = {}
    for tag in ("\t", " \n ", "\r\n"):
        calls = {
            "put_record": ("select emem.put_record('note', 'x', 'sales', %s::text[])", ([tag],)),
            "put_records": (
                "select emem.put_records(%s::jsonb)",
                (json.dumps([{"kind": "note", "content": "x", "lane": "sales", "tags": [tag]}]),),
            ),
            "tag_record": ("select emem.tag_record(%s, %s::text[])", (corpus.notes[0], [tag])),
        }
        for name, (statement, args) in calls.items():
            states[name, tag] = refused(guard.call(statement, args, INVALID)).sqlstate
    assert set(states.values()) == {"22023"}, states


def test_huge_but_finite_vectors_do_not_break_find(corpus: Corpus) -> None:
    """Components near the float4 limit are finite, so pgvector takes them, but cosine distances
    computed from them overflow to NaN. Either the write refuses such a vector (22xxx) or find
    still answers; one record's vector must never break every find."""
    guard = corpus.guard("find after a huge vector")
    stored = guard.call("select emem.put_record_vector(%s, '[3e38,3e38,3e38]')", (corpus.notes[1],))
    if isinstance(stored, psycopg.Error):
        assert stored.sqlstate is not None and stored.sqlstate.startswith("22")
    for vector in ("[1,1,1]", "[3e38,-3e38,1]"):
        answer = guard.call("select emem.e_gather_find_envelope('invoice', %s::vector)", (vector,))
        if isinstance(answer, psycopg.Error):
            assert answer.sqlstate == "22023" and vector != "[1,1,1]", (
                f"find with {vector}: {answer.sqlstate} {answer.diag.message_primary}"
            )


def test_find_errors_carry_no_placeholder_hint(
    corpus: Corpus, make_role: Callable[..., str], dsn: Callable[..., str]
) -> None:
    """Errors raised from PL/Python without a hint must not show the hint `None`."""
    hints = {}
    with psycopg.connect(dsn(make_role("fuzzunbound")), autocommit=True) as unbound:
        with pytest.raises(psycopg.Error) as caught:
            unbound.execute("select emem.e_gather_find_envelope('q', null)")
        hints["unbound role"] = caught.value.diag.message_hint
    with psycopg.connect(dsn(make_role("fuzzagent", "sales_agent")), autocommit=True) as agent:
        for name, statement, args in (
            ("zero vector", "select emem.e_gather_find_envelope('q', '[0,0,0]')", ()),
            ("beyond the deepest page", "select emem.e_gather_find_envelope('q', null, 1000, 1000)", ()),
        ):
            with pytest.raises(psycopg.Error) as caught:
                agent.execute(statement, args)
            hints[name] = caught.value.diag.message_hint
    assert "None" not in hints.values(), hints
