"""Tags and edge properties: the question's terms against tags (through the tag vocabulary),
edge relation names and property values; candidates are the tagged records and both ends of a
matched edge.

A tag's size is its count in the vocabulary; edges are matched per question term (lookups.edges).
A list ordered by its matched terms reads broad tags and broad edge terms in tiers. What an edge
gives its ends depends on the tags at its other end: the ends whose far end holds a narrow tag are
scored whole with that tag's records, and those whose far end holds a broad tag are a part of
their own (far_tag_part), so that every record outside the scored part holds a combination of
broad parts that decides its score."""

from dataclasses import dataclass

from .. import fragments
from ..fragments import SCORED_ARRAYS, quoted_array
from ..lists.base import CandidateList, Counter, Match, Size, planned
from ..lists.broad import BroadList
from ..lists.fetched import FetchedList
from ..lists.scored import ScoredList
from ..lists.tiered import Part, TieredList
from ..lookups.edges import (
    EDGE_BONUS,
    EdgeMatch,
    broad_ends_up_to,
    broad_labels_of,
    edge_match,
    edge_part,
    far_tag_part,
    grammar,
    grammar_edge_rows,
    linked_ends,
    matched_labels,
    visible_ends,
)
from ..plans import ListPlan, Mode, read_whole_because
from ..reader import Reader
from ..sets import AnyOf, LabelEnds, Listed, RecordSet, Tagged

# Degraded, records that match as many terms (and edges) are ranked by the rarest tag they matched
# (BM25's rarity for labels, in place of record id): RARITY_SHARE / (1 + that tag's records), a
# fraction that stays below EDGE_BONUS. Every record of a broad tier matched the same tags, so the
# tiers keep their order.
RARITY_SHARE = 0.4


@dataclass(frozen=True)
class TagMatch:
    """What the question's terms match: tags (largest first, with their counts) and edges."""

    tags: list[str]
    counts: list[int]
    edges: EdgeMatch

    @property
    def size(self) -> Size:
        return Size.of_union([*(Size.exactly(count) for count in self.counts), self.edges.size])

    def broad_tags(self, exact_limit: int) -> list[str]:
        return [tag for tag, count in zip(self.tags, self.counts, strict=True) if count > exact_limit]


def tags(reader: Reader) -> CandidateList:
    """Seed order: by distance (degraded: by matched terms, edges, then the rarest tag matched)."""
    return tag_candidates(reader, by_terms=False)


def tags_by_terms(reader: Reader) -> CandidateList:
    """Opt-in: by the number of distinct question terms matched (edges above tags), then by
    distance (degraded: by the rarest tag matched)."""
    return tag_candidates(reader, by_terms=True)


def tag_candidates(reader: Reader, by_terms: bool) -> CandidateList:
    terms = list(reader.request.analysis.terms_for_labels)
    if not terms:
        return planned(FetchedList([]), ListPlan("empty", "the question has no terms to match labels with"))
    match = tag_match(reader, terms, namespaced=not by_terms)
    mode = Mode(by_terms, reader.degraded, reader.exact_limit, reader.tuning.max_broad_parts)
    plan = plan_tags(match, mode)
    return planned(build_tags(reader, match, terms, mode, plan), plan)


def plan_tags(match: "TagMatch", mode: Mode) -> ListPlan:
    """How the tags lookup reads what the question's terms matched (a pure function: tested in
    tests/unit). A match known to hold at most exact_limit records is read whole; with a vector in
    the seed's order (by distance alone), or for one tag and no edge (every candidate matched the
    same), a broad match is read lazily; else it is read in tiers, one per combination of its broad
    parts, unless it would split into more than max_broad_parts (then it is read whole)."""
    upper = match.size.upper
    if not (match.tags or match.edges.found):
        return ListPlan("whole", "no tag or edge label matches")
    if upper is not None and upper <= mode.exact_limit:
        reason = f"the match holds at most {upper} records: at most {mode.exact_limit} are read whole"
        return ListPlan("whole", read_whole_because(mode.exact_limit, reason))
    if not mode.scored:
        return ListPlan("broad", "a broad match by distance alone: read from the HNSW index filtered to it")
    if len(match.tags) == 1 and not match.edges.found:
        return ListPlan("broad", "one broad tag and no edge: every candidate scores alike, read in record-id order")
    broad = tiered_tags(match, mode)
    parts = broad_parts(match, broad)
    if not parts or parts > mode.max_broad_parts:
        return ListPlan("whole", f"{parts} broad parts (at most {mode.max_broad_parts} are read in tiers)")
    return ListPlan("tiered", f"{parts} broad parts read in tiers, the rest scored whole", tuple(broad))


