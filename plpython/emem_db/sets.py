"""Sets of records as plain data, and the one place that turns each kind into SQL.

A lookup's plan names the records a list holds (a tag's, a text query's, the ends of some edge
labels, a tier of broad parts...) with these values; SetSql renders every form a list needs from
the same value: a predicate over a record id, a query of their ids, the ids in record-id order
(when some index gives them so), and a count up to a limit. So the forms cannot disagree, and
explain shows the sets as they are (describe).

Within lanes (strict isolation) every form keeps to the caller's lanes: SetSql takes them once.
"""

from dataclasses import dataclass, fields
from typing import Any, Union

from . import fragments
from .fragments import quoted_array, quoted_tsquery


@dataclass(frozen=True)
class Tagged:
    """The records carrying one of these tags."""

    tags: tuple[str, ...]


@dataclass(frozen=True)
class TextMatching:
    """The records whose text matches this text-search query (its text)."""

    tsquery: str


@dataclass(frozen=True)
class LabelEnds:
    """The records that end an edge with one of these labels (within lanes: one whose ends both
    lie in them)."""

    labels: tuple[str, ...]


@dataclass(frozen=True)
class FarTagged:
    """The ends of edges with one of these labels whose other end carries one of these tags."""

    labels: tuple[str, ...]
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Listed:
    """These records."""

    ids: tuple[int, ...]


@dataclass(frozen=True)
class AnyOf:
    """The records of any of these sets."""

    members: tuple["RecordSet", ...]


@dataclass(frozen=True)
class Tier:
    """The records of every `held` set and of no `excluded` one, walked from `held[walk_from]`
    (the smallest, as the plan knows the sizes)."""

    held: tuple["RecordSet", ...]
    excluded: tuple["RecordSet", ...]
    walk_from: int = 0


RecordSet = Union[Tagged, TextMatching, LabelEnds, FarTagged, Listed, AnyOf, Tier]  # noqa: UP007 (a runtime alias)

NOTHING = Listed(())


def unique_ids(records: RecordSet) -> bool:
    """Whether SetSql.ids gives each record once."""
    match records:
        case Tagged(tags):
            return len(tags) == 1
        case AnyOf(members):
            return len(members) == 1 and unique_ids(members[0])
        case Tier(held, _, walk_from):
            return unique_ids(held[walk_from])
    return True


def describe(records: RecordSet) -> dict[str, Any]:
    """A set as explain shows it: its kind and its values."""
    shown: dict[str, Any] = {"set": type(records).__name__}
    for field in fields(records):
        value = getattr(records, field.name)
        if field.name in ("members", "held", "excluded"):
            shown[field.name] = [describe(member) for member in value]
        elif field.name == "ids":
            shown["ids"] = len(value)  # the count: a plan may hold thousands
        else:
            shown[field.name] = list(value) if isinstance(value, tuple) else value
    return shown


