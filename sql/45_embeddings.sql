-- Embeddings that stay true. Every record needs a vector, and every window run a current
-- vector, in every embedding space; emem.embedding_queue holds what is missing, kept by the
-- triggers below, and embedding workers (`emem embed`, or any client of the functions at the end)
-- drain it through the gateway of the space's model.
--
-- - A new record, a new space, a window written in one space (for the others), a window stored
--   without a vector: queued.
-- - An edited record (its content changed): its vectors are removed and the windows holding it
--   lose theirs (NULL: they keep their run, which only the window rows remember); all are queued
--   again in every space, so no vector answers for text that is gone.
-- - A vector or window vector written: its entry leaves the queue.
-- Each trigger works from the whole state it sees (what exists and lacks a vector), so the queue
-- comes out the same whatever order pg_restore -j loads the tables in; it is not dumped.
--
-- Workers claim entries with FOR UPDATE SKIP LOCKED in a transaction they hold while the gateway
-- embeds, and store the vectors in it: several workers never take the same entry; a worker that
-- dies releases its entries with its transaction. An edit queues its record again with ON
-- CONFLICT DO UPDATE, which waits for a worker holding the entry, and only then removes the
-- vectors: a vector stored for the text before the edit is removed after it.

-- The lanes whose queue the acting role works: every lane for the extension's owner (NULL), else
-- those its agent profile both reads (it sends their text to the gateway) and writes (it stores
-- their vectors). A role bound to no profile is refused.
create function emem._embedding_lanes() returns text[]
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    return (select case when readable is null then null else array(
        select l from pg_catalog.unnest(readable) as l
        intersect
        select l from pg_catalog.unnest(emem._lanes_of(emem._acting_role(), true)) as l
        order by 1) end
    from emem._readable_lanes_or_refuse() as readable);
end
$$;
comment on function emem._embedding_lanes() is
  'The lanes whose embedding work the acting role may do: those it reads and writes (NULL: every lane); 42501 for a role bound to no agent profile.';

-- ---- what is missing ----------------------------------------------------------------------------

-- Everything a space lacks, queued (entries already there are kept): records without a vector in
-- it, and window runs known from any space's windows without a current window in it, whose
-- records are all still there. Only the given lanes (NULL: every lane).
create function emem._queue_missing(space_id integer, lanes text[]) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    added_records bigint;
    added_windows bigint;
begin
    insert into emem.embedding_queue (space_id, lane_name, record_id)
    select _queue_missing.space_id, r.lane_name, r.record_id
    from emem.records as r
    where (lanes is null or r.lane_name = any (lanes))
      and not exists (select 1 from emem.record_vectors as v
                      where v.space_id = _queue_missing.space_id and v.record_id = r.record_id and v.lane_name = r.lane_name)
      and not exists (select 1 from emem.embedding_queue as q  -- queued already: no id drawn for it
                      where q.space_id = _queue_missing.space_id and q.record_id = r.record_id
                        and q.lane_name = r.lane_name)
    order by r.record_id
    on conflict do nothing;
    get diagnostics added_records = row_count;
    insert into emem.embedding_queue (space_id, lane_name, thread_kind, thread_id, first_position, last_position)
    select _queue_missing.space_id, run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position
    from (select distinct w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position
          from emem.windows as w
          where lanes is null or w.lane_name = any (lanes)) as run
    where not exists (select 1 from emem.windows as current
                      where current.space_id = _queue_missing.space_id and current.embedding is not null
                        and (current.lane_name, current.thread_kind, current.thread_id, current.first_position,
                             current.last_position)
                          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position))
      and not exists (select 1 from emem.embedding_queue as q
                      where q.space_id = _queue_missing.space_id and q.record_id is null
                        and (q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position)
                          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position))
      and (select pg_catalog.count(*) from emem.records as r
           where r.lane_name = run.lane_name and r.kind = run.thread_kind and r.thread_id = run.thread_id
             and r.thread_position between run.first_position and run.last_position)
          = run.last_position - run.first_position + 1
    order by run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position
    on conflict do nothing;
    get diagnostics added_windows = row_count;
    return added_records + added_windows;
