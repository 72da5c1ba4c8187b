-- The rows that derive from others, written by the write API in the statements that write what
-- they derive from (there are no triggers: see 10_schema.sql). Each function is set-based: a bulk
-- write touches each tag, label or queue entry once. Rows are written in key order, so that
-- concurrent writers of one lane lock them in one order; a writer writes only rows of the lanes it
-- writes, so that no lock is ever shared between lanes.
-- They run as the extension's owner (they are called by SECURITY DEFINER functions only).

-- A label's terms as the vocabularies hold them: known labels are not analysed again.
create function emem._tag_terms(tag text) returns text[]
language plpgsql stable strict
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    return (select coalesce((select v.tag_terms from emem.tag_vocabulary as v where v.tag operator(pg_catalog.=) _tag_terms.tag limit 1),
                    emem._label_terms(tag)));
end
$$;
comment on function emem._tag_terms(text) is 'A tag''s terms: from the tag vocabulary when any lane knows the tag, else analysed.';

create function emem._tag_namespace_terms(tag text) returns text[]
language plpgsql stable strict
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    return (select coalesce((select v.namespace_terms from emem.tag_vocabulary as v
                     where v.tag operator(pg_catalog.=) _tag_namespace_terms.tag limit 1),
                    emem._label_namespace_terms(tag)));
end
$$;
comment on function emem._tag_namespace_terms(text) is 'A tag''s namespace terms: from the tag vocabulary when known, else analysed.';

-- ---- tags ------------------------------------------------------------------------------------------

-- Tags written (parallel arrays: lane and tag in stored form, one element per record tagged)
-- counted in their lanes' vocabulary. PL/pgSQL: Citus plans no SQL function's statement that
-- reads its parameters.
create function emem._count_tags(lanes text[], tags text[]) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    insert into emem.tag_vocabulary as v (lane_name, tag, tag_terms, namespace_terms, record_count)
    -- A tag the lane knows keeps its terms: only new tags are analysed (about 50 us each).
    select c.lane_name, c.tag, coalesce(known.tag_terms, emem._tag_terms(c.tag)),
           coalesce(known.namespace_terms, emem._tag_namespace_terms(c.tag)), c.records
    from (select w.lane_name, w.tag, pg_catalog.count(*) as records
          from rows from (pg_catalog.unnest(lanes), pg_catalog.unnest(tags)) as w (lane_name, tag)
          group by w.lane_name, w.tag) as c
    left join emem.tag_vocabulary as known on known.lane_name = c.lane_name and known.tag = c.tag
    order by c.lane_name, c.tag
    on conflict (lane_name, tag) do update set record_count = v.record_count + excluded.record_count;
end
$$;
comment on function emem._count_tags(text[], text[]) is
  'Counts tags just written (parallel arrays of lane and stored tag, one element per record) in their lanes'' tag vocabulary.';

-- Tags (record, lane, tag: parallel arrays, tags in stored form) written, and counted in their
-- lanes' vocabulary; tags a record has already are kept. Returns how many were new.
create function emem._add_tags(record_ids bigint[], lanes text[], tags text[]) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    added_lanes text[];
    added_tags text[];
begin
    with wanted as (
        select distinct w.record_id, w.lane_name, w.tag
        from rows from (pg_catalog.unnest(record_ids), pg_catalog.unnest(lanes), pg_catalog.unnest(tags)) as w (record_id, lane_name, tag)
    ), written as (
        insert into emem.record_tags as rt (record_id, tag, lane_name)
        select w.record_id, w.tag, w.lane_name from wanted as w
        order by w.lane_name, w.tag, w.record_id
        on conflict do nothing
        returning rt.lane_name, rt.tag
    )
    select pg_catalog.array_agg(w.lane_name), pg_catalog.array_agg(w.tag) into added_lanes, added_tags from written as w;
    perform emem._count_tags(added_lanes, added_tags);
    return coalesce(pg_catalog.cardinality(added_lanes), 0);
end
$$;
comment on function emem._add_tags(bigint[], text[], text[]) is
  'Writes tags (parallel arrays of record, lane and stored tag) and counts them in their lanes'' tag vocabulary; returns how many were new.';

-- Tags removed: those of these records (all of them when tags is NULL), uncounted.
create function emem._remove_tags(record_ids bigint[], tags text[]) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    removed bigint;
begin
    with gone as (
        delete from emem.record_tags as rt
        where rt.record_id = any (record_ids) and (tags is null or rt.tag = any (tags))
        returning rt.lane_name, rt.tag
    ), uncounted as (
        update emem.tag_vocabulary as v set record_count = v.record_count - g.records
        from (select g.lane_name, g.tag, pg_catalog.count(*) as records from gone as g
              group by g.lane_name, g.tag order by g.lane_name, g.tag) as g
        where v.lane_name = g.lane_name and v.tag = g.tag
        returning g.records
    )
    select coalesce(pg_catalog.sum(u.records), 0) into removed from uncounted as u;
    return removed;