class SetSql:
    """Renders sets for one request: `plpy` quotes values, `lanes` (an array's SQL, None: every
    lane) keeps every form to the caller's lanes."""

    # A set of more labels than this has its ends read unordered (a union per label gives them in
    # record-id order, one index range each).
    MAX_ORDERED_LABELS = 20

    def __init__(self, plpy: Any, lanes: str | None) -> None:
        self.plpy = plpy
        self.lanes = lanes

    # ---- the forms ------------------------------------------------------------------------------------

    def holds(self, records: RecordSet, record_id: str) -> str:
        """SQL that is true when the record (an expression of its id) is in the set."""
        match records:
            case Tagged(tags):
                return fragments.holds_tag(record_id, self.texts(tags), self.lanes)
            case TextMatching(tsquery):
                return fragments.text_matches(record_id, quoted_tsquery(self.plpy, tsquery), self.lanes)
            case LabelEnds(labels):
                return (
                    f"exists (select 1 from emem.edge_labels as el where el.label operator(pg_catalog.=) any"
                    f" ({self.texts(labels)}) and el.record_id = {record_id}{self.ends_within()}{fragments.PROBE})"
                )
            case FarTagged(labels, tags):
                far_tagged = fragments.holds_tag("e.far_record_id", self.texts(tags), self.lanes)
                edges = self.edges_at(record_id, labels)
                return f"exists (select 1 from {edges} as e where {far_tagged}{fragments.PROBE})"
            case Listed(ids):
                return f"{record_id} operator(pg_catalog.=) any ({self.ids_array(ids)})" if ids else "false"
            case AnyOf(members):
                return (
                    "(" + " or ".join(self.holds(member, record_id) for member in members) + ")" if members else "false"
                )
            case Tier(held, excluded, _):
                clauses = [f"({self.holds(member, record_id)})" for member in held]
                clauses += [f"not ({self.holds(member, record_id)})" for member in excluded]
                return "(" + " and ".join(clauses) + ")"
        raise TypeError(records)

    def ids(self, records: RecordSet) -> str:
        """A query of the set's record ids (column record_id; a record may come more than once)."""
        match records:
            case Tagged(tags):
                return fragments.tagged(self.texts(tags), self.lanes)
            case TextMatching(tsquery):
                return fragments.text_matching(quoted_tsquery(self.plpy, tsquery), self.lanes)
            case LabelEnds(labels):
                return self.label_ends(labels, ordered=False)
            case FarTagged(labels, tags):
                far_tagged = fragments.holds_tag("e.far_record_id", self.texts(tags), self.lanes)
                return f"""select distinct e.record_id from ({self.matched_edge_rows(labels)}) as e
                           where {far_tagged}"""
            case Listed(ids):
                return f"select pg_catalog.unnest({self.ids_array(ids)}) as record_id"
            case AnyOf(members):
                return " union all ".join(f"({self.ids(member)})" for member in members) or self.ids(NOTHING)
            case Tier(held, _, walk_from):
                return self.walked(records, self.ids(held[walk_from]))
        raise TypeError(records)

    def ids_in_order(self, records: RecordSet) -> tuple[str, bool] | None:
        """A query of the set's ids in record-id order, and whether it passes only the set's own
        records (an index gives them in that order: a read of the first few passes only those); else
        a lazy read walks every record in id order, probing the set. None: the set is read whole."""
        match records:
            case Tagged((tag,)):
                return f"{fragments.tagged_with(self.plpy.quote_literal(tag), self.lanes)} order by rt.record_id", True
            case LabelEnds(labels) if len(labels) <= self.MAX_ORDERED_LABELS:
                return self.label_ends(labels, ordered=True), True
            case TextMatching():
                return f"{self.ids(records)} order by r.record_id", False
            case Tier(held, _, walk_from):
                source = self.ids_in_order(held[walk_from])
                source_sql, cheaply = source if source is not None else (self.ids(held[walk_from]), True)
                return f"{self.walked(records, source_sql)} order by found.record_id", cheaply
        return None

    def first_by_id(self, records: RecordSet, limit: int) -> str:
        """A query of the set's first `limit` ids by record id, read by the set's own index (the
        caller turns sequential scans off: BroadList.in_record_id_order) and sorted there. Ordered
        by an expression, so that the planner cannot walk the primary key instead: a walk passes
        every record below the set's first, however many (another lane's 100,000 matches at the top
        of the ids: 472 ms a find that read the whole match, 63 ms with this). Its cost follows the
        set's size, not the table's."""
        return f"""select found.record_id from ({self.distinct_ids(records)}) as found
                   order by found.record_id operator(pg_catalog.+) 0 limit {limit:d}"""

    def count_up_to(self, records: RecordSet, limit: int, planned_whole: bool = False) -> str:
        """A statement counting the set's distinct records up to a limit (column n), at a cost that
        grows with the limit, not with the set. `planned_whole`: for a set that may hold far fewer
        records than its estimate (an intersection of broad parts, often empty), planned for all
        its rows (its index) and read up to the limit. Under a LIMIT the planner bets that a
        sequential scan soon finds the first few, and an empty intersection then reads every
        record (96 ms against 5 at 100k)."""
        ids = self.distinct_ids(records)
        if planned_whole:
            return f"""with found as materialized ({ids})
                       select pg_catalog.count(*) as n from (select from found limit {limit:d}) as capped"""
        return f"select pg_catalog.count(*) as n from ({ids} limit {limit:d}) as capped"

    def distinct_ids(self, records: RecordSet) -> str:
        """A query of the set's ids, each once."""
        ids = self.ids(records)
        return ids if unique_ids(records) else f"select distinct i.record_id from ({ids}) as i"

    def count(self, records: RecordSet) -> str:
        """A statement counting the set's distinct records (column n)."""
        return f"select pg_catalog.count(distinct i.record_id) as n from ({self.ids(records)}) as i"

    # ---- the shared pieces --------------------------------------------------------------------------------

    def walked(self, tier: Tier, source: str) -> str:
        """The records of `source` (a query of one held set's ids) that the rest of the tier holds."""
        rest = Tier(tuple(m for n, m in enumerate(tier.held) if n != tier.walk_from), tier.excluded)
        condition = self.holds(rest, "found.record_id") if rest.held or rest.excluded else "true"
        return f"select found.record_id from ({source}) as found (record_id) where {condition}"

    def label_ends(self, labels: tuple[str, ...], ordered: bool) -> str:
        """The records that end an edge with one of these labels, without duplicates; in record-id
        order (a merge of the labels' index ranges) when asked."""
        within = self.ends_within()
        if not ordered:
            return (
                "select distinct el.record_id from emem.edge_labels as el"
                f" where el.label operator(pg_catalog.=) any ({self.texts(labels)}){within}"
            )
        ranges = " union all ".join(
            f"(select el.record_id from emem.edge_labels as el where el.label = {self.plpy.quote_literal(label)}"
            f"{within} order by el.record_id)"
            for label in labels
        )
        return f"select distinct u.record_id from ({ranges}) as u order by u.record_id"

    def matched_edge_rows(self, labels: tuple[str, ...] | str) -> str:
        """The rows (record_id, label_terms, far_record_id) of every end of an edge with one of these
        labels (a tuple, or an array's SQL such as a parameter)."""
        quoted = labels if isinstance(labels, str) else self.texts(labels)
        return f"""select el.record_id, el.label_terms, el.far_record_id from emem.edge_labels as el
                   where el.label operator(pg_catalog.=) any ({quoted}){self.ends_within()}"""

    def edges_at(self, record_id: str, labels: tuple[str, ...] | str) -> str:
        """The edges with one of these labels at this record (a lateral subquery): rows
        (label_terms, far_record_id)."""
        quoted = labels if isinstance(labels, str) else self.texts(labels)
        return f"""(select el.label_terms, el.far_record_id from emem.edge_labels as el
                    where el.record_id = {record_id}
                      and el.label operator(pg_catalog.=) any ({quoted}){self.ends_within()})"""

    def ends_within(self, alias: str = "el") -> str:
        """An edge label row counts within the caller's lanes when both its ends lie in them."""
        return fragments.in_lanes(f"{alias}.lane_name", self.lanes) + fragments.in_lanes(
            f"{alias}.far_lane_name", self.lanes
        )

    def texts(self, values: tuple[str, ...]) -> str:
        return quoted_array(self.plpy, list(values), "text")

    @staticmethod
    def ids_array(ids: tuple[int, ...]) -> str:
        """The records at hand as a constant array, hashed once per statement."""
        return f"'{{{','.join(str(int(i)) for i in ids)}}}'::bigint[]"