end
$$;
comment on function emem._queue_missing(integer, text[]) is
  'Queues every record and window run of the lanes (NULL: all) that lacks a current vector in the space; returns how many entries it added.';

-- How much of a space's work is done, in some lanes (NULL: every lane). A record counts as
-- embedded unless its entry is queued and its vector really missing; a window run counts as
-- embedded when the space holds a window with a vector for it. Counted from the queue, so cheap
-- while little is missing; the records are counted whole.
create function emem._vector_coverage(space_id integer, lanes text[]) returns jsonb
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    records bigint;
    records_missing bigint;
    windows bigint;
    windows_missing bigint;
begin
    -- Statements of their own (planned for the values given): the queue of a space being filled
    -- holds every record, that of the active one little.
    select pg_catalog.count(*) into records from emem.records as r where lanes is null or r.lane_name = any (lanes);
    select pg_catalog.count(*) into records_missing
    from emem.embedding_queue as q
    where q.space_id = _vector_coverage.space_id and q.record_id is not null
      and (lanes is null or q.lane_name = any (lanes))
      and exists (select 1 from emem.records as r where r.record_id = q.record_id and r.lane_name = q.lane_name)
      and not exists (select 1 from emem.record_vectors as v
                      where v.space_id = q.space_id and v.record_id = q.record_id and v.lane_name = q.lane_name);
    select pg_catalog.count(*) into windows
    from emem.windows as w
    where w.space_id = _vector_coverage.space_id and w.embedding is not null
      and (lanes is null or w.lane_name = any (lanes));
    select pg_catalog.count(*) into windows_missing
    from (select q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position
          from emem.embedding_queue as q
          where q.space_id = _vector_coverage.space_id and q.record_id is null
            and (lanes is null or q.lane_name = any (lanes))
            and not exists (select 1 from emem.windows as w
                            where w.space_id = q.space_id and w.embedding is not null
                              and (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                                = (q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position))
          union
          select w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position
          from emem.windows as w
          where w.space_id = _vector_coverage.space_id and w.embedding is null
            and (lanes is null or w.lane_name = any (lanes))) as runs;
    return pg_catalog.jsonb_build_object(
        'space_id', space_id,
        'records', records,
        'records_with_vector', records - records_missing,
        'windows', windows + windows_missing,
        'windows_with_vector', windows,
        'share', pg_catalog.round(least(
            case when records = 0 then 1 else 1 - records_missing::numeric / records end,
            case when windows_missing = 0 then 1 else windows::numeric / (windows + windows_missing) end), 6)::float8);
end
$$;
comment on function emem._vector_coverage(integer, text[]) is
  'A space''s coverage in some lanes (NULL: all): records and windows, how many of them have a current vector, and the smaller of the two shares.';

-- Whether a space's coverage in some lanes is below the threshold; cheap while nothing is
-- missing (one probe of the queue), which is when finds ask most. The checks of an entry are
-- scalar subqueries, probed entry by entry up to the first one really missing (an EXISTS could
-- be hashed over every vector of the space).
create function emem._coverage_below(space_id integer, lanes text[], threshold double precision) returns boolean
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    -- Cheap while nothing is missing, which is when finds ask most: the queue is empty or nearly,
    -- and each entry is probed by its keys (lane first, as a cluster's shards keep them).
    if threshold <= 0 or not (
        exists (select 1 from emem.embedding_queue as q
                join emem.records as r on r.lane_name = q.lane_name and r.record_id = q.record_id
                where q.space_id = _coverage_below.space_id and q.record_id is not null
                  and (lanes is null or q.lane_name = any (lanes))
                  and not exists (select 1 from emem.record_vectors as v
                                  where v.lane_name = q.lane_name and v.space_id = q.space_id
                                    and v.record_id = q.record_id))
        or exists (select 1 from emem.embedding_queue as q
                   where q.space_id = _coverage_below.space_id and q.record_id is null
                     and (lanes is null or q.lane_name = any (lanes))
                     and not exists (select 1 from emem.windows as w
                                     where w.lane_name = q.lane_name and w.space_id = q.space_id
                                       and w.embedding is not null and w.thread_kind = q.thread_kind
                                       and w.thread_id = q.thread_id and w.first_position = q.first_position
                                       and w.last_position = q.last_position))) then
        return false;
    end if;
    return threshold >= 1 or (emem._vector_coverage(space_id, lanes)->>'share')::float8 < threshold;
end
$$;
comment on function emem._coverage_below(integer, text[], double precision) is
  'Whether the share of records and windows with a current vector in the space (in the lanes; NULL: all) is below the threshold.';

-- emem.vector_coverage_threshold as the acting role's finds read it: the session's for a role
-- that reads every lane, the owner's choice for an agent (emem_db.settings).
create function emem._vector_coverage_threshold() returns double precision
language plpython3u stable
set search_path = pg_catalog, pg_temp
as $$
from @MODULE@.entry import backend
from @MODULE@.settings import SettingError, acting_role_values, coverage_threshold
state = backend(GD, plpy, "@EXTVERSION@")
try:
    return coverage_threshold(acting_role_values(state))
except SettingError as error:
    state.fail(str(error))
$$;
comment on function emem._vector_coverage_threshold() is
  'The emem.vector_coverage_threshold the acting role''s finds and health run under (default 1: every vector).';

-- Row-level security: an agent sees the queued work of the lanes it reads.
create policy readable_lane on emem.embedding_queue for select
    using (lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user)));

