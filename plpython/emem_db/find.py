"""e_gather_find inside the database: checks, the lookups the pipeline profile lists (from the
registry), the merge, pages cut before the lane filter, the totals, and degraded mode."""

import json
import math
import time
from dataclasses import dataclass
from typing import NoReturn

from emem_db.entry import Backend
from emem_db.lists.base import CandidateList
from emem_db.merge import Placement, interleave
from emem_db.profile import ProfileError, parse_profile
from emem_db.reader import Reader, Request, Space
from emem_db.registry import BY_NAME
from emem_db.totals import total_candidates

MAX_PAGE = 100_000
MAX_PAGE_SIZE = 1_000
MAX_QUESTION_CHARS = 10_000
WORST_DISTANCE = 2.0
# Each vector lookup's candidate count: its setting and the default (as in control/emem.conf).
CANDIDATE_SETTINGS = {
    "record_vectors": ("emem.record_vector_candidates", 100),
    "window_vectors": ("emem.window_vector_candidates", 20),
}
MAX_CANDIDATES = 1_000  # pgvector's largest hnsw.ef_search
DEGRADED_NO_VECTOR = "no_vector"


@dataclass(frozen=True)
class Caller:
    reads_all: bool
    lanes: frozenset[str]

    def may_read(self, lane: str) -> bool:
        return self.reads_all or lane in self.lanes