end
$$;
comment on function emem._remove_tags(bigint[], text[]) is
  'Removes tags of records (tags NULL: all of them) and uncounts them in the tag vocabulary; returns how many went.';

-- ---- edge labels -----------------------------------------------------------------------------------

-- An edge is matched through its relation name (words split at underscores) and every scalar
-- value of its properties, however deeply nested: its labels, each once. Neither STRICT nor with a
-- SET clause, so that it is inlined into the statements that read edges (a call per edge cost
-- about 30 us); every name in it is qualified.
create function emem._edge_label_texts(relation text, properties jsonb) returns setof text
language sql immutable parallel safe
as $$
    select labels.label
    from (select pg_catalog.replace(relation, '_', ' ') as label
          union
          select value operator(pg_catalog.#>>) '{}'
          from pg_catalog.jsonb_path_query(properties, 'strict $.**') as value
          where pg_catalog.jsonb_typeof(value) operator(pg_catalog.=) any (array['string', 'number'])) as labels
    where pg_catalog.btrim(labels.label) operator(pg_catalog.<>) ''
$$;
comment on function emem._edge_label_texts(text, jsonb) is 'The labels of an edge: its relation name (underscores as spaces) and each scalar property value.';

-- The labels of these edges written: a row per end and label, and each new label in the
-- vocabulary of its from end's lane (the lane its writer writes).
create function emem._write_edge_labels(edge_ids bigint[]) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    found record;
begin
    -- In steps over arrays (each statement reads one table, then writes from the arrays), which a
    -- Citus cluster runs as the one node does: the labels of the edges, their terms (known ones
    -- from the vocabulary, the new ones analysed in one call), then the rows.
    select pg_catalog.array_agg(e.edge_id) as edge_ids, pg_catalog.array_agg(e.from_record_id) as from_ids,
           pg_catalog.array_agg(e.to_record_id) as to_ids, pg_catalog.array_agg(e.from_lane_name) as from_lanes,
           pg_catalog.array_agg(e.to_lane_name) as to_lanes, pg_catalog.array_agg(l.label) as labels
    into found
    from emem.edges as e cross join lateral emem._edge_label_texts(e.relation, e.properties) as l (label)
    where e.edge_id = any (edge_ids);
    if found.edge_ids is null then
        return;
    end if;
    with known as (
        select distinct on (k.label) k.label, k.label_terms, k.namespace_terms
        from emem.edge_label_vocabulary as k where k.label = any (found.labels)
        order by k.label
    ), label_terms as (
        select k.label, k.label_terms, k.namespace_terms from known as k
        union all
        select a.label, a.label_terms, a.namespace_terms
        from emem._analysed_labels(array(select l.label from pg_catalog.unnest(found.labels) as l (label)
                                         except select k.label from known as k)) as a
    ), labelled as (
        select w.*, t.label_terms, t.namespace_terms
        from rows from (pg_catalog.unnest(found.edge_ids), pg_catalog.unnest(found.from_ids),
                        pg_catalog.unnest(found.to_ids), pg_catalog.unnest(found.from_lanes),
                        pg_catalog.unnest(found.to_lanes), pg_catalog.unnest(found.labels))
             as w (edge_id, from_record_id, to_record_id, from_lane_name, to_lane_name, label)
        join label_terms as t on t.label = w.label
    )
    select pg_catalog.array_agg(n.label) as labels, pg_catalog.array_agg(n.edge_id) as edge_ids,
           pg_catalog.array_agg(ends.record_id) as ends, pg_catalog.array_agg(ends.lane_name) as lanes,
           pg_catalog.array_agg(ends.far_record_id) as far_ends, pg_catalog.array_agg(ends.far_lane_name) as far_lanes,
           pg_catalog.array_agg(n.label_terms::text) as terms, pg_catalog.array_agg(n.namespace_terms::text) as namespaces,
           pg_catalog.array_agg(ends.is_from) as from_end
    into found
    from labelled as n
    cross join lateral (values (n.from_record_id, n.from_lane_name, n.to_record_id, n.to_lane_name, true),
                               (n.to_record_id, n.to_lane_name, n.from_record_id, n.from_lane_name, false))
        as ends (record_id, lane_name, far_record_id, far_lane_name, is_from)
    where ends.is_from or n.from_record_id <> n.to_record_id;  -- a loop: one row
    insert into emem.edge_labels (record_id, lane_name, label, edge_id, far_record_id, far_lane_name,
                                  label_terms, namespace_terms)
    select w.record_id, w.lane_name, w.label, w.edge_id, w.far_record_id, w.far_lane_name, w.terms::text[],
           w.namespaces::text[]
    from rows from (pg_catalog.unnest(found.ends), pg_catalog.unnest(found.lanes), pg_catalog.unnest(found.labels),
                    pg_catalog.unnest(found.edge_ids), pg_catalog.unnest(found.far_ends), pg_catalog.unnest(found.far_lanes),
                    pg_catalog.unnest(found.terms), pg_catalog.unnest(found.namespaces))
         as w (record_id, lane_name, label, edge_id, far_record_id, far_lane_name, terms, namespaces)
    order by w.label, w.record_id, w.edge_id  -- key order, one sort
    on conflict do nothing;
    -- Each new label in the vocabulary of its from end's lane (the lane its writer writes).
    insert into emem.edge_label_vocabulary (lane_name, label, label_terms, namespace_terms)
    select distinct on (w.lane_name, w.label) w.lane_name, w.label, w.terms::text[], w.namespaces::text[]
    from rows from (pg_catalog.unnest(found.lanes), pg_catalog.unnest(found.labels), pg_catalog.unnest(found.terms),
                    pg_catalog.unnest(found.namespaces), pg_catalog.unnest(found.from_end))
         as w (lane_name, label, terms, namespaces, is_from)
    where w.is_from
    order by w.lane_name, w.label
    on conflict do nothing;
end
$$;
comment on function emem._write_edge_labels(bigint[]) is
  'Writes the label rows (one per end and label) of these edges and adds new labels to the from ends'' lanes'' label vocabulary.';

-- ---- what hangs on a record ------------------------------------------------------------------------

-- Records deleted with everything that hangs on them: tags (uncounted), vectors, the windows that
-- hold them (a window that loses a member goes: its vector spoke for text that is gone), queued
-- work, and the edges at them with their labels. Returns how many records went.
create function emem._delete_records(record_ids bigint[]) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    deleted bigint;
    gone_windows bigint[];
    gone_edges bigint[];
begin
    perform emem._remove_tags(record_ids, null);
    delete from emem.record_vectors as v where v.record_id = any (record_ids);
    gone_windows := array(select distinct m.window_id from emem.window_members as m where m.record_id = any (record_ids));
    perform emem._delete_windows(gone_windows);
    delete from emem.embedding_queue as q where q.record_id = any (record_ids);
    gone_edges := array(select distinct l.edge_id from emem.edge_labels as l where l.record_id = any (record_ids)
                        union
                        select e.edge_id from emem.edges as e where e.from_record_id = any (record_ids)
                        union
                        select e.edge_id from emem.edges as e where e.to_record_id = any (record_ids));
    perform emem._delete_edges(gone_edges);
    delete from emem.records as r where r.record_id = any (record_ids);
    get diagnostics deleted = row_count;
    return deleted;
end
$$;
comment on function emem._delete_records(bigint[]) is 'Deletes records and everything that hangs on them; returns how many records went.';

create function emem._delete_edges(edge_ids bigint[]) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    deleted bigint;
begin
    delete from emem.edge_labels as l where l.edge_id = any (edge_ids);
    delete from emem.edges as e where e.edge_id = any (edge_ids);
    get diagnostics deleted = row_count;
    return deleted;
end
$$;
comment on function emem._delete_edges(bigint[]) is 'Deletes edges with their label rows; returns how many edges went.';

-- Windows deleted with their members. A run no window remembers any more leaves the queue; one
-- still known in another space is queued where it now lacks a current window.
create function emem._delete_windows(window_ids bigint[]) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    deleted bigint;
    runs emem._window_run[];
begin
    if pg_catalog.cardinality(window_ids) = 0 then
        return 0;
    end if;
    runs := array(select distinct row(w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)::emem._window_run
                  from emem.windows as w where w.window_id = any (window_ids));
    delete from emem.window_members as m where m.window_id = any (window_ids);
    delete from emem.windows as w where w.window_id = any (window_ids);
    get diagnostics deleted = row_count;
    delete from emem.embedding_queue as q
    using pg_catalog.unnest(runs) as run
    where q.record_id is null
      and (q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position)
          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position)
      and not exists (select 1 from emem.windows as w
                      where (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position));
    perform emem._sync_runs(array(
        select run from pg_catalog.unnest(runs) as run
        where exists (select 1 from emem.windows as w
                      where (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position))));
    return deleted;