-- ---- the embedding workers' API --------------------------------------------------------------
-- A worker, in one transaction: claim_embeddings, embed the texts through the gateway of the
-- space's model, store_embeddings (or defer_embeddings for texts the gateway refused), commit.
-- The owner works every lane; an agent the lanes it reads and writes.

create function emem._check_space_id(space_id integer) returns emem.embedding_spaces
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces;
begin
    select * into space from emem.embedding_spaces as s where s.space_id = _check_space_id.space_id;
    if not found then
        raise exception 'unknown embedding space %', coalesce(space_id::text, 'NULL')
            using errcode = '22023', hint = 'See emem.embedding_spaces for the spaces that exist.';
    end if;
    return space;
end
$$;
comment on function emem._check_space_id(integer) is 'The embedding space with this id, or an error naming it.';

create function emem.embedding_coverage(space_id integer default null) returns jsonb
language plpgsql stable
security definer  -- counts the queue and tables of the acting role's lanes only
set search_path = pg_catalog, pg_temp
as $$
declare
    lanes text[] := emem._readable_lanes_or_refuse();
    space emem.embedding_spaces := emem._resolve_space(space_id);
begin
    return emem._vector_coverage(space.space_id, lanes)
        || pg_catalog.jsonb_build_object(
               'model_name', space.model_name, 'dimension', space.dimension, 'is_active', space.is_active,
               'lanes', case when lanes is null then 'all' else 'readable' end,
               'deferred', (select pg_catalog.count(*) from emem.embedding_queue as q
                            where q.space_id = space.space_id and q.not_before > pg_catalog.now()
                              and (lanes is null or q.lane_name = any (lanes))),
               'last_error', (select q.last_error from emem.embedding_queue as q
                              where q.space_id = space.space_id and q.last_error is not null
                                and (lanes is null or q.lane_name = any (lanes))
                              order by q.not_before desc nulls last, q.queue_id limit 1));
end
$$;
comment on function emem.embedding_coverage(integer) is
  'How far an embedding space (NULL: the active one) is filled, in the lanes the caller reads (lanes: all for the owner): records and windows, how many have a current vector, the smaller share, and entries deferred after the gateway refused their text, with the latest error.';

create function emem.queue_missing_embeddings(space_id integer) returns bigint
language plpgsql
security definer  -- writes the queue of the acting role's lanes only
set search_path = pg_catalog, pg_temp
as $$
declare
    lanes text[] := emem._embedding_lanes();
    space emem.embedding_spaces := emem._check_space_id(space_id);