def broad_parts(match: "TagMatch", broad: list[str]) -> int:
    """How many parts a tiered list of these broad tags has: each tag, each broad edge term, and
    with a broad edge term the ends of edges to each broad tag."""
    edge_terms = len(match.edges.broad_terms)
    return len(broad) * (2 if edge_terms else 1) + edge_terms


def tiered_tags(match: "TagMatch", mode: Mode) -> list[str]:
    """The broad tags a scored list reads in tiers: with a broad edge term each brings two parts
    (its records, and the ends of edges to them); while they are more than max_broad_parts, the
    smallest is read whole with the narrow tags instead (never more than the whole match)."""
    broad = match.broad_tags(mode.exact_limit)  # largest first
    while broad and broad_parts(match, broad) > mode.max_broad_parts:
        broad.pop()
    return broad


def build_tags(reader: Reader, match: "TagMatch", terms: list[str], mode: Mode, plan: ListPlan) -> CandidateList:
    """The list a plan chose."""
    if not (match.tags or match.edges.found):
        return FetchedList([])
    if plan.kind == "whole":
        return exact_tags(reader, match, terms, mode.by_score)
    whole = whole_match(reader, match)
    if plan.kind == "broad":
        return BroadList(reader, whole)
    edges, broad = match.edges, list(plan.broad)
    broad_counts = [(tag, count) for tag, count in zip(match.tags, match.counts, strict=True) if tag in broad]
    # Edge parts come before the far-tag parts, which a tier never walks (see far_tag_part).
    parts = [tag_part(reader, tag, count) for tag, count in broad_counts]
    parts += [
        edge_part(edges, index, Gain(frozenset([term]), through_edge=True))
        for index, term in enumerate(edges.broad_terms)
    ]
    if edges.broad_terms:
        parts += [far_tag_part(edges, tag, Gain(tag_terms(reader, tag), far_tag=True)) for tag in broad]
    narrow = [tag for tag in match.tags if tag not in broad]
    # Records that end a broad edge whose far end holds a narrow tag also score that tag's terms.
    linked = linked_ends(reader, narrow, edges) if edges.broad_terms and narrow else []
    endpoints = sorted(set(edges.narrow_endpoints).union(linked))
    return TieredList(
        reader,
        whole,
        scored_tags(reader, match, terms, within=(narrow, endpoints)),
        parts,
        tier_score,
        narrow_set(narrow, endpoints),
    )


@dataclass(frozen=True)
class Gain:
    """What holding a broad part adds to a record's score, as scored_tags counts it: the part's
    terms, a tag's rarity (degraded), whether it comes through a matched edge (EDGE_BONUS), and
    whether it is a far end's tag (held only with an edge part, which gives the bonus)."""

    terms: frozenset[str]
    rarity: float = 0.0
    through_edge: bool = False
    far_tag: bool = False


def tier_score(held: tuple[Part, ...]) -> float | None:
    """What a record holding these broad parts (and nothing narrow) scores: the distinct terms,
    EDGE_BONUS if an edge reaches it, and the rarest of its own tags' share (None: no record holds a
    far end's tag without an edge)."""
    gains: list[Gain] = [part.score_key for part in held]
    through_edge = any(gain.through_edge for gain in gains)
    if any(gain.far_tag for gain in gains) and not through_edge:
        return None
    terms: frozenset[str] = frozenset().union(*(gain.terms for gain in gains))
    return len(terms) + (EDGE_BONUS if through_edge else 0.0) + max(gain.rarity for gain in gains)


def tag_match(reader: Reader, terms: list[str], namespaced: bool) -> TagMatch:
    tags, counts = matched_tags(reader, terms, namespaced)
    return TagMatch(tags, counts, edge_match(reader, terms, namespaced, tags, counts))