end
$$;
comment on function emem._delete_windows(bigint[]) is 'Deletes windows with their members and keeps the queue of their runs true; returns how many went.';

-- ---- the embedding queue ---------------------------------------------------------------------------

-- New records (parallel arrays: id, lane, whether a vector came with it in vector_space) queued in
-- every space but the one their vector was written in. A new record has no other vector, so
-- nothing is read: a batch's queueing costs the same however many records the lanes hold.
create function emem._queue_new_records(record_ids bigint[], lanes text[], with_vectors boolean[], vector_space integer)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    insert into emem.embedding_queue (space_id, lane_name, record_id)
    select s.space_id, r.lane_name, r.record_id
    from rows from (pg_catalog.unnest(record_ids), pg_catalog.unnest(lanes), pg_catalog.unnest(with_vectors))
             as r (record_id, lane_name, with_vector)
    cross join emem.embedding_spaces as s
    where not (r.with_vector and s.space_id is not distinct from vector_space)
    order by r.lane_name, s.space_id, r.record_id
    on conflict do nothing;
end
$$;
comment on function emem._queue_new_records(bigint[], text[], boolean[], integer) is
  'Queues new records in every embedding space but the one each was written with a vector in.';

-- Window runs made true in the queue: done in the spaces that hold a current window for them (an
-- entry a worker holds is left to it), queued in those that do not (a run is wanted in every space).
create function emem._sync_runs(runs emem._window_run[]) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    lane text;
    held record;