begin
    return emem._queue_missing(space.space_id, lanes);
end
$$;
comment on function emem.queue_missing_embeddings(integer) is
  'Queues what the space lacks in the lanes the caller works (after a load with the triggers off, say); returns how many entries it added. emem embed calls it when it starts.';

-- Claimed entries whose work is done or can no longer be done (a record gone, a run with a
-- record missing) leave the queue; returns how many are left to embed.
create function emem._drop_done_entries(queue_ids bigint[]) returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    dropped integer;
begin
    delete from emem.embedding_queue as q
    where q.queue_id = any (queue_ids) and case
        when q.record_id is not null then
            not exists (select 1 from emem.records as r where r.record_id = q.record_id and r.lane_name = q.lane_name)
            or exists (select 1 from emem.record_vectors as v
                       where v.space_id = q.space_id and v.record_id = q.record_id and v.lane_name = q.lane_name)
        else
            exists (select 1 from emem.windows as w
                    where w.space_id = q.space_id and w.embedding is not null
                      and (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                        = (q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position))
            or (select pg_catalog.count(*) from emem.records as r
                where r.lane_name = q.lane_name and r.kind = q.thread_kind and r.thread_id = q.thread_id
                  and r.thread_position between q.first_position and q.last_position)
               <> q.last_position - q.first_position + 1
        end;
    get diagnostics dropped = row_count;
    return pg_catalog.cardinality(queue_ids) - dropped;
end
$$;
comment on function emem._drop_done_entries(bigint[]) is
  'Takes claimed queue entries whose work is done or void off the queue; returns how many are left to embed.';

-- Up to `batch_size` due entries of a space that no other worker holds, locked, lane by lane: first
-- an equal share of every lane with work (so that a flood in one lane delays no other lane's
-- vectors), then what is left in the order the work came. Each statement locks one lane's rows (on
-- a cluster, one shard's: Citus locks rows only with the distribution column given).
create function emem._claim_fairly(space_id integer, lanes text[], batch_size integer) returns bigint[]
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    waiting text[];
    lane text;
    claimed bigint[] := '{}';
    share integer;
begin
    waiting := array(
        select q.lane_name from emem.embedding_queue as q
        where q.space_id = _claim_fairly.space_id and (lanes is null or q.lane_name = any (lanes))
          and (q.not_before is null or q.not_before <= pg_catalog.clock_timestamp())
        group by q.lane_name order by pg_catalog.min(q.queue_id));
    if pg_catalog.cardinality(waiting) = 0 then
        return claimed;
    end if;
    share := pg_catalog.ceil(batch_size::numeric / pg_catalog.cardinality(waiting));
    for pass in 1..2 loop
        foreach lane in array waiting loop
            exit when pg_catalog.cardinality(claimed) >= batch_size;
            claimed := claimed || array(
                select q.queue_id from emem.embedding_queue as q
                where q.lane_name = lane and q.space_id = _claim_fairly.space_id
                  and (q.not_before is null or q.not_before <= pg_catalog.clock_timestamp())
                  and q.queue_id <> all (claimed)
                order by q.queue_id
                limit case when pass = 1 then least(share, batch_size - pg_catalog.cardinality(claimed))
                           else batch_size - pg_catalog.cardinality(claimed) end
                for update skip locked);
        end loop;
    end loop;
    return claimed;
end
$$;
comment on function emem._claim_fairly(integer, text[], integer) is
  'Locks up to batch_size due queue entries of a space in these lanes (NULL: all), an equal share of each lane with work first; returns their ids.';

create function emem.claim_embeddings(space_id integer, batch_size integer default 64)
returns table (queue_id bigint, record_id bigint, member_record_ids bigint[], texts text[], attempts integer)
language plpgsql
security definer  -- locks and reads the queue and texts of the acting role's lanes only
set search_path = pg_catalog, pg_temp
as $$
declare
    lanes text[] := emem._embedding_lanes();
    space emem.embedding_spaces := emem._check_space_id(space_id);
    claimed bigint[];
begin
    if batch_size is null or batch_size not between 1 and 1000 then
        raise exception 'batch_size % is out of range', coalesce(batch_size::text, 'NULL')
            using errcode = '22023', hint = 'Accepted: 1 to 1000.';
    end if;
    -- Work done or void leaves without a gateway call; when a whole batch was such, the next is taken.
    loop
        claimed := emem._claim_fairly(space.space_id, lanes, batch_size);
        exit when pg_catalog.cardinality(claimed) = 0 or emem._drop_done_entries(claimed) > 0;
    end loop;
    return query
    select q.queue_id, q.record_id, null::bigint[], array[r.content], q.attempts
    from emem.embedding_queue as q join emem.records as r on r.record_id = q.record_id and r.lane_name = q.lane_name
    where q.queue_id = any (claimed)
    union all
    select q.queue_id, null::bigint, members.ids, members.texts, q.attempts
    from emem.embedding_queue as q
    cross join lateral (
        select pg_catalog.array_agg(r.record_id order by r.thread_position) as ids,
               pg_catalog.array_agg(r.content order by r.thread_position) as texts
        from emem.records as r
        where r.lane_name = q.lane_name and r.kind = q.thread_kind and r.thread_id = q.thread_id
          and r.thread_position between q.first_position and q.last_position) as members
    where q.queue_id = any (claimed) and q.record_id is null
    order by 1;
end
$$;
comment on function emem.claim_embeddings(integer, integer) is
  'Takes up to batch_size (1 to 1000) queued entries of the space that no other worker holds, in the lanes the caller reads and writes, and returns what to embed: a record''s text, or a window''s member records and their texts (embed them joined by line breaks). The entries stay locked until the transaction ends: call store_embeddings in the same transaction.';

create function emem.store_embeddings(queue_ids bigint[], embeddings public.vector[]) returns integer
language plpgsql
security definer  -- writes the vectors and windows of the acting role's lanes only
set search_path = pg_catalog, pg_temp
as $$
declare
    lanes text[] := emem._embedding_lanes();
    held bigint[];
    lane text;
    problem record;
    runs emem._window_run[];
begin
    if queue_ids is null or embeddings is null or pg_catalog.cardinality(queue_ids) not between 1 and 1000
       or pg_catalog.cardinality(queue_ids) <> pg_catalog.cardinality(embeddings)
       or pg_catalog.array_position(queue_ids, null) is not null
       or pg_catalog.array_position(embeddings, null) is not null then
        raise exception 'store_embeddings needs 1 to 1000 queue ids and as many vectors, without NULLs'
            using errcode = '22023';
    end if;
    -- Only entries still queued (an edit queues its record again under a new id) in the caller's
    -- lanes; the worker holds them since its claim, anyone else waits here for the one who does.
    held := '{}';
    for lane in select distinct q.lane_name from emem.embedding_queue as q
                where q.queue_id = any (queue_ids) and (lanes is null or q.lane_name = any (lanes))
                order by 1 loop
        held := held || array(select q.queue_id from emem.embedding_queue as q
                              where q.lane_name = lane and q.queue_id = any (queue_ids)
                              order by q.queue_id
                              for update);
    end loop;
    -- Each entry's vector by its place in the arrays (read from the queue, not joined to an unnest:
    -- on a cluster that would pull the queue to the coordinator).
    select q.queue_id, public.vector_dims(given.embedding) as dimensions, s.space_id, s.model_name, s.dimension
    into problem
    from emem.embedding_queue as q
    cross join lateral (select embeddings[pg_catalog.array_position(queue_ids, q.queue_id)] as embedding) as given
    join emem.embedding_spaces as s on s.space_id = q.space_id
    where q.queue_id = any (held)
      and (public.vector_dims(given.embedding) <> s.dimension or public.vector_norm(given.embedding) = 0)
    order by q.queue_id limit 1;
    if found and problem.dimensions <> problem.dimension then
        raise exception 'the vector for queue entry % has % dimensions but embedding space % (%) has %',
            problem.queue_id, problem.dimensions, problem.space_id, problem.model_name, problem.dimension
            using errcode = '22023';
    elsif found then
        raise exception 'the vector for queue entry % is the zero vector, which has no cosine distance', problem.queue_id
            using errcode = '22023';
    end if;
    insert into emem.record_vectors as rv (space_id, record_id, embedding, lane_name)
    select q.space_id, q.record_id, public.l2_normalize(embeddings[pg_catalog.array_position(queue_ids, q.queue_id)]),
           q.lane_name
    from emem.embedding_queue as q
    where q.queue_id = any (held) and q.record_id is not null
      and exists (select 1 from emem.records as r where r.record_id = q.record_id and r.lane_name = q.lane_name)
    order by q.space_id, q.record_id
    on conflict on constraint record_vectors_pkey do update set embedding = excluded.embedding;
    with written as (
        insert into emem.windows as w (space_id, lane_name, thread_kind, thread_id, first_position, last_position, embedding)
        select q.space_id, q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position,
               public.l2_normalize(embeddings[pg_catalog.array_position(queue_ids, q.queue_id)])
        from emem.embedding_queue as q
        where q.queue_id = any (held) and q.record_id is null
        order by q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position, q.space_id
        on conflict on constraint one_window_per_run do update set embedding = excluded.embedding
        returning w.window_id, w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position
    ), members as (
        insert into emem.window_members (window_id, record_id, lane_name)
        select written.window_id, r.record_id, r.lane_name
        from written join emem.records as r
      on r.lane_name = written.lane_name and r.kind = written.thread_kind and r.thread_id = written.thread_id
         and r.thread_position between written.first_position and written.last_position
        on conflict do nothing
    )
    select pg_catalog.array_agg(distinct row(w.lane_name, w.thread_kind, w.thread_id, w.first_position,
                                             w.last_position)::emem._window_run)
    into runs from written as w;
    delete from emem.embedding_queue as q where q.queue_id = any (held);
    -- A run written in one space is wanted in every other.
    perform emem._sync_runs(coalesce(runs, '{}'));
    return pg_catalog.cardinality(held);