def matched_tags(reader: Reader, terms: list[str], namespaced: bool) -> tuple[list[str], list[int]]:
    """The tags the question's terms match, largest first, with their counts."""
    row = reader.execute(
        "tags.tag_match",
        f"""
        with matched as (
            select v.tag, pg_catalog.sum(v.record_count)::bigint as record_count from emem.tag_vocabulary as v
            where {fragments.labels_within("v.tag_terms", "$1", "v.namespace_terms" if namespaced else None)}
                  {fragments.in_lanes("v.lane_name", reader.lanes_sql)}
            group by v.tag having pg_catalog.sum(v.record_count) > 0
        )
        select coalesce((select pg_catalog.array_agg(tag order by record_count desc, tag) from matched),
                        '{{}}') as tags,
               coalesce((select pg_catalog.array_agg(record_count order by record_count desc, tag)
                         from matched), '{{}}') as counts
        """,
        ["text[]"],
        [terms],
    )[0]
    return list(row["tags"]), list(row["counts"])


def exact_tags(reader: Reader, match: TagMatch, terms: list[str], by_terms: bool) -> CandidateList:
    """Every tag and edge candidate in the list's order: by distance, or by matched terms first."""
    if not (by_terms or reader.degraded):
        return tags_by_distance(reader, match.tags, match.edges)
    return scored_tags(reader, match, terms)


def rarity(reader: Reader, count: int) -> float:
    """What matching a tag of `count` records adds to a record's score (degraded only)."""
    return RARITY_SHARE / (1 + count) if reader.degraded else 0.0


def scored_tags(
    reader: Reader, match: TagMatch, terms: list[str], within: tuple[list[str], list[int]] | None = None
) -> ScoredList:
    """Every tag and edge candidate by its matched terms (an edge end's include those of the
    edge's label and of its other end's matched tags), most first, a record reached through a
    matched edge above those matching as many terms through tags only (EDGE_BONUS), degraded then
    by the rarest tag matched (RARITY_SHARE). `within` (narrow tags and records) keeps the records
    holding one of those tags or given (a tiered list's exact part), each scored by all it
    matches, probed from the record through the indexes."""
    lanes = fragments.in_lanes("rt.lane_name", reader.lanes_sql)

    def matched_tags_of(record_id: str) -> str:
        """The record's matched tags, probed by (record, tag) (a lateral subquery)."""
        return f"""(select rt.tag, rt.lane_name from emem.record_tags as rt
                    where rt.record_id = {record_id} and rt.tag operator(pg_catalog.=) any ($1){lanes}
                    offset 0)"""

    # A tag's words come from its lane's vocabulary row (one per lane and tag): the matched tags'
    # few rows, hashed. The whole match joins its far ends to the tags; a tiered list's exact part
    # probes each far end (its few ends could seem many to the planner, which would then read every
    # matched tag).
    # The edges of a stop-word label count only at the records holding a matched tag ($6 to $8).
    grammar_rows = grammar_edge_rows(reader, "$6", "$7", "$8")
    if within is None:
        records = f"""
            edge_ends (record_id, terms, far_end) as (
                {reader.sets.matched_edge_rows("$2")}
                union all
                {grammar_rows}
            ), tagged (record_id, terms, rarity) as (
                select rt.record_id, mt.terms, tc.rarity
                from tag_rarity as tc
                join emem.record_tags as rt on rt.tag operator(pg_catalog.=) tc.tag
                join matched_tags as mt on mt.tag = rt.tag and mt.lane_name = rt.lane_name
                where true{lanes}
            )"""
        far_end_tags = f"""join emem.record_tags as rt on rt.record_id = n.far_end
                               and rt.tag operator(pg_catalog.=) any ($1){lanes}"""
        narrow_endpoints: list[int] = []
        narrow_tags: list[str] = []
    else:
        records = f"""
            narrow (record_id) as (
                {fragments.tagged("$3", reader.lanes_sql)}
                union
                select pg_catalog.unnest($5::bigint[])
            ), edge_ends (record_id, terms, far_end) as (
                select n.record_id, e.label_terms, e.far_record_id
                from narrow as n
                cross join lateral {reader.sets.edges_at("n.record_id", "$2")} as e
                union all
                {grammar_rows}
            ), tagged (record_id, terms, rarity) as (
                select n.record_id, mt.terms, tc.rarity
                from narrow as n
                cross join lateral {matched_tags_of("n.record_id")} as rt
                join matched_tags as mt on mt.tag = rt.tag and mt.lane_name = rt.lane_name
                join tag_rarity as tc on tc.tag operator(pg_catalog.=) mt.tag
            )"""
        far_end_tags = f"cross join lateral {matched_tags_of('n.far_end')} as rt"
        narrow_tags, narrow_endpoints = within
    sql = f"""
        with tag_rarity (tag, rarity) as (
            select * from rows from (pg_catalog.unnest($1::text[]), pg_catalog.unnest($4::float8[]))
        ), matched_tags (tag, lane_name, terms) as (
            select v.tag, v.lane_name, v.tag_terms from emem.tag_vocabulary as v
            where v.tag operator(pg_catalog.=) any ($1)
        ), {records.strip()}, far_ends (record_id, terms) as (
            select n.record_id, mt.terms
            from edge_ends as n
            {far_end_tags}
            join matched_tags as mt on mt.tag = rt.tag and mt.lane_name = rt.lane_name
        ), matched (record_id, terms, through_edge, rarity) as (
            select record_id, terms, false, rarity from tagged
            union all
            select record_id, terms, true, 0 from edge_ends
            union all
            select record_id, terms, true, 0 from far_ends
        ), found as (
            select m.record_id,
                   pg_catalog.count(distinct t)
                   + case when pg_catalog.bool_or(m.through_edge) then {EDGE_BONUS} else 0 end
                   + pg_catalog.max(m.rarity) as score
            from matched as m cross join lateral pg_catalog.unnest(m.terms) as t
            group by m.record_id
        )
        select {SCORED_ARRAYS.format(score="score")} from found"""
    return ScoredList.from_statement(
        reader,
        "tags.scored_tags",
        sql,
        ["text[]", "text[]", "text[]", "float8[]", "bigint[]", "text[]", "bigint[]", "bigint[]"],
        [
            match.tags,
            match.edges.labels,
            narrow_tags,
            [rarity(reader, count) for count in match.counts],
            narrow_endpoints,
            match.edges.grammar_labels,
            match.edges.grammar_records,
            match.edges.grammar_ends,
        ],
    )