begin
    -- Lane by lane: each statement keeps to one lane's rows (on a cluster, to one shard's), and
    -- takes the runs as arrays of plain values (a cluster's shards get them as parameters).
    for lane in select distinct r.lane_name from pg_catalog.unnest(runs) as r loop
        -- The runs of this lane that a space holds a current window for, with that space.
        select coalesce(pg_catalog.array_agg(w.space_id), '{}') as spaces,
               coalesce(pg_catalog.array_agg(w.thread_kind::text), '{}') as kinds,
               coalesce(pg_catalog.array_agg(w.thread_id), '{}') as threads,
               coalesce(pg_catalog.array_agg(w.first_position), '{}') as firsts,
               coalesce(pg_catalog.array_agg(w.last_position), '{}') as lasts,
               coalesce(pg_catalog.array_agg(pg_catalog.format('%s|%s|%s|%s|%s', w.space_id, w.thread_kind, w.thread_id,
                                                              w.first_position, w.last_position)), '{}') as keys
        into held
        from emem.windows as w
        where w.lane_name = lane and w.embedding is not null
          and (w.thread_kind, w.thread_id, w.first_position, w.last_position)
              in (select r.thread_kind, r.thread_id, r.first_position, r.last_position
                  from pg_catalog.unnest(runs) as r where r.lane_name = lane);
        delete from emem.embedding_queue as q
        where q.queue_id in (
            select e.queue_id from emem.embedding_queue as e
            where e.lane_name = lane and e.record_id is null
              and (e.space_id, e.thread_kind::text, e.thread_id, e.first_position, e.last_position)
                  in (select * from rows from (pg_catalog.unnest(held.spaces), pg_catalog.unnest(held.kinds),
                                               pg_catalog.unnest(held.threads), pg_catalog.unnest(held.firsts),
                                               pg_catalog.unnest(held.lasts)))
            for update of e skip locked);
        insert into emem.embedding_queue (space_id, lane_name, thread_kind, thread_id, first_position, last_position)
        select s.space_id, lane, r.thread_kind, r.thread_id, r.first_position, r.last_position
        from (select distinct r.* from pg_catalog.unnest(runs) as r where r.lane_name = lane) as r
        cross join emem.embedding_spaces as s
        where pg_catalog.format('%s|%s|%s|%s|%s', s.space_id, r.thread_kind, r.thread_id, r.first_position,
                                r.last_position) <> all (held.keys)
        order by r.thread_kind, r.thread_id, r.first_position, r.last_position, s.space_id
        on conflict do nothing;
    end loop;
end
$$;
comment on function emem._sync_runs(emem._window_run[]) is
  'Takes window runs off the queue of the spaces that hold a current window for them, and queues them in the others.';

-- Record vectors written: their entries are done (an entry a worker holds is left to it).
create function emem._dequeue_records(space_id integer, record_ids bigint[]) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    lane text;
begin
    -- Lane by lane: a lock taken on one lane's rows at a time (on a cluster, one shard's).
    for lane in select distinct e.lane_name from emem.embedding_queue as e
                where e.space_id = _dequeue_records.space_id and e.record_id = any (record_ids) loop
        delete from emem.embedding_queue as q
        where q.queue_id in (select e.queue_id from emem.embedding_queue as e
                             where e.lane_name = lane and e.space_id = _dequeue_records.space_id
                               and e.record_id = any (record_ids)
                             for update of e skip locked);
    end loop;
