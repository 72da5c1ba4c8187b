"""e_gather_find inside the database: checks, who asks (the acting role and its lanes), the
settings it runs under, the lookups the pipeline profile lists (from the registry), the merge,
pages cut before the lane filter, the totals, degraded mode, and explain."""

import json
import math
import time
from dataclasses import dataclass
from typing import Any, NoReturn

from .entry import Backend
from .lists.base import CandidateList
from .merge import Placement, interleave
from .reader import Reader, Request, Space
from .registry import BY_NAME
from .settings import SettingError, find_settings, owner_values, session_values
from .totals import Totals, bounded_size, bounded_totals

MAX_PAGE = 100_000
MAX_PAGE_SIZE = 1_000
MAX_REACH = 100_000  # the deepest record of the merged list a find reads (page * page_size)
MAX_QUESTION_CHARS = 10_000
MAX_DECLARATION_CHARS = 200
WORST_DISTANCE = 2.0
DEGRADED_NO_VECTOR = "no_vector"
DEGRADED_DECLARATION_MISMATCH = "declaration_mismatch"
# The vector lookups ran, over a space where records or windows the caller reads lack a current
# vector (below emem.vector_coverage_threshold): those are found by the exact lookups only.
DEGRADED_VECTORS_INCOMPLETE = "vectors_incomplete"


@dataclass(frozen=True)
class Caller:
    """The role a find acts for: whether it reads every lane, else its agent profile's lanes."""

    role: str
    reads_all: bool
    profile: str | None
    lanes: frozenset[str]

    def may_read(self, lane: str) -> bool:
        return self.reads_all or lane in self.lanes


@dataclass(frozen=True)
class Declaration:
    """The model the question vector was made with, as the client's gateway declares it."""

    model_name: str | None
    fingerprint: str | None