def tags_by_distance(reader: Reader, tags: list[str], edges: EdgeMatch) -> FetchedList:
    """The seed's order with a vector needs no matched terms: the candidates, then their distances."""
    rows = reader.execute(
        "tags.tags_by_distance",
        f"""{fragments.tagged("$1", reader.lanes_sql)}
            union
            select ends.record_id from ({reader.sets.matched_edge_rows("$2")}) as ends
            union
            select pg_catalog.unnest($3::bigint[])""",
        ["text[]", "text[]", "bigint[]"],
        [tags, edges.labels, edges.grammar_ends],
    )
    return FetchedList(reader.by_distance(row["record_id"] for row in rows))


class WholeTagMatchCounter(Counter):
    """Counts a broad tag match by its largest tag's count in the vocabulary plus what the other
    tags and the edges add; up to a limit, each broad edge term's ends first (one of them alone may
    pass the limit)."""

    def __init__(self, reader: Reader, match: TagMatch) -> None:
        self.reader = reader
        self.match = match

    def count(self) -> int:
        match, sets = self.match, self.reader.sets
        largest, *others = match.tags or [""]
        rest = AnyOf(
            (
                Tagged(tuple(others)),
                Listed(tuple(match.edges.narrow_endpoints)),
                LabelEnds(broad_labels_of(match.edges)),
            )
        )
        row = self.reader.execute(
            "tags.whole_match_count",
            f"""select {(match.counts or [0])[0]:d} + pg_catalog.count(distinct o.record_id) as n
                from ({sets.ids(rest)}) as o (record_id)
                where not {sets.holds(Tagged((largest,)), "o.record_id")}""",
            [],
            [],
            cache=False,
        )[0]
        count: int = row["n"]
        return count

    def count_up_to(self, limit: int) -> int:
        match = self.match
        if match.size.lower >= limit:
            return limit
        counts = broad_ends_up_to(self.reader, match.edges, limit)
        if max(counts, default=0) >= limit:
            return limit
        if len(counts) == 1 and not (match.tags or match.edges.narrow_terms):
            return counts[0]  # the one broad term's ends are the whole match
        return min(self.count(), limit)


def whole_match(reader: Reader, match: TagMatch) -> Match:
    """Every record a broad tag match reaches: the tagged records and the ends of matched edges
    (those of narrow terms at hand, those of broad terms probed)."""
    edges = match.edges
    members: list[RecordSet] = [Tagged(tuple(match.tags))] if match.tags else []
    if edges.broad_terms:
        members.append(LabelEnds(broad_labels_of(edges)))
    records = members[0] if len(members) == 1 else AnyOf(tuple(members))
    return Match(records, match.size, edges.narrow_endpoints, WholeTagMatchCounter(reader, match))