end
$$;
comment on function emem._dequeue_records(integer, bigint[]) is 'Takes records whose vector was written in a space off its queue.';

-- The window runs that hold any of these records: those of their windows in any space, and those
-- only queued.
create function emem._runs_holding(record_ids bigint[])
returns table (lane_name text, thread_kind emem.record_kind, thread_id text, first_position integer, last_position integer)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    return query
    select w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position
    from emem.window_members as m join emem.windows as w on w.window_id = m.window_id and w.lane_name = m.lane_name
    where m.record_id = any (record_ids)
    union
    select q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position
    from emem.records as r
    join emem.embedding_queue as q
      on q.record_id is null and q.lane_name = r.lane_name and q.thread_kind = r.kind and q.thread_id = r.thread_id
     and r.thread_position between q.first_position and q.last_position
    where r.record_id = any (record_ids);
end
$$;
comment on function emem._runs_holding(bigint[]) is 'The window runs (in any space, or queued) that hold any of the records.';

-- Records whose text changed: queued again in every space under a fresh entry (a worker that
-- claimed the old one cannot store for it: it waits for the worker holding it, then the vector
-- written for the old text goes), the windows that hold them lose their vectors and are queued.
create function emem._requeue_edited(record_ids bigint[]) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    runs emem._window_run[] := array(select row(run.*)::emem._window_run from emem._runs_holding(record_ids) as run);
begin
    -- Queued again under fresh entries: the delete waits for a worker that holds the old entry,
    -- and a store for the old entry's id then finds nothing.
    delete from emem.embedding_queue as q where q.record_id = any (record_ids);
    insert into emem.embedding_queue as q (space_id, lane_name, record_id)
    select s.space_id, r.lane_name, r.record_id
    from emem.records as r cross join emem.embedding_spaces as s
    where r.record_id = any (record_ids)
    order by r.lane_name, s.space_id, r.record_id;
    update emem.windows as w set embedding = null
    where w.window_id in (select m.window_id from emem.window_members as m where m.record_id = any (record_ids))
      and w.embedding is not null;
    delete from emem.embedding_queue as q
    where q.record_id is null
      and (q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position)
          in (select r.lane_name, r.thread_kind, r.thread_id, r.first_position, r.last_position
              from pg_catalog.unnest(runs) as r);
    insert into emem.embedding_queue as q (space_id, lane_name, thread_kind, thread_id, first_position, last_position)
    select s.space_id, run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position
    from pg_catalog.unnest(runs) as run
    cross join emem.embedding_spaces as s
    order by run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position, s.space_id;
    delete from emem.record_vectors as v where v.record_id = any (record_ids);
end
$$;
comment on function emem._requeue_edited(bigint[]) is
  'After an edit of these records'' text: queued again in every space, the windows holding them stale and queued, their vectors removed.';

-- pgvector indexes need a fixed dimension: each space gets partial expression indexes for its
-- record and window vectors.
create function emem._create_space_indexes(space_id integer, dimension integer) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    execute pg_catalog.format(
        'create index if not exists record_vectors_space_%1$s on emem.record_vectors '
        'using hnsw ((embedding::public.vector(%2$s)) public.vector_cosine_ops) where space_id = %1$s',
        space_id, dimension);
    execute pg_catalog.format(
        'create index if not exists windows_space_%1$s on emem.windows '
        'using hnsw ((embedding::public.vector(%2$s)) public.vector_cosine_ops) where space_id = %1$s',
        space_id, dimension);
end
$$;
comment on function emem._create_space_indexes(integer, integer) is 'Creates the HNSW indexes of an embedding space.';

-- ---- lane-first vector indexes --------------------------------------------------------------------

-- Under strict isolation a lane's vectors are read from HNSW indexes of its own (lane first), so
-- that the time of a strict agent's vector lookups follows the lanes it reads only, never the
-- other lanes' vectors that a shared index would walk past. Each lane a strict profile reads has
-- them in every space; each vector written in such a lane costs a second HNSW insert.
create function emem._is_strict(settings jsonb) returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    -- A profile without its own setting finds under the database's (as emem.find_settings reads it).
    select pg_catalog.lower(pg_catalog.btrim(coalesce(nullif(settings->>'emem.lane_isolation', ''),
                                                      pg_catalog.current_setting('emem.lane_isolation', true), ''),
                                             E' \t\r\n')) = 'strict'