class Gather:
    def __init__(self, state: Backend) -> None:
        self.state = state
        self.plpy = state.plpy

    # ---- checks -------------------------------------------------------------------------

    def fail(self, message: str, hint: str | None = None, sqlstate: str = "22023") -> NoReturn:
        fields = {"sqlstate": sqlstate} if hint is None else {"sqlstate": sqlstate, "hint": hint}
        self.plpy.error(message, **fields)
        raise AssertionError("plpy.error raises")

    def check_page(self, page: int | None, page_size: int | None) -> None:
        if page is None or not 1 <= page <= MAX_PAGE:
            self.fail(f"page {page} is out of range", hint=f"Accepted: 1 to {MAX_PAGE}.")
        if page_size is None or not 1 <= page_size <= MAX_PAGE_SIZE:
            self.fail(f"page_size {page_size} is out of range", hint=f"Accepted: 1 to {MAX_PAGE_SIZE}.")

    def check_question(self, question: str | None) -> str:
        if question is None or not question.strip():
            self.fail("the question is empty", hint="Pass the question as non-empty text.")
        if len(question) > MAX_QUESTION_CHARS:
            self.fail(
                f"the question has {len(question)} characters",
                hint=f"Accepted: at most {MAX_QUESTION_CHARS} characters.",
            )
        if "\x00" in question:
            self.fail("the question contains a NUL character")
        return question

    def caller(self, role: str) -> Caller:
        row = self.plpy.execute(
            self.state.plan(
                """
            select r.rolsuper or r.rolbypassrls
                       or pg_catalog.pg_has_role($1, c.relowner, 'USAGE') as reads_all,
                   $1 operator(pg_catalog.=) session_user
                       or case when pg_catalog.current_setting('server_version_num')::int >= 160000
                               then pg_catalog.pg_has_role(session_user, $1, 'SET')
                               else pg_catalog.pg_has_role(session_user, $1, 'MEMBER') end as may_act,
                   array(select pl.lane_name from emem.role_profiles as rp
                         join emem.profile_lanes as pl on pl.profile_name = rp.profile_name
                         where rp.role_name = $1) as lanes
            from pg_catalog.pg_roles as r, pg_catalog.pg_class as c
            where r.rolname = $1 and c.oid = 'emem.records'::pg_catalog.regclass
            """,
                ["name"],
            ),
            [role],
        )
        if not row or not row[0]["may_act"]:
            self.fail(f"this session cannot act as role {role}", sqlstate="42501")
        return Caller(bool(row[0]["reads_all"]), frozenset(row[0]["lanes"] or ()))

    def request(self, question: str | None, vector: str | None) -> Request:
        question = self.check_question(question)
        settings = self.plpy.execute(
            self.state.plan(
                "select pg_catalog.current_setting('emem.pipeline_profile', true) as profile,"
                " pg_catalog.current_setting('emem.record_vector_candidates', true) as record_vectors,"
                " pg_catalog.current_setting('emem.window_vector_candidates', true) as window_vectors",
                [],
            )
        )[0]
        try:
            weights = parse_profile(settings["profile"])
        except ProfileError as error:
            self.fail(f"emem.pipeline_profile: {error}")
        counts = {
            name: self.candidate_count(setting, settings[name], default)
            for name, (setting, default) in CANDIDATE_SETTINGS.items()
        }
        space = self.active_space()
        if vector is not None:
            vector = self.unit_vector(vector, space)
        return Request(question, vector, self.state.analyser.analyse(question), weights, space, counts)

    def candidate_count(self, setting: str, value: str | None, default: int) -> int:
        if value is None or value == "":
            return default
        if not value.strip().isdigit() or not 1 <= int(value) <= MAX_CANDIDATES:
            self.fail(
                f"{setting} = {value!r} is out of range", hint=f"Accepted: an integer from 1 to {MAX_CANDIDATES}."
            )
        return int(value)

    def active_space(self) -> Space | None:
        rows = self.plpy.execute(
            self.state.plan("select space_id, dimension, model_name from emem.embedding_spaces where is_active", [])
        )
        return Space(rows[0]["space_id"], rows[0]["dimension"], rows[0]["model_name"]) if rows else None

    def unit_vector(self, vector: str, space: Space | None) -> str:
        """The question vector at unit length, as the stored vectors are, after checking it."""
        if space is None:
            self.fail(
                "a question vector was given but there is no active embedding space",
                hint="Create one with emem.create_embedding_space(model_name, dimension, activate => true),"
                " or pass NULL.",
            )
        shape = self.plpy.execute(
            self.state.plan(
                "select public.vector_dims($1) as dimension, public.vector_norm($1) as norm,"
                " case when public.vector_norm($1) > 0 then public.l2_normalize($1)::text end as unit",
                ["public.vector"],
            ),
            [vector],
        )[0]
        if shape["dimension"] != space.dimension:
            self.fail(
                f"the question vector has {shape['dimension']} dimensions but the active embedding space "
                f"{space.space_id} ({space.model_name}) has {space.dimension}",
                hint="Embed the question with the active space's model, or pass NULL to answer without vectors.",
            )
        if not shape["norm"] > 0 or math.isinf(shape["norm"]):
            self.fail("the question vector is the zero vector (or overflows), which has no cosine distance")
        return shape["unit"]

    # ---- find ---------------------------------------------------------------------------

    def run_lookups(self, reader: Reader) -> tuple[dict[str, CandidateList], dict[str, float]]:
        """Each lookup of the profile that can run (the vector ones need a vector), timed."""
        lists: dict[str, CandidateList] = {}
        timings: dict[str, float] = {}
        for name in runnable(reader.request):
            started = time.perf_counter()
            lists[name] = BY_NAME[name].build(reader)
            timings[name] = round((time.perf_counter() - started) * 1000, 3)
        return lists, timings

    def find(self, role: str, question: str | None, vector: str | None, page: int, page_size: int) -> dict:
        self.check_page(page, page_size)
        caller = self.caller(role)
        request = self.request(question, vector)
        result = self.page_of(request, page, page_size)
        return {
            "page": page,
            "page_size": page_size,
            "total_candidates": result.total,
            "total_pages": math.ceil(result.total / page_size),
            "degraded": request.degraded,
            "degraded_reason": DEGRADED_NO_VECTOR if request.degraded else None,
            "pipeline_profile": request.weights,
            "lookups": lookups_of(request),
            "rows": self.rows(result, caller, request),
        }

    def page_of(self, request: Request, page: int, page_size: int) -> "PageResult":
        """Run the lookups, merge as far as the page reaches, and cut the page."""
        reader = Reader(self.state, request, page * page_size)
        lists, timings = self.run_lookups(reader)
        started = time.perf_counter()
        merged = interleave(lists, request.weights, limit=page * page_size)
        timings["merge"] = round((time.perf_counter() - started) * 1000, 3)
        offset = (page - 1) * page_size
        return PageResult(lists, timings, merged[offset:], offset, total_candidates(reader, lists.values()))

    def rows(self, result: "PageResult", caller: Caller, request: Request) -> list[dict]:
        if not result.places:
            return []
        page_ids = [p.record_id for p in result.places]
        details = {
            row["record_id"]: row
            for row in self.plpy.execute(
                self.state.plan(
                    """
                select r.record_id, r.kind, r.lane_name, r.content,
                       array(select t.tag from emem.record_tags as t
                             where t.record_id = r.record_id order by t.tag) as tags
                from emem.records as r where r.record_id operator(pg_catalog.=) any ($1)
                """,
                    ["bigint[]"],
                ),
                [page_ids],
            )
        }
        found_by = {name: candidates.members(page_ids) for name, candidates in result.lists.items()}
        window_list = result.lists.get("window_vectors")
        windows = {c.record_id: c.windows for c in window_list.read()} if window_list else {}
        rows = []
        for rank, place in enumerate(result.places, start=result.offset + 1):
            detail = details[place.record_id]
            if not caller.may_read(detail["lane_name"]):
                continue
            is_cosine = not request.degraded and place.candidate.distance is not None
            rows.append(
                {
                    "rank": rank,
                    "record_id": place.record_id,
                    "kind": detail["kind"],
                    "lane": detail["lane_name"],
                    "content": detail["content"],
                    "tags": list(detail["tags"]),
                    "distance": place.candidate.distance if is_cosine else WORST_DISTANCE,
                    "distance_kind": "cosine" if is_cosine else "placeholder",
                    "placed_by": place.placed_by,
                    "found_by": [name for name, ids in found_by.items() if place.record_id in ids],
                    "windows": list(windows.get(place.record_id, ())),
                }
            )
        return rows

    def explain(self, role: str, question: str | None, vector: str | None, page: int, page_size: int) -> dict:
        """For DBAs: the analysed question, each lookup's size and time, and per row of the page
        its rank in each lookup's list (null: not in it, or beyond what a broad list fetched)."""
        self.check_page(page, page_size)
        caller = self.caller(role)
        request = self.request(question, vector)
        result = self.page_of(request, page, page_size)
        analysis = request.analysis
        page_ids = [place.record_id for place in result.places]
        list_ranks = {name: candidates.ranks(page_ids) for name, candidates in result.lists.items()}
        return {
            "question": {
                "terms": analysis.terms,
                "known_words": analysis.known_words,
                "unknown_terms": analysis.unknown_terms,
            },
            "pipeline_profile": request.weights,
            "degraded": request.degraded,
            "degraded_reason": DEGRADED_NO_VECTOR if request.degraded else None,
            "active_space": vars(request.space) if request.space else None,
            "lookups": {
                name: {
                    "label": BY_NAME[name].label,
                    "candidates": candidates.size(),
                    "milliseconds": result.timings[name],
                }
                for name, candidates in result.lists.items()
            },
            "merge_milliseconds": result.timings["merge"],
            "skipped_lookups": [name for name in request.weights if name not in result.lists],
            "total_candidates": result.total,
            "rows": [
                {
                    "rank": row["rank"],
                    "record_id": row["record_id"],
                    "placed_by": row["placed_by"],
                    "list_ranks": {name: ranks.get(row["record_id"]) for name, ranks in list_ranks.items()},
                }
                for row in self.rows(result, caller, request)
            ],
        }


def runnable(request: Request) -> list[str]:
    """The lookups of the profile that can run: those that need a vector only with one."""
    return [name for name in request.weights if not (request.degraded and BY_NAME[name].needs_vector)]


def lookups_of(request: Request) -> list[dict]:
    """The profile's lookups in tie order, as the envelope names them for clients."""
    ran = set(runnable(request))
    return [
        {"name": name, "label": BY_NAME[name].label, "weight": weight, "ran": name in ran}
        for name, weight in request.weights.items()
    ]


@dataclass(frozen=True)
class PageResult:
    lists: dict[str, CandidateList]
    timings: dict[str, float]
    places: list[Placement]
    offset: int
    total: int


def envelope_json(value: dict) -> str:
    return json.dumps(value, ensure_ascii=False)