class Gather:
    def __init__(self, state: Backend) -> None:
        self.state = state
        self.plpy = state.plpy

    # ---- checks -------------------------------------------------------------------------

    def fail(self, message: str, hint: str | None = None, sqlstate: str = "22023") -> NoReturn:
        self.state.fail(message, hint, sqlstate)

    def check_page(self, page: int | None, page_size: int | None) -> None:
        if page is None or not 1 <= page <= MAX_PAGE:
            self.fail(f"page {'NULL' if page is None else page} is out of range", hint=f"Accepted: 1 to {MAX_PAGE}.")
        if page_size is None or not 1 <= page_size <= MAX_PAGE_SIZE:
            shown = "NULL" if page_size is None else page_size
            self.fail(f"page_size {shown} is out of range", hint=f"Accepted: 1 to {MAX_PAGE_SIZE}.")
        if page * page_size > MAX_REACH:
            self.fail(
                f"page {page} of {page_size} reaches record {page * page_size} of the merged list",
                hint=f"Accepted: page * page_size at most {MAX_REACH}; narrow the question instead of paging deeper.",
            )

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

    def check_declaration(self, declaration: Declaration) -> None:
        for what, value in (("model_name", declaration.model_name), ("model_fingerprint", declaration.fingerprint)):
            if value is not None and len(value) > MAX_DECLARATION_CHARS:
                self.fail(f"{what} has {len(value)} characters", hint=f"Accepted: at most {MAX_DECLARATION_CHARS}.")

    def caller(self) -> Caller:
        """The acting role; a role bound to no agent profile reads nothing and is refused."""
        row = self.plpy.execute(
            self.state.plan(
                """
                select r.rolname::text as role, emem._reads_everything(r.oid::pg_catalog.regrole) as reads_all,
                       emem._bound_profile(r.oid::pg_catalog.regrole) as profile_name,
                       emem._lanes_of(r.oid::pg_catalog.regrole, false) as lanes
                from pg_catalog.pg_roles as r
                where r.oid = emem._acting_role()::pg_catalog.oid
                """,
                [],
            )
        )[0]
        if not row["reads_all"] and row["profile_name"] is None:
            self.fail(
                f"role {row['role']} is bound to no agent profile: it reads nothing",
                hint="The extension's owner binds it: SELECT emem.bind_role('<role>', '<agent profile>').",
                sqlstate="42501",
            )
        return Caller(row["role"], bool(row["reads_all"]), row["profile_name"], frozenset(row["lanes"] or ()))

    def request(self, caller: Caller, question: str | None, vector: str | None, declaration: Declaration) -> Request:
        question = self.check_question(question)
        self.check_declaration(declaration)
        values = session_values(self.state) if caller.reads_all else owner_values(self.state, caller.profile or "")
        try:
            settings = find_settings(values)
        except SettingError as error:
            self.fail(str(error))
        space = self.active_space()
        degraded_reason = DEGRADED_NO_VECTOR if vector is None else None
        if vector is not None and not self.declared_model_is(space, declaration):
            vector, degraded_reason = None, DEGRADED_DECLARATION_MISMATCH
        if vector is not None:
            vector = self.unit_vector(vector, space)
            if space is not None and self.space_incomplete(space, caller, settings.coverage_threshold):
                degraded_reason = DEGRADED_VECTORS_INCOMPLETE
        lanes = tuple(sorted(caller.lanes)) if settings.strict and not caller.reads_all else None
        return Request(
            question,
            vector,
            self.state.analyse(question),
            settings.pipeline_profile,
            space,
            settings.candidate_counts,
            lanes,
            degraded_reason,
            settings.strict,
            settings.exact_totals_up_to,
        )

    def space_incomplete(self, space: Space, caller: Caller, threshold: float) -> bool:
        """Whether the space lacks vectors below the threshold, counted in the lanes the caller
        reads (an agent learns nothing of other lanes from it)."""
        lanes = None if caller.reads_all else sorted(caller.lanes)
        return bool(
            self.plpy.execute(
                self.state.plan(
                    "select emem._coverage_below($1, $2, $3) as below", ["integer", "text[]", "double precision"]
                ),
                [space.space_id, lanes, threshold],
            )[0]["below"]
        )

    def active_space(self) -> Space | None:
        rows = self.plpy.execute(
            self.state.plan(
                "select space_id, dimension, model_name, fingerprint from emem.embedding_spaces where is_active", []
            )
        )
        if not rows:
            return None
        row = rows[0]
        return Space(row["space_id"], row["dimension"], row["model_name"], row["fingerprint"])

    @staticmethod
    def declared_model_is(space: Space | None, declaration: Declaration) -> bool:
        """A vector of another model than the active space's answers nothing true: a declared
        model name or fingerprint that differs from the space's means the vector is not used."""
        if space is None:
            return True  # unit_vector refuses the vector with its own message
        name_differs = declaration.model_name is not None and declaration.model_name != space.model_name
        fingerprint_differs = (
            declaration.fingerprint is not None
            and space.fingerprint is not None
            and declaration.fingerprint != space.fingerprint
        )
        return not (name_differs or fingerprint_differs)

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
        unit: str = shape["unit"]
        return unit

    # ---- find ---------------------------------------------------------------------------

    def prepare(
        self, question: str | None, vector: str | None, page: int, page_size: int, declaration: Declaration
    ) -> tuple[Caller, Request, "PageResult"]:
        self.check_page(page, page_size)
        caller = self.caller()
        request = self.request(caller, question, vector, declaration)
        return caller, request, self.page_of(request, page, page_size)

    def find(
        self,
        question: str | None,
        vector: str | None,
        page: int,
        page_size: int,
        declaration: Declaration = Declaration(None, None),
    ) -> dict[str, Any]:
        caller, request, result = self.prepare(question, vector, page, page_size, declaration)
        return {
            "page": page,
            "page_size": page_size,
            "total_candidates": result.totals.candidates,
            "total_pages": math.ceil(result.totals.candidates / page_size),
            "totals_exact": result.totals.exact,
            "degraded": answer_degraded(request),
            "degraded_reason": request.degraded_reason,
            "pipeline_profile": request.weights,
            "lane_isolation": lane_isolation(request),
            "lookups": lookups_of(request),
            "rows": self.rows(result, caller),
        }

    def run_lookups(self, reader: Reader) -> tuple[dict[str, CandidateList], dict[str, float]]:
        """Each lookup of the profile that can run (the vector ones need a vector), timed."""
        lists: dict[str, CandidateList] = {}
        timings: dict[str, float] = {}
        for name in runnable(reader.request):
            reader.phase = name
            started = time.perf_counter()
            lists[name] = BY_NAME[name].build(reader)
            timings[name] = round((time.perf_counter() - started) * 1000, 3)
        return lists, timings

    def page_of(self, request: Request, page: int, page_size: int) -> "PageResult":
        """Run the lookups, merge as far as the page reaches, and cut the page."""
        reader = Reader(self.state, request, page * page_size)
        lists, timings = self.run_lookups(reader)
        reader.phase = "merge"  # the lists read further as the merge reaches them
        started = time.perf_counter()
        heads = exact_heads(lists, reader.tuning.exact_head_limit)
        merged = interleave(
            lists, request.weights, limit=page * page_size, tick=self.state.check_interrupts, heads=heads
        )
        timings["merge"] = round((time.perf_counter() - started) * 1000, 3)
        offset = (page - 1) * page_size
        reader.phase = "totals"
        totals = bounded_totals(reader, lists.values(), request.totals_bound)
        reader.phase = "rows"
        return PageResult(reader, lists, timings, merged[offset:], offset, totals, heads)

    def rows(self, result: "PageResult", caller: Caller) -> list[dict[str, Any]]:
        """The page's rows the caller may read. A row whose place a lookup gave it only through
        edges the caller cannot read (an edge carries the secrecy of both its ends) is left out
        like a record of an unreadable lane, and such a lookup is not named in found_by."""
        if not result.places:
            return []
        page_ids = [p.record_id for p in result.places]
        details = {
            row["record_id"]: row
            for row in result.reader.execute(
                "find.page_rows",
                """
                select r.record_id, r.kind::text, r.lane_name, r.content,
                       array(select t.tag from emem.record_tags as t
                             where t.record_id = r.record_id and t.lane_name = r.lane_name order by t.tag) as tags
                from emem.records as r where r.record_id operator(pg_catalog.=) any ($1)
                """,
                ["bigint[]"],
                [page_ids],
            )
        }
        readable = [i for i in page_ids if caller.may_read(details[i]["lane_name"])]
        found_by = {name: self.visible_members(result, name, readable, caller) for name in result.lists}
        window_list = result.lists.get("window_vectors")
        windows = {c.record_id: c.windows for c in window_list.read()} if window_list else {}
        rows = []
        for rank, place in enumerate(result.places, start=result.offset + 1):
            detail = details[place.record_id]
            if not caller.may_read(detail["lane_name"]) or place.record_id not in found_by[place.placed_by]:
                continue
            is_cosine = not result.reader.degraded and place.candidate.distance is not None
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

    @staticmethod
    def visible_members(result: "PageResult", name: str, record_ids: list[int], caller: Caller) -> set[int]:
        """The records a lookup's list holds for this caller (through what it may read)."""
        held = result.lists[name].members(record_ids)
        through_edges = BY_NAME[name].visible_members
        if caller.reads_all or result.reader.request.lanes is not None or through_edges is None or not held:
            return held
        return through_edges(result.reader, sorted(held), sorted(caller.lanes))

    def explain(
        self,
        question: str | None,
        vector: str | None,
        page: int,
        page_size: int,
        declaration: Declaration = Declaration(None, None),
    ) -> dict[str, Any]:
        """The analysed question and, per row of the page, where it came from. For a role that
        reads every lane, or under strict isolation, also each lookup's size and time and each
        row's rank in every list (null: not in it, or beyond what a broad list fetched); an agent
        under the seed's rule sees no more than find tells it (lists and times span every lane)."""
        caller, request, result = self.prepare(question, vector, page, page_size, declaration)
        analysis = request.analysis
        rows = self.rows(result, caller)
        explained: dict[str, Any] = {
            "question": {
                "terms": analysis.terms,
                "known_words": analysis.known_words,
                "unknown_terms": analysis.unknown_terms,
            },
            "pipeline_profile": request.weights,
            "lane_isolation": lane_isolation(request),
            "degraded": answer_degraded(request),
            "degraded_reason": request.degraded_reason,
            "active_space": {
                "space_id": request.space.space_id,
                "model_name": request.space.model_name,
                "dimension": request.space.dimension,
            }
            if request.space
            else None,
            "skipped_lookups": [name for name in request.weights if name not in result.lists],
            "total_candidates": result.totals.candidates,
            "totals_exact": result.totals.exact,
            "exact_totals_up_to": request.totals_bound,
            "rows": [{key: row[key] for key in ("rank", "record_id", "placed_by", "found_by")} for row in rows],
        }
        if not (caller.reads_all or request.lanes is not None):
            return explained
        page_ids = [row["record_id"] for row in rows]
        list_ranks = {name: candidates.ranks(page_ids) for name, candidates in result.lists.items()}
        explained_rows: list[dict[str, Any]] = explained["rows"]
        for row in explained_rows:
            row["list_ranks"] = {name: ranks.get(row["record_id"]) for name, ranks in list_ranks.items()}
        sizes = {name: bounded_size(candidates, request.totals_bound) for name, candidates in result.lists.items()}
        # Times, plans and statements only for a role that reads every lane: under strict isolation a
        # lookup's time, and the limits its plan and statements show (sized by whole tables), could
        # still follow other lanes' volume, which an agent may not learn of.
        owner = caller.reads_all
        explained["lookups"] = {
            name: {
                "label": BY_NAME[name].label,
                "candidates": sizes[name].candidates,
                "candidates_exact": sizes[name].exact,
                "exact_head": result.heads.get(name, 0),
                **(
                    {
                        "milliseconds": result.timings[name],
                        "plan": candidates.plan.shown() if candidates.plan else None,
                        "reads": candidates.describe(),
                        "statements": statements_of(result.reader, name),
                    }
                    if owner
                    else {}
                ),
            }
            for name, candidates in result.lists.items()
        }
        if owner:
            explained["statements"] = {
                phase: statements_of(result.reader, phase) for phase in ("merge", "totals", "rows")
            }
            explained["merge_milliseconds"] = result.timings["merge"]
        return explained