$$;
comment on function emem._is_strict(jsonb) is 'Whether an agent profile''s settings (or, without one, the database''s) choose strict isolation.';

-- The name of a lane's index of a table's vectors in a space (a lane name may be long: its md5).
create function emem._lane_index_name(table_name text, space_id integer, lane_name text) returns text
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
    select pg_catalog.format('%s_space_%s_lane_%s', table_name, space_id, pg_catalog.left(pg_catalog.md5(lane_name), 16))
$$;

-- The lane indexes there should be: every lane a strict profile reads, in every space.
create function emem._lane_indexes()
returns table (index_name text, table_name text, space_id integer, dimension integer, lane_name text)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select emem._lane_index_name(t.table_name, s.space_id, l.lane_name), t.table_name, s.space_id, s.dimension, l.lane_name
    from emem.embedding_spaces as s
    cross join (select distinct pl.lane_name from emem.profile_lanes as pl
                join emem.agent_profiles as p on p.profile_name = pl.profile_name
                where pl.can_read and emem._is_strict(p.settings)) as l
    cross join (values ('record_vectors'), ('windows')) as t (table_name)
$$;
comment on function emem._lane_indexes() is 'The HNSW indexes of their own that the lanes strict profiles read have in each space.';

-- Creates the lane indexes there should be and drops the others; called by whatever changes a
-- profile's lanes or isolation, the spaces or the lanes (a build takes the table's share lock).
create function emem._sync_lane_indexes() returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    wanted record;
    unwanted text;
begin
    for wanted in select i.* from emem._lane_indexes() as i
                  where pg_catalog.to_regclass(pg_catalog.format('emem.%I', i.index_name)) is null
                  order by i.index_name loop
        execute pg_catalog.format(
            'create index %I on emem.%I using hnsw ((embedding::public.vector(%s)) public.vector_cosine_ops) '
            'where space_id = %s and lane_name = %L',
            wanted.index_name, wanted.table_name, wanted.dimension, wanted.space_id, wanted.lane_name);
    end loop;
    for unwanted in select c.relname::text from pg_catalog.pg_class as c
                    where c.relnamespace = 'emem'::pg_catalog.regnamespace and c.relkind = 'i'
                      and c.relname::text ~ '^(record_vectors|windows)_space_[0-9]+_lane_[0-9a-f]{16}$'
                      and c.relname::text not in (select i.index_name from emem._lane_indexes() as i)
                    order by 1 loop
        execute pg_catalog.format('drop index emem.%I', unwanted);
    end loop;
end
$$;
comment on function emem._sync_lane_indexes() is
  'Creates the HNSW indexes of the lanes strict profiles read (in every space) that are missing, and drops those no strict profile reads.';

-- How many of a space's HNSW indexes (its own two, and those of the lanes strict profiles read) are
-- missing (pg_dump leaves out indexes it did not create with the extension: after a restore,
-- emem.rebuild_derived() creates them again).
create function emem._missing_space_indexes(space_id integer) returns integer
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select pg_catalog.count(*)::integer
    from (select pg_catalog.format('record_vectors_space_%s', _missing_space_indexes.space_id)
          union all select pg_catalog.format('windows_space_%s', _missing_space_indexes.space_id)
          union all select i.index_name from emem._lane_indexes() as i
                    where i.space_id operator(pg_catalog.=) _missing_space_indexes.space_id) as wanted (index_name)
    where pg_catalog.to_regclass(pg_catalog.format('emem.%I', wanted.index_name)) is null
$$;
comment on function emem._missing_space_indexes(integer) is
  'How many of an embedding space''s HNSW indexes (its own two and its strict lanes'') do not exist.';

-- ---- checking and rebuilding what derives ----------------------------------------------------------

-- PL/pgSQL: pg_dist_partition exists only where Citus is installed.
create function emem._distributed() returns boolean
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if pg_catalog.to_regclass('pg_catalog.pg_dist_partition') is null
       or pg_catalog.to_regclass('emem.records') is null then
        return false;
    end if;
    return exists (select 1 from pg_catalog.pg_dist_partition as p
                   where p.logicalrelid = pg_catalog.to_regclass('emem.records'));
end
$$;
comment on function emem._distributed() is 'Whether emem''s tables are distributed over a Citus cluster (docs/scale-out.md).';