def narrow_set(narrow: list[str], endpoints: list[int]) -> RecordSet | None:
    """Holds a tag that is not broad, or is one of these records (the ends of the narrow terms'
    edges, and those linked to a narrowly tagged record): what a tiered list reads whole."""
    members: list[RecordSet] = [Tagged(tuple(narrow))] if narrow else []
    if endpoints:
        members.append(Listed(tuple(endpoints)))
    return AnyOf(tuple(members)) if members else None


def tag_part(reader: Reader, tag: str, count: int) -> Part:
    """A broad tag: it gives its terms and its rarity."""
    return Part(Tagged((tag,)), Size.exactly(count), Gain(tag_terms(reader, tag), rarity(reader, count)))


def tag_terms(reader: Reader, tag: str) -> frozenset[str]:
    return frozenset(reader.state.analyser.label_terms(tag))


def visible_members(reader: Reader, record_ids: list[int], lanes: list[str], namespaced: bool) -> set[int]:
    """Which of these records a tag lookup holds for a caller reading only `lanes`: through a
    matched tag, or a matched edge both of whose ends lie in those lanes. Each record probed
    (fragments.PROBE): hashed, the tag test read all of another lane's 100,000 `audit` rows for
    the 9 rows of a page (35 ms)."""
    terms = list(reader.request.analysis.terms_for_labels)
    lanes_sql = quoted_array(reader.plpy, lanes, "text") if lanes else "array[]::text[]"
    found = matched_labels(reader, terms, namespaced)
    stop_labels = grammar(reader, found)
    labels = sorted(label for label in found if label not in stop_labels)
    tag_within = fragments.labels_within("v.tag_terms", "$2", "v.namespace_terms" if namespaced else None)
    own_tags = "rt.lane_name = r.lane_name and rt.record_id = r.record_id"
    rows = reader.execute(
        "tags.visible_members",
        f"""select r.record_id as id from emem.records as r
            where r.record_id operator(pg_catalog.=) any ($1)
              and (exists (select 1 from {tag_rows_matching(own_tags, tag_within)}{fragments.PROBE})
                   or {visible_ends(reader, "r.record_id", "$3", lanes_sql, "r.lane_name")})""",
        ["bigint[]", "text[]", "text[]"],
        [record_ids, terms, labels],
        cache=False,
    )
    visible = {row["id"] for row in rows}
    unseen = [record_id for record_id in record_ids if record_id not in visible]
    return visible | grammar_members(reader, unseen, stop_labels, lanes_sql, terms, tag_within)


def tag_rows_matching(where: str, tag_within: str) -> str:
    """The tag rows (rt) where `where` holds whose tag (v) the question's terms match (`tag_within`)."""
    return f"""emem.record_tags as rt
               join emem.tag_vocabulary as v on v.lane_name = rt.lane_name and v.tag = rt.tag
               where {where} and {tag_within}"""


def grammar_members(
    reader: Reader, record_ids: list[int], stop_labels: list[str], lanes_sql: str, terms: list[str], tag_within: str
) -> set[int]:
    """Which of these records a stop-word label's edge holds: one whose other end lies in the
    caller's lanes and holds a matched tag (`tag_within`, of the terms as $2). The edges, then
    their far ends' tags: a Citus cluster joins no rows of two lanes in one statement."""
    if not (record_ids and stop_labels):
        return set()
    edges = reader.execute(
        "tags.grammar_members",
        f"""select el.record_id, el.far_record_id from emem.edge_labels as el
            where el.record_id operator(pg_catalog.=) any ($1) and el.label operator(pg_catalog.=) any ($2)
                  {fragments.in_lanes("el.far_lane_name", lanes_sql)}""",
        ["bigint[]", "text[]"],
        [record_ids, stop_labels],
        cache=False,
    )
    far_ends = sorted({row["far_record_id"] for row in edges})
    if not far_ends:
        return set()
    far_tags = f"rt.record_id operator(pg_catalog.=) any ($1){fragments.in_lanes('rt.lane_name', lanes_sql)}"
    tagged = reader.execute(
        "tags.grammar_members",
        f"select distinct rt.record_id from {tag_rows_matching(far_tags, tag_within)}",
        ["bigint[]", "text[]"],
        [far_ends, terms],
        cache=False,
    )
    held = {row["record_id"] for row in tagged}
    return {row["record_id"] for row in edges if row["far_record_id"] in held}