def statements_of(reader: Reader, phase: str) -> list[dict[str, Any]]:
    """The statements a lookup (or step of the find) ran: which, its text, its rows, its time."""
    return [
        {"name": s.name, "rows": s.rows, "milliseconds": round(s.milliseconds, 3), "sql": " ".join(s.sql.split())}
        for s in reader.log
        if s.phase == phase
    ]


def exact_heads(lists: dict[str, CandidateList], head_limit: int) -> dict[str, int]:
    """How many leading records of each exact_head lookup's list the merge places first: its top
    score level, when at most head_limit records hold it."""
    heads = {name: candidates.head_size(head_limit) for name, candidates in lists.items() if BY_NAME[name].exact_head}
    return {name: head for name, head in heads.items() if 0 < head <= head_limit}


def answer_degraded(request: Request) -> bool:
    """Whether the answer is less than a complete space would give: without a question vector (the
    vector lookups did not run), or with one over a space whose vectors are incomplete."""
    return request.degraded_reason is not None


def runnable(request: Request) -> list[str]:
    """The lookups of the profile that can run: those that need a vector only with one."""
    return [name for name in request.weights if not (request.degraded and BY_NAME[name].needs_vector)]


def lookups_of(request: Request) -> list[dict[str, Any]]:
    """The profile's lookups in tie order, as the envelope names them for clients."""
    ran = set(runnable(request))
    return [
        {"name": name, "label": BY_NAME[name].label, "weight": weight, "ran": name in ran}
        for name, weight in request.weights.items()
    ]


def lane_isolation(request: Request) -> str:
    return "strict" if request.strict else "page_filter"


@dataclass(frozen=True)
class PageResult:
    reader: Reader
    lists: dict[str, CandidateList]
    timings: dict[str, float]
    places: list[Placement]
    offset: int
    totals: Totals
    heads: dict[str, int]


def envelope_json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)
