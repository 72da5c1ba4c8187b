-- Reads for the acting role: only the records of the lanes its agent profile reads (a role
-- bound to no profile is refused). They run as the extension's owner and filter by lane
-- themselves, so that they refuse instead of silently answering nothing.

create view emem.record_summaries with (security_invoker = true) as
    select r.record_id, r.kind, r.lane_name as lane, r.content,
           array(select t.tag from emem.record_tags as t
                 where t.record_id = r.record_id and t.lane_name = r.lane_name order by t.tag) as tags,
           r.authority, r.occurred_at, r.created_at, r.thread_id, r.thread_position, r.metadata
    from emem.records as r;
comment on view emem.record_summaries is 'Records with their tags, as the caller may read them.';

create function emem.records_with_all_tags(tags text[]) returns setof emem.record_summaries
language plpgsql stable
security definer  -- filters by the acting role's lanes (emem._readable_lanes_or_refuse)
set search_path = pg_catalog, pg_temp
as $$
declare
    wanted text[] := emem._check_tags(tags);
    lanes text[] := emem._readable_lanes_or_refuse();
begin
    if lanes is null then
        return query
            select s.* from emem.record_summaries as s
            where s.record_id in (select rt.record_id from emem.record_tags as rt
                                  where rt.tag operator(pg_catalog.=) any (wanted)
                                  group by rt.record_id
                                  having pg_catalog.count(*) = pg_catalog.cardinality(wanted))
            order by s.record_id;
    else
        -- Within lanes the tags are read lane first: no other lane's tags are read.
        return query
            select s.* from emem.record_summaries as s
            where s.lane operator(pg_catalog.=) any (lanes)
              and s.record_id in (select rt.record_id from emem.record_tags as rt
                                  where rt.lane_name operator(pg_catalog.=) any (lanes)
                                    and rt.tag operator(pg_catalog.=) any (wanted)
                                  group by rt.record_id
                                  having pg_catalog.count(*) = pg_catalog.cardinality(wanted))
            order by s.record_id;
    end if;
end
$$;
comment on function emem.records_with_all_tags(text[]) is
  'Label intersection: every record (in the caller''s lanes) carrying all of the given tags (1 to 1000), nothing else.';

create function emem.e_timeline(
    from_time timestamptz, to_time timestamptz default null, page integer default 1, page_size integer default 30,
    kinds text[] default null, tags text[] default null
) returns setof emem.record_summaries
language plpgsql stable
security definer  -- filters by the acting role's lanes (emem._readable_lanes_or_refuse)
set search_path = pg_catalog, pg_temp
as $$
declare
    lanes text[] := emem._readable_lanes_or_refuse();
    wanted_tags text[];
    wanted_kinds emem.record_kind[];
begin
    to_time := coalesce(to_time, 'infinity');
    if from_time is null or from_time > to_time then
        raise exception 'the timeline needs from_time <= to_time, got % and %',
            coalesce(from_time::text, 'NULL'), to_time using errcode = '22023',
            hint = 'to_time may be NULL: no upper bound.';
    end if;
    if page is null or page not between 1 and 100000 then
        raise exception 'page % is out of range', coalesce(page::text, 'NULL')
            using errcode = '22023', hint = 'Accepted: 1 to 100000.';
    end if;
    if page_size is null or page_size not between 1 and 1000 then
        raise exception 'page_size % is out of range', coalesce(page_size::text, 'NULL')
            using errcode = '22023', hint = 'Accepted: 1 to 1000.';
    end if;
    if kinds is not null and (pg_catalog.cardinality(kinds) > 100
       or not kinds <@ pg_catalog.enum_range(null::emem.record_kind)::text[]) then
        raise exception 'kinds holds an unknown kind' using errcode = '22023',
            hint = 'Accepted kinds: ' || pg_catalog.array_to_string(pg_catalog.enum_range(null::emem.record_kind), ', ') || '.';
    end if;
    wanted_kinds := kinds::emem.record_kind[];
    wanted_tags := case when e_timeline.tags is not null then emem._check_tags(e_timeline.tags) end;
    if emem._distributed() then
        -- Citus pushes no LIMIT into a subquery lateral to a function's rows (below): each shard
        -- orders its records by time and the coordinator merges them.
        return query
            select s.*
            from emem.record_summaries as s
            where (lanes is null or s.lane = any (lanes)) and s.occurred_at between from_time and to_time
              and (wanted_kinds is null or s.kind = any (wanted_kinds))
              and (wanted_tags is null or s.tags @> wanted_tags)
            order by s.occurred_at, s.record_id
            limit page_size offset (page - 1) * page_size;
        return;
    end if;
    -- Each lane's records come in time order from its own index (records_by_lane_and_time), as
    -- many as the page reaches, and are merged: one index serves every reader (no index over all
    -- lanes for every write to keep), and a reader of several lanes sorts no lane's whole range.
    return query
        select s.*
        from pg_catalog.unnest(coalesce(lanes, array(select known.lane_name from emem.lanes as known))) as l (lane_name)
        cross join lateral (
            select s.*
            from emem.record_summaries as s
            where s.lane = l.lane_name and s.occurred_at between from_time and to_time
              and (wanted_kinds is null or s.kind = any (wanted_kinds))
              and (wanted_tags is null or s.tags @> wanted_tags)
            order by s.occurred_at, s.record_id
            limit page * page_size) as s
        order by s.occurred_at, s.record_id
        limit page_size offset (page - 1) * page_size;
end
$$;
comment on function emem.e_timeline(timestamptz, timestamptz, integer, integer, text[], text[]) is
  'Records by date (occurred_at, then id) between from_time and to_time inclusive (NULL: no upper bound), in the caller''s lanes; optional filters: kinds, tags (all of them).';