-- The checks compare rows with their records by id across lanes, which a Citus cluster runs only
-- as repartition joins and not at all as anti-joins: they are one-node tools (docs/scale-out.md).
create function emem._require_one_node(what text) returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    if emem._distributed() then
        raise exception 'emem.%() runs on one node only: emem''s tables are distributed over a Citus cluster', what
            using errcode = '0A000',
                  hint = 'Run it on a copy restored to one node (pg_dump of the coordinator), see docs/scale-out.md.';
    end if;
end
$$;

-- Every derived row as the base rows imply it: tags' and vectors' lanes, the tag vocabulary's
-- counts, the edges' lanes and label rows, the label vocabulary, the window members' lanes, and
-- the embedding queue's entries for what lacks a vector. A write around the API (a DBA's UPDATE)
-- shows here; emem.rebuild_derived() writes it all again.
create function emem.check_derived()
returns table (derived text, problem text, detail text)
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
    perform emem._require_one_node('check_derived');
    return query
    select 'indexes', 'an embedding space lacks its HNSW indexes (a restore does not bring them)',
           pg_catalog.format('space %s', s.space_id)
    from emem.embedding_spaces as s
    where emem._missing_space_indexes(s.space_id) > 0
    union all
    select 'record_tags', 'lane differs from its record''s', pg_catalog.format('record %s, tag %s', t.record_id, t.tag)
    from emem.record_tags as t join emem.records as r on r.record_id = t.record_id where r.lane_name <> t.lane_name
    union all
    select 'record_tags', 'tag of no record', pg_catalog.format('record %s, tag %s', t.record_id, t.tag)
    from emem.record_tags as t where not exists (select 1 from emem.records as r where r.record_id = t.record_id)
    union all
    select 'tag_vocabulary', 'count differs', pg_catalog.format('lane %s, tag %s: %s counted, %s tagged',
                                                               coalesce(v.lane_name, c.lane_name), coalesce(v.tag, c.tag),
                                                               coalesce(v.record_count, 0), coalesce(c.records, 0))
    from emem.tag_vocabulary as v
    full join (select t.lane_name, t.tag, pg_catalog.count(*) as records from emem.record_tags as t
               group by t.lane_name, t.tag) as c on c.lane_name = v.lane_name and c.tag = v.tag
    where coalesce(v.record_count, 0) <> coalesce(c.records, 0) or v.tag is null
    union all
    select 'record_vectors', 'lane differs from its record''s or no record', pg_catalog.format('record %s, space %s', v.record_id, v.space_id)
    from emem.record_vectors as v left join emem.records as r on r.record_id = v.record_id
    where r.lane_name is distinct from v.lane_name
    union all
    select 'edges', 'an end''s lane differs from its record''s or an end is gone', pg_catalog.format('edge %s', e.edge_id)
    from emem.edges as e
    left join emem.records as f on f.record_id = e.from_record_id
    left join emem.records as t on t.record_id = e.to_record_id
    where f.lane_name is distinct from e.from_lane_name or t.lane_name is distinct from e.to_lane_name
    union all
    (select 'edge_labels', case when have.edge_id is null then 'missing' else 'left over' end,
            pg_catalog.format('edge %s, end %s, label %s', coalesce(want.edge_id, have.edge_id),
                              coalesce(want.record_id, have.record_id), coalesce(want.label, have.label))
     from (select ends.record_id, ends.lane_name, l.label, e.edge_id, ends.far_record_id, ends.far_lane_name
           from emem.edges as e
           cross join lateral emem._edge_label_texts(e.relation, e.properties) as l (label)
           cross join lateral (values (e.from_record_id, e.from_lane_name, e.to_record_id, e.to_lane_name, true),
                                      (e.to_record_id, e.to_lane_name, e.from_record_id, e.from_lane_name, false))
               as ends (record_id, lane_name, far_record_id, far_lane_name, is_from)
           where ends.is_from or e.from_record_id <> e.to_record_id) as want
     full join emem.edge_labels as have
       on (have.record_id, have.lane_name, have.label, have.edge_id, have.far_record_id, have.far_lane_name)
        = (want.record_id, want.lane_name, want.label, want.edge_id, want.far_record_id, want.far_lane_name)
     where have.edge_id is null or want.edge_id is null)
    union all
    select 'edge_label_vocabulary', 'a label of its lane''s edges is missing', pg_catalog.format('lane %s, label %s', l.lane_name, l.label)
    from (select distinct e.from_lane_name as lane_name, l.label from emem.edge_labels as l
          join emem.edges as e on e.edge_id = l.edge_id) as l
    where not exists (select 1 from emem.edge_label_vocabulary as v where v.lane_name = l.lane_name and v.label = l.label)
    union all
    select 'window_members', 'lane differs from its window''s or no window', pg_catalog.format('window %s, record %s', m.window_id, m.record_id)
    from emem.window_members as m left join emem.windows as w on w.window_id = m.window_id
    where w.lane_name is distinct from m.lane_name
    union all
    select 'embedding_queue', 'lane differs from its record''s', pg_catalog.format('queue entry %s, record %s', q.queue_id, q.record_id)
    from emem.embedding_queue as q join emem.records as r on r.record_id = q.record_id where r.lane_name <> q.lane_name
    union all
    select 'embedding_queue', 'a record without a vector is not queued', pg_catalog.format('space %s, record %s', s.space_id, r.record_id)
    from emem.records as r cross join emem.embedding_spaces as s
    where not exists (select 1 from emem.record_vectors as v where v.record_id = r.record_id and v.space_id = s.space_id)
      and not exists (select 1 from emem.embedding_queue as q where q.space_id = s.space_id and q.record_id = r.record_id)
    union all
    select 'embedding_queue', 'a window run without a current window is not queued',
           pg_catalog.format('space %s, %s %s %s-%s', s.space_id, run.thread_kind, run.thread_id, run.first_position,
                             run.last_position)
    from (select distinct w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position from emem.windows as w) as run
    cross join emem.embedding_spaces as s
    where not exists (select 1 from emem.windows as w
                      where w.space_id = s.space_id and w.embedding is not null
                        and (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position))
      and not exists (select 1 from emem.embedding_queue as q
                      where q.space_id = s.space_id and q.record_id is null
                        and (q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position)
                          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position));
