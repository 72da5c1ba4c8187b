"""The emem.* settings a find runs under, and who may set them.

The extension's owner (and any role that reads every lane) runs under its session's settings:
it may try any profile. An agent's finds run under what the owner set, never its session's: a
self-chosen single-lookup profile would turn the totals into an oracle over other lanes. For an
agent, a setting comes from its agent profile (emem.set_agent_setting), else the database
(ALTER DATABASE ... SET), else the server's configuration files, else the default below.
"""

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .entry import Backend
from .profile import ProfileError, parse_profile
from .registry import SEED_PROFILE

MAX_CANDIDATES = 1_000  # pgvector's largest hnsw.ef_search
# page_filter (the default): every lookup reads every lane and the page is cut before the lane
# filter; strict: every lookup reads the caller's lanes only. `seed` is the old name of page_filter.
LANE_ISOLATION_MODES = ("page_filter", "strict")
LANE_ISOLATION_ALIASES = {"seed": "page_filter"}
MAX_TOTALS_BOUND = 2_147_483_647  # totals are counted up to a bound that fits an integer


class SettingError(ValueError):
    pass


def _ascii_integer(value: str) -> int | None:
    """The value as an integer when it is one in ASCII digits, else None (str.isdigit also takes
    digits such as '¹', which int() refuses)."""
    text = value.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def _candidate_count(name: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        count = _ascii_integer(value)
        if count is None or not 1 <= count <= MAX_CANDIDATES:
            raise SettingError(f"{name} = {value!r} is out of range; accepted: an integer from 1 to {MAX_CANDIDATES}")

    return check


def _profile(value: str) -> None:
    try:
        parse_profile(value)
    except ProfileError as error:
        raise SettingError(f"emem.pipeline_profile: {error}") from None


def _totals_bound(value: str) -> None:
    bound = _ascii_integer(value)
    if bound is None or not 0 <= bound <= MAX_TOTALS_BOUND:
        raise SettingError(
            f"emem.exact_totals_up_to = {value!r} is out of range; accepted: an integer from 0 (totals always"
            f" exact) to {MAX_TOTALS_BOUND}"
        )


def lane_isolation_mode(value: str) -> str:
    """The mode a value of emem.lane_isolation names (an alias gives the mode's name)."""
    mode = value.strip().lower()
    return LANE_ISOLATION_ALIASES.get(mode, mode)


def _isolation(value: str) -> None:
    if lane_isolation_mode(value) not in LANE_ISOLATION_MODES:
        raise SettingError(f"emem.lane_isolation = {value!r}; accepted: {', '.join(LANE_ISOLATION_MODES)}")


def _share(value: str) -> None:
    try:
        share = float(value)
    except ValueError:
        share = math.nan
    if not 0 <= share <= 1:
        raise SettingError(f"emem.vector_coverage_threshold = {value!r}; accepted: a number from 0 to 1")


@dataclass(frozen=True)
class Setting:
    default: str
    check: Callable[[str], None]


SETTINGS: dict[str, Setting] = {
    "emem.pipeline_profile": Setting(SEED_PROFILE, _profile),
    "emem.record_vector_candidates": Setting("100", _candidate_count("emem.record_vector_candidates")),
    "emem.window_vector_candidates": Setting("20", _candidate_count("emem.window_vector_candidates")),
    "emem.lane_isolation": Setting("page_filter", _isolation),
    # Below this share of records and windows with a current vector of the active space, health
    # and finds say vectors_incomplete; 1: every one.
    "emem.vector_coverage_threshold": Setting("1", _share),
    "emem.exact_totals_up_to": Setting("10000", _totals_bound),
}


def check_setting(name: str, value: str | None) -> None:
    """Refuses a setting emem does not know, or a value it would refuse at find time."""
    if name not in SETTINGS:
        raise SettingError(f"unknown setting {name!r}; known: {', '.join(SETTINGS)}")
    if value is not None:
        SETTINGS[name].check(value)


@dataclass(frozen=True)
class FindSettings:
    pipeline_profile: dict[str, float]
    candidate_counts: dict[str, int]
    strict: bool
    coverage_threshold: float
    # Totals are exact up to this many candidates, a lower bound beyond (0: always exact).
    exact_totals_up_to: int


def find_settings(values: dict[str, str | None]) -> FindSettings:
    """The settings of a find from their values (missing or empty: the default), checked."""
    chosen = {name: values.get(name) or setting.default for name, setting in SETTINGS.items()}
    for name, value in chosen.items():
        check_setting(name, value)
    return FindSettings(
        parse_profile(chosen["emem.pipeline_profile"]),
        {
            "record_vectors": int(chosen["emem.record_vector_candidates"]),
            "window_vectors": int(chosen["emem.window_vector_candidates"]),
        },
        lane_isolation_mode(chosen["emem.lane_isolation"]) == "strict",
        coverage_threshold(chosen),
        int(chosen["emem.exact_totals_up_to"]),
    )


def coverage_threshold(values: Mapping[str, str | None]) -> float:
    """emem.vector_coverage_threshold from the values (missing or empty: the default), checked."""
    value = values.get("emem.vector_coverage_threshold") or SETTINGS["emem.vector_coverage_threshold"].default
    check_setting("emem.vector_coverage_threshold", value)
    return float(value)


def acting_role_values(state: Backend) -> dict[str, str | None]:
    """The values the acting role runs under: its session's when it reads every lane, else what the
    owner set for its agent profile (none: the database's and the files')."""
    row = state.plpy.execute(
        state.plan(
            """select emem._reads_everything(emem._acting_role()) as reads_all,
                      emem._bound_profile(emem._acting_role()) as profile""",
            [],
        )
    )[0]
    return session_values(state) if row["reads_all"] else owner_values(state, row["profile"] or "")


def session_values(state: Backend) -> dict[str, str | None]:
    """The session's own values (for a role that reads every lane)."""
    rows = state.plpy.execute(
        state.plan(
            "select name, pg_catalog.current_setting(name, true) as value from pg_catalog.unnest($1::text[]) as name",
            ["text[]"],
        ),
        [list(SETTINGS)],
    )
    return {row["name"]: row["value"] for row in rows}


def owner_values(state: Backend, profile: str) -> dict[str, str | None]:
    """What the owner set for an agent profile: the profile's settings over the database's over
    the configuration files'."""
    row = state.plpy.execute(
        state.plan(
            """select p.settings::text as profile,
                      coalesce((select s.setconfig from pg_catalog.pg_db_role_setting as s
                                join pg_catalog.pg_database as d on d.oid = s.setdatabase
                                where d.datname = pg_catalog.current_database() and s.setrole = 0),
                               '{}') as database
               from emem.agent_profiles as p where p.profile_name = $1""",
            ["text"],
        ),
        [profile],
    )
    chosen: dict[str, str | None] = dict(file_values(state))
    if row:
        database = dict(entry.split("=", 1) for entry in row[0]["database"])
        chosen.update({name: value for name, value in database.items() if name in SETTINGS})
        chosen.update(json.loads(row[0]["profile"]))
    return chosen


def file_values(state: Backend) -> dict[str, str]:
    """The emem settings of the server's configuration files, read again only after a reload."""
    loaded = state.plpy.execute(state.plan("select pg_catalog.pg_conf_load_time()::text as at", []))[0]["at"]
    if state.file_settings is None or state.file_settings[0] != loaded:
        rows = state.plpy.execute(
            state.plan(
                "select name, setting from pg_catalog.pg_file_settings"
                " where name operator(pg_catalog.=) any ($1::text[]) and applied and error is null",
                ["text[]"],
            ),
            [list(SETTINGS)],
        )
        state.file_settings = (loaded, {row["name"]: row["setting"] for row in rows})
    return state.file_settings[1]