end
$$;
comment on function emem.store_embeddings(bigint[], public.vector[]) is
  'Stores the vectors of claimed queue entries (1 to 1000, each vector of its space''s dimension; kept at unit length) as record vectors or windows, and takes the entries off the queue; returns how many entries it completed. Entries no longer queued (an edit queued the record again under a new id) are skipped.';

create function emem.defer_embeddings(queue_ids bigint[], reason text, retry_after double precision)
returns integer
language plpgsql
security definer  -- writes the queue of the acting role's lanes only
set search_path = pg_catalog, pg_temp
as $$
declare
    lanes text[] := emem._embedding_lanes();
    deferred integer;
begin
    if queue_ids is null or pg_catalog.cardinality(queue_ids) not between 1 and 1000
       or pg_catalog.array_position(queue_ids, null) is not null then
        raise exception 'defer_embeddings needs 1 to 1000 queue ids without NULLs' using errcode = '22023';
    end if;
    if reason is null or emem._is_blank(reason) or pg_catalog.length(reason) > 1000 then
        raise exception 'reason must be a text of 1 to 1000 characters, saying why the texts were not embedded'
            using errcode = '22023';
    end if;
    if retry_after is null or not retry_after between 0 and 86400 then
        raise exception 'retry_after % is out of range', coalesce(retry_after::text, 'NULL')
            using errcode = '22023', hint = 'Accepted: 0 to 86400 seconds.';
    end if;
    update emem.embedding_queue as q
        set attempts = q.attempts + 1, last_error = reason,
            not_before = pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => retry_after)
        where q.queue_id = any (queue_ids) and (lanes is null or q.lane_name = any (lanes));
    get diagnostics deferred = row_count;
    return deferred;
end
$$;
comment on function emem.defer_embeddings(bigint[], text, double precision) is
  'Puts claimed queue entries back for retry_after seconds (0 to 86400) after the gateway refused their texts, with why (at most 1000 characters); counts their attempts; returns how many.';