end
$$;
comment on function emem.check_derived() is
  'Lists every derived row (lanes of tags, vectors, edges and window members; tag vocabulary counts; edge label rows; label vocabulary; queued embedding work) that differs from what the base rows imply; empty when all is true. For the extension''s owner.';

create function emem.rebuild_derived() returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    problems bigint;
begin
    perform emem._require_one_node('rebuild_derived');
    problems := (select pg_catalog.count(*) from emem.check_derived());
    lock table emem.records, emem.record_tags, emem.edges, emem.windows, emem.window_members in share mode;
    perform emem._create_space_indexes(s.space_id, s.dimension) from emem.embedding_spaces as s;
    perform emem._sync_lane_indexes();
    update emem.record_tags as t set lane_name = r.lane_name from emem.records as r
        where r.record_id = t.record_id and r.lane_name <> t.lane_name;
    delete from emem.record_tags as t where not exists (select 1 from emem.records as r where r.record_id = t.record_id);
    delete from emem.tag_vocabulary;
    insert into emem.tag_vocabulary (lane_name, tag, tag_terms, record_count, namespace_terms)
    select t.lane_name, t.tag, emem._label_terms(t.tag), pg_catalog.count(*), emem._label_namespace_terms(t.tag)
    from emem.record_tags as t group by t.lane_name, t.tag order by t.lane_name, t.tag;
    update emem.record_vectors as v set lane_name = r.lane_name from emem.records as r
        where r.record_id = v.record_id and r.lane_name <> v.lane_name;
    delete from emem.record_vectors as v where not exists (select 1 from emem.records as r where r.record_id = v.record_id);
    delete from emem.edges as e
        where not exists (select 1 from emem.records as r where r.record_id = e.from_record_id)
           or not exists (select 1 from emem.records as r where r.record_id = e.to_record_id);
    update emem.edges as e set from_lane_name = r.lane_name from emem.records as r
        where r.record_id = e.from_record_id and r.lane_name <> e.from_lane_name;
    update emem.edges as e set to_lane_name = r.lane_name from emem.records as r
        where r.record_id = e.to_record_id and r.lane_name <> e.to_lane_name;
    delete from emem.edge_labels;
    perform emem._write_edge_labels(array(select e.edge_id from emem.edges as e order by e.edge_id));
    update emem.window_members as m set lane_name = w.lane_name from emem.windows as w
        where w.window_id = m.window_id and w.lane_name <> m.lane_name;
    delete from emem.window_members as m where not exists (select 1 from emem.windows as w where w.window_id = m.window_id);
    update emem.embedding_queue as q set lane_name = r.lane_name from emem.records as r
        where r.record_id = q.record_id and r.lane_name <> q.lane_name;
    perform emem._queue_missing(s.space_id, null) from emem.embedding_spaces as s;
    return problems;
end
$$;
comment on function emem.rebuild_derived() is
  'Writes every derived row again from the base rows (after writes around the API, say a DBA''s UPDATE or a load with COPY); returns how many problems emem.check_derived() found before. For the extension''s owner.';
