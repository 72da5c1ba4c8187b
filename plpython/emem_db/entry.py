"""The per-backend state behind every PL/Python function of the extension.

The stubs in sql/ call `backend(GD, plpy, "<version of the SQL that calls>")`. Modules stay
cached in a backend after `ALTER EXTENSION emem UPDATE`, so the loaded version is compared
with the caller's on every call and a mismatch tells the user to reconnect.
"""

from typing import Any

from emem_db._version import VERSION
from emem_db.analysis import Analyser
from emem_db.lexicon import Lexicon
from emem_db.tuning import DEFAULT_TUNING, Tuning

STATE_KEY = "emem_db"


class Backend:
    """What one database backend keeps between calls: the analyser, prepared plans and the
    lookups' tuning."""

    def __init__(self, plpy: Any) -> None:
        self.plpy = plpy
        self.tuning: Tuning = DEFAULT_TUNING
        self._analyser: Analyser | None = None
        self.plans: dict[tuple, Any] = {}
        # (when emem.records was last analysed, {lexeme: share of records}): lookups.fulltext.common_lexemes
        self.common_lexemes: tuple[tuple, dict[str, float]] | None = None

    @property
    def analyser(self) -> Analyser:
        if self._analyser is None:
            self._analyser = Analyser(Lexicon.load())
        return self._analyser

    def plan(self, sql: str, types: list[str]) -> Any:
        """A prepared plan, kept for the life of the backend."""
        key = (sql, tuple(types))
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self.plpy.prepare(sql, types)
        return plan


def backend(GD: dict, plpy: Any, sql_version: str) -> Backend:
    if sql_version != VERSION:
        plpy.error(
            f"emem's SQL is version {sql_version} but this connection loaded its Python modules at version {VERSION}",
            hint="If the extension was updated while this connection was open, reconnect; if the server has"
            f" the modules of a newer release, update the database: ALTER EXTENSION emem UPDATE TO '{VERSION}'.",
            sqlstate="55000",
        )
    state = GD.get(STATE_KEY)
    if state is None:
        state = GD[STATE_KEY] = Backend(plpy)
    return state
