"""The per-backend state behind every PL/Python function of the extension.

Each release installs this package under a name of its own (emem_db_0_3_0: see the Makefile), so
that a server holding databases of two releases serves each its own; the stubs in sql/ import
their release's and call `backend(GD, plpy, "<version of the SQL>")`.
Modules stay cached in a backend after `ALTER EXTENSION emem UPDATE`, so the loaded version is
compared with the caller's on every call and a mismatch tells the user to reconnect.
"""

import time
from typing import Any, NoReturn

from ._version import VERSION
from .analysis import Analyser, QuestionAnalysis
from .lexicon import Lexicon
from .tuning import DEFAULT_TUNING, Tuning

STATE_KEY = "emem_db"
# The longest text analysed: a question, or a label (tags and relations are at most 200
# characters, property values 1000). Longer text is refused before Python sees it whole.
MAX_ANALYSED_CHARS = 10_000
# How often long Python loops let the server act on a cancel or statement_timeout.
INTERRUPT_CHECK_SECONDS = 0.05


class Backend:
    """What one database backend keeps between calls: the analyser, prepared plans and the
    lookups' tuning."""

    def __init__(self, plpy: Any) -> None:
        self.plpy = plpy
        self.tuning: Tuning = DEFAULT_TUNING
        self._analyser: Analyser | None = None
        self.plans: dict[tuple[str, tuple[str, ...]], Any] = {}
        # Per statistic read, (when its table was last analysed, the rows read): Reader.statistics
        self.statistics: dict[str, tuple[tuple[str | None, str | None], list[dict[str, Any]]]] = {}
        # (when the server read its configuration files, {emem setting: value}): find.OwnerSettings
        self.file_settings: tuple[Any, dict[str, str]] | None = None
        self._last_interrupt_check = 0.0

    @property
    def analyser(self) -> Analyser:
        if self._analyser is None:
            self._analyser = Analyser(Lexicon.load())
        return self._analyser

    def fail(self, message: str, hint: str | None = None, sqlstate: str = "22023") -> NoReturn:
        fields = {"sqlstate": sqlstate} if hint is None else {"sqlstate": sqlstate, "hint": hint}
        self.plpy.error(message, **fields)
        raise AssertionError("plpy.error raises")

    def analyse(self, question: str) -> QuestionAnalysis:
        self.check_size("the question", question)
        return self.analyser.analyse(question)

    def label_terms(self, label: str) -> list[str]:
        self.check_size("the label", label)
        return self.analyser.label_terms(label)

    def namespace_terms(self, label: str) -> list[str]:
        self.check_size("the label", label)
        return self.analyser.namespace_terms(label)

    def analysed_labels(self, labels: list[str]) -> list[tuple[str, list[str], list[str]]]:
        """Each label with its terms and namespace terms: a batch's new labels in one call."""
        analysed = []
        for label in labels:
            self.check_interrupts()
            analysed.append((label, self.label_terms(label), self.namespace_terms(label)))
        return analysed

    def check_size(self, what: str, text: str) -> None:
        if len(text) > MAX_ANALYSED_CHARS:
            self.fail(f"{what} has {len(text)} characters", hint=f"Accepted: at most {MAX_ANALYSED_CHARS} characters.")

    def check_interrupts(self) -> None:
        """Python loops do not see a cancel or a statement_timeout; a statement does, so a long
        loop runs a trivial one every INTERRUPT_CHECK_SECONDS."""
        now = time.monotonic()
        if now - self._last_interrupt_check >= INTERRUPT_CHECK_SECONDS:
            self._last_interrupt_check = now
            self.plpy.execute(self.plan("select", []))

    def plan(self, sql: str, types: list[str]) -> Any:
        """A prepared plan, kept for the life of the backend."""
        key = (sql, tuple(types))
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self.plpy.prepare(sql, types)
        return plan


def backend(GD: dict[str, Any], plpy: Any, sql_version: str) -> Backend:
    if sql_version != VERSION:
        plpy.error(
            f"emem's SQL is version {sql_version} but this connection loaded its Python modules at version {VERSION}",
            hint="If the extension was updated while this connection was open, reconnect; if the server has"
            f" the modules of a newer release, update the database: ALTER EXTENSION emem UPDATE TO '{VERSION}'.",
            sqlstate="55000",
        )
    state = GD.get(STATE_KEY)
    if not isinstance(state, Backend):  # none yet, or an earlier release's (this backend ran the update)
        state = GD[STATE_KEY] = Backend(plpy)
    return state
