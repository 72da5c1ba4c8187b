-- The write API. Agents write only through it (they may not write the tables): every function
-- runs as the extension's owner (SECURITY DEFINER), acts for the session's role
-- (emem._acting_role()) and writes only into that role's write lanes. Every argument is checked
-- before anything is written; a refusal says what is accepted (SQLSTATE 22023 for a value it
-- does not accept, 42501 for a lane the role may not write) and writes nothing. The bulk writes
-- run without JIT: a batch's rows are new to the statistics, and a plan whose estimate passes
-- jit_above_cost spent about 90 ms of a 1,000-record put_records compiling its expressions.

-- Neither a SET clause nor STRICT (emem._nfc holds a CASE), so that it is inlined into bulk
-- writes; every name in it is qualified.
create function emem._normal_tag(tag text) returns text
language sql immutable parallel safe
as $$
    select pg_catalog.lower(pg_catalog.btrim(pg_catalog.regexp_replace(emem._nfc(tag),
        '[\s\u00a0\u1680\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]+', ' ', 'g')))
$$;
comment on function emem._normal_tag(text) is
  'How tags are stored: in Unicode''s composed form (NFC), every run of white space (in any script) one space, trimmed, lower-case.';

-- White space in any script counts as white space: a text of only that says nothing. No SET
-- clause, so that it is inlined into the checks of bulk writes; every name in it is qualified.
create function emem._is_blank(value text) returns boolean
language sql immutable strict parallel safe
as $$ select value operator(pg_catalog.~) '^[\s\u00a0\u1680\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]*$' $$;
comment on function emem._is_blank(text) is 'Whether a text holds nothing but white space (in any script).';

create function emem.create_embedding_space(
    model_name text, dimension integer, fingerprint text default null, activate boolean default false
) returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    new_space_id integer;
    is_new boolean;
begin
    if model_name is null or emem._is_blank(model_name) or pg_catalog.length(model_name) > 200 then
        raise exception 'model_name must be a non-empty text of at most 200 characters' using errcode = '22023';
    end if;
    if dimension is null or dimension not between 1 and 2000 then
        raise exception 'dimension % is out of range', coalesce(dimension::text, 'NULL')
            using errcode = '22023', hint = 'Accepted: 1 to 2000 (the most pgvector indexes with HNSW).';
    end if;
    if pg_catalog.length(fingerprint) > 200 then
        raise exception 'fingerprint must be at most 200 characters' using errcode = '22023';
    end if;
    insert into emem.embedding_spaces as s (model_name, dimension, fingerprint)
        values (create_embedding_space.model_name, create_embedding_space.dimension, create_embedding_space.fingerprint)
        on conflict on constraint embedding_spaces_model_name_dimension_key do update
            set fingerprint = coalesce(excluded.fingerprint, s.fingerprint)
        returning s.space_id, (s.xmax = 0) into new_space_id, is_new;
    if is_new then
        perform emem._create_space_indexes(new_space_id, dimension);
        perform emem._sync_lane_indexes();
        -- A new space lacks everything. Writers of records and windows wait meanwhile (and it
        -- waits for those under way), so that none falls between this fill and their own queueing.
        lock table emem.records, emem.windows in share mode;
        perform emem._queue_missing(new_space_id, null);
    end if;
    if activate then
        perform emem.activate_embedding_space(new_space_id);
    end if;
    return new_space_id;
end
$$;
comment on function emem.create_embedding_space(text, integer, text, boolean) is
  'Creates (or returns) the embedding space of a model and dimension, with its HNSW indexes, and queues every record and window for embedding in it; activate => true makes it the active one (emem.activate_embedding_space: refused while another is active and this one lacks vectors).';

-- The switch of models without a blind spot: a space becomes the active one only once it holds
-- a vector for every record and window (emem embed --space N fills it while the old one answers),
-- unless forced. The first space has no other to keep answering, so it needs no vectors first.
create function emem.activate_embedding_space(space_id integer, force boolean default false) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces;
    coverage jsonb;
begin
    if force is null then
        raise exception 'force must be true or false' using errcode = '22023';
    end if;
    -- Concurrent activations take turns (each would otherwise see the other's active space gone).
    lock table emem.embedding_spaces in share row exclusive mode;
    select * into space from emem.embedding_spaces as s where s.space_id = activate_embedding_space.space_id;
    if not found then
        raise exception 'unknown embedding space %', coalesce(space_id::text, 'NULL')
            using errcode = '22023', hint = 'See emem.embedding_spaces for the spaces that exist.';
    end if;
    if space.is_active then
        return;
    end if;
    if not force and exists (select 1 from emem.embedding_spaces as s where s.is_active) then
        -- Work the queue missed (its triggers were off during a load) is found here, so that the
        -- refusal's figures are true; a refusal rolls it back, and emem embed finds it again.
        perform emem._queue_missing(space.space_id, null);
        coverage := emem._vector_coverage(space.space_id, null);
        if (coverage->>'share')::float8 < 1 then
            raise exception 'embedding space % (%) has vectors for % of % records and % of % windows: activating it now would hide the rest from the vector lookups',
                space.space_id, space.model_name, coverage->>'records_with_vector', coverage->>'records',
                coverage->>'windows_with_vector', coverage->>'windows'
                using errcode = '55000',
                      hint = pg_catalog.format('Fill it first with emem embed --space %s (the active space answers meanwhile),'
                                               ' or pass force => true to switch anyway.', space.space_id);
        end if;
    end if;
    update emem.embedding_spaces as s set is_active = false
        where s.is_active and s.space_id <> activate_embedding_space.space_id;
    update emem.embedding_spaces as s set is_active = true
        where s.space_id = activate_embedding_space.space_id;
end
$$;
comment on function emem.activate_embedding_space(integer, boolean) is
  'Makes the given embedding space the one active space. While another is active, it refuses (SQLSTATE 55000, with the figures) until the space holds a vector for every record and window, unless force => true.';

-- The space a vector is written to: the given one, or the active one.
create function emem._resolve_space(space_id integer) returns emem.embedding_spaces
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces;
begin
    if space_id is null then
        select * into space from emem.embedding_spaces as s where s.is_active;
        if not found then
            raise exception 'there is no active embedding space'
                using errcode = '22023',
                      hint = 'Create one with emem.create_embedding_space(model_name, dimension, activate => true).';
        end if;
    else
        select * into space from emem.embedding_spaces as s where s.space_id = _resolve_space.space_id;
        if not found then
            raise exception 'unknown embedding space %', space_id using errcode = '22023';
        end if;
    end if;
    return space;
end
$$;
comment on function emem._resolve_space(integer) is 'The given embedding space, or the active one when NULL; an error when there is none.';

create function emem._check_vector(embedding public.vector, space emem.embedding_spaces, what text) returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    if embedding is null then
        raise exception '% is NULL', what using errcode = '22023';
    end if;
    if public.vector_dims(embedding) <> space.dimension then
        raise exception '% has % dimensions but embedding space % (%) has %',
            what, public.vector_dims(embedding), space.space_id, space.model_name, space.dimension
            using errcode = '22023';
    end if;
    if public.vector_norm(embedding) = 0 then
        raise exception '% is the zero vector, which has no cosine distance', what
            using errcode = '22023';
    end if;
end
$$;
comment on function emem._check_vector(public.vector, emem.embedding_spaces, text) is
  'Refuses a vector that is NULL, of another dimension than the space, or zero (pgvector itself refuses NaN and infinity).';

-- An item's vector as pgvector's text: the string as given (the fast form for bulk loads), or the
-- array's text; NULL for anything else. Neither a SET clause nor STRICT (its body is a CASE), so
-- that it is inlined into put_records' statements; every name in it is qualified.
create function emem._vector_text(item jsonb) returns text
language sql immutable parallel safe
as $$
    select case when pg_catalog.jsonb_typeof(item operator(pg_catalog.->) 'vector') operator(pg_catalog.=) 'string'
                    then item operator(pg_catalog.->>) 'vector'
                when pg_catalog.jsonb_typeof(item operator(pg_catalog.->) 'vector') operator(pg_catalog.=) 'array'
                    then (item operator(pg_catalog.->) 'vector')::pg_catalog.text end
$$;
comment on function emem._vector_text(jsonb) is
  'The vector of an item of emem.put_records as pgvector''s text (a string as given, an array as its text), or NULL.';

-- Each item of put_records as read from its JSON, with what is wrong with it (NULL when nothing
-- is) and its values as text, before any cast: the batch's JSON is walked once, here, and the
-- statements that check and write the batch read these rows. The cheap checks of shape and size
-- are made here; the values that need a cast (occurred_at, a vector) are parsed afterwards.
create function emem._read_items(items jsonb, writable text[]) returns table (item emem._record_item, has_vector boolean)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select row(i.n::integer, case
        when pg_catalog.jsonb_typeof(item) <> 'object' then 'is not a JSON object'
        when item operator(pg_catalog.-) array['kind', 'content', 'lane', 'tags', 'authority', 'occurred_at',
                'thread_id', 'thread_position', 'metadata', 'source_key', 'vector'] <> '{}'
            then 'has an unknown key; accepted: kind, content, lane, tags, authority, occurred_at, '
                 'thread_id, thread_position, metadata, source_key, vector'
        when pg_catalog.jsonb_typeof(item->'kind') is distinct from 'string'
             or item->>'kind' <> all (array(select pg_catalog.unnest(pg_catalog.enum_range(null::emem.record_kind))::text))
            then pg_catalog.format('kind must be one of %s',
                                   pg_catalog.array_to_string(pg_catalog.enum_range(null::emem.record_kind), ', '))
        when pg_catalog.jsonb_typeof(item->'content') is distinct from 'string'
             or emem._is_blank(item->>'content') or pg_catalog.length(item->>'content') > 200000
            then 'content must be a non-empty text of at most 200000 characters (split longer text into file chunks)'
        when pg_catalog.jsonb_typeof(item->'lane') is distinct from 'string'
             or not (writable is null or item->>'lane' = any (writable))
             or not exists (select 1 from emem.lanes as l where l.lane_name operator(pg_catalog.=) (item->>'lane'))
            then pg_catalog.format('lane %s is not a lane this role may write (unknown, or outside its agent profile)',
                                   coalesce(pg_catalog.quote_literal(pg_catalog.left(item->>'lane', 100)), 'NULL'))
        when emem._has_thread((item->>'kind')::emem.record_kind)
             and (pg_catalog.jsonb_typeof(item->'thread_id') is distinct from 'string'
                  or emem._is_blank(item->>'thread_id') or pg_catalog.length(item->>'thread_id') > 500
                  or pg_catalog.jsonb_typeof(item->'thread_position') is distinct from 'number'
                  or (item->>'thread_position') !~ '^[0-9]{1,9}$')
            then 'conversation and file records need a thread_id (a text of at most 500 characters) and a'
                 ' thread_position (an integer from 0 to 999999999)'
        when not emem._has_thread((item->>'kind')::emem.record_kind) and (item ? 'thread_id' or item ? 'thread_position')
            then 'only conversation and file records have a thread_id and thread_position'
        when item ? 'tags' and (pg_catalog.jsonb_typeof(item->'tags') <> 'array'
             or pg_catalog.jsonb_array_length(item->'tags') > 1000
             or pg_catalog.jsonb_path_exists(item->'tags', 'strict $[*] ? (@.type() != "string")')
             or exists (select 1 from pg_catalog.jsonb_array_elements_text(item->'tags') as t
                        where emem._is_blank(t) or pg_catalog.length(t) > 200))
            then 'tags must be an array of at most 1000 texts of 1 to 200 characters, not only white space'
        -- authority is stored as a real: a number nearer 0 than a real holds would not cast.
        when item ? 'authority' and (pg_catalog.jsonb_typeof(item->'authority') <> 'number'
             or (item->>'authority')::numeric not between 0 and 1
             or ((item->>'authority')::numeric > 0 and (item->>'authority')::numeric < 1e-30))
            then 'authority must be a number from 0 to 1 (0, or at least 1e-30)'
        when item ? 'occurred_at' and (pg_catalog.jsonb_typeof(item->'occurred_at') <> 'string'
             or pg_catalog.length(item->>'occurred_at') > 64)
            then 'occurred_at must be an ISO 8601 date or time as text, such as "2024-03-01T09:30:00Z"'
        when item ? 'metadata' and pg_catalog.jsonb_typeof(item->'metadata') <> 'object'
            then 'metadata must be a JSON object'
        when item ? 'metadata' and pg_catalog.pg_column_size(item->'metadata') > 65536
            then 'metadata must be at most 64 kB'
        when item ? 'source_key' and (pg_catalog.jsonb_typeof(item->'source_key') <> 'string'
             or emem._is_blank(item->>'source_key') or pg_catalog.length(item->>'source_key') > 500)
            then 'source_key must be a non-empty text of at most 500 characters'
        when item ? 'vector' and (pg_catalog.octet_length(emem._vector_text(item)) > 100000
                                  or emem._vector_text(item) is null)
            then 'vector must be an array of numbers, or pgvector''s text of one such as "[0.1,0.2,...]"'
        end,
        item->>'kind', item->>'content', item->>'lane', item->'tags', item->>'authority', item->>'occurred_at',
        item->>'thread_id', item->>'thread_position', item->'metadata', item->>'source_key')::emem._record_item,
        item ? 'vector'
    from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
$$;
comment on function emem._read_items(jsonb, text[]) is
  'The items of emem.put_records as rows of text, each with what is wrong with it (shape, sizes, lane) or NULL, and whether it has a vector.';

-- A value that needs a cast to be checked: the first item whose value does not cast, with why.
create function emem._first_uncastable(item_values text[], as_type text) returns record
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    each_item record;
    found_problem record;
begin
    for each_item in select v.n, v.value
                     from pg_catalog.unnest(item_values) with ordinality as v(value, n)
                     where v.value is not null order by v.n loop
        begin
            execute pg_catalog.format('select %L::%s', each_item.value, as_type);
        exception when others then
            select each_item.n as n, sqlerrm as reason into found_problem;
            return found_problem;
        end;
    end loop;
    return null;
end
$$;
comment on function emem._first_uncastable(text[], text) is
  'The number of the first item whose value does not cast to the type, and the cast''s message (for put_records'' errors).';

-- The records the items' lanes hold already under the items' source keys: {"lane/key": id} (a lane
-- name holds no '/').
create function emem._stored_keys(parsed emem._record_item[]) returns jsonb
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    return (select coalesce(pg_catalog.jsonb_object_agg(r.lane_name || '/' || r.source_key, r.record_id), '{}')
    from emem.records as r
    where (r.lane_name, r.source_key) in (select p.lane, p.source_key from pg_catalog.unnest(parsed) as p
                                          where p.source_key is not null));
end
$$;
comment on function emem._stored_keys(emem._record_item[]) is 'The ids of the records the items'' lanes hold under their source keys, by lane/key.';

create function emem.put_records(items jsonb, space_id integer default null)
returns table (item_number integer, record_id bigint, created boolean)
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
    problem record;
    space emem.embedding_spaces;
    dimension integer;
    item_count integer;
    writable text[] := emem._lanes_of(emem._acting_role(), true);
    parsed emem._record_item[];
    with_vectors boolean;
    times timestamptz[];
    vectors public.vector[];
    stored_ids bigint[];
    new_ids bigint[];
    created_ids bigint[];
    tag_lanes text[];
    tag_names text[];
    stored jsonb;
begin
    if items is null or pg_catalog.jsonb_typeof(items) <> 'array' then
        raise exception 'items must be a JSON array of record objects' using errcode = '22023';
    end if;
    if pg_catalog.pg_column_size(items) > 64 * 1024 * 1024 then
        raise exception 'items take % MB: at most 64 MB per call', pg_catalog.pg_column_size(items) / 1048576
            using errcode = '22023', hint = 'Split the load into batches.';
    end if;
    item_count := pg_catalog.jsonb_array_length(items);
    if item_count > 50000 then
        raise exception 'at most 50000 items per call, got %', item_count
            using errcode = '22023', hint = 'Split the load into batches.';
    end if;

    select pg_catalog.array_agg(r.item order by (r.item).item_number), pg_catalog.bool_or(r.has_vector)
    into parsed, with_vectors
    from emem._read_items(items, writable) as r;
    select f.n, f.reason into problem
    from (select p.item_number as n, p.problem as reason, 1 as rank
          from pg_catalog.unnest(parsed) as p
          where p.problem is not null
          union all
          select k.n, 'repeats the lane and source_key of an earlier item of this batch', 2
          from (select p.item_number as n, pg_catalog.min(p.item_number) over (partition by p.lane, p.source_key) as first_n
                from pg_catalog.unnest(parsed) as p
                where p.source_key is not null) as k
          where k.n > k.first_n) as f
    order by f.n, f.rank
    limit 1;
    if found then
        raise exception 'item %: %', problem.n, problem.reason
            using errcode = case when problem.reason like 'lane % is not a lane%' then '42501' else '22023' end;
    end if;
    if with_vectors then
        space := emem._resolve_space(space_id);
        dimension := space.dimension;
    end if;

    -- Times and vectors are parsed once, all together; only when one does not parse is each
    -- item tried on its own, to name it. Vectors are parsed by pgvector straight from the JSON (no
    -- array of their texts: megabytes a batch) and stored at unit length: cosine is all emem
    -- measures, and unit vectors cannot overflow its arithmetic.
    begin
        times := array(select p.occurred_at::timestamptz from pg_catalog.unnest(parsed) as p order by p.item_number);
    exception when others then
        problem := emem._first_uncastable(array(select p.occurred_at from pg_catalog.unnest(parsed) as p
                                                order by p.item_number), 'timestamptz');
        raise exception 'item %: occurred_at must be an ISO 8601 date or time (%)', problem.n, problem.reason
            using errcode = '22023';
    end;
    if dimension is not null then
        begin
            vectors := array(select emem._vector_text(i.item)::public.vector
                             from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n) order by i.n);
        exception when others then
            problem := emem._first_uncastable(array(select emem._vector_text(i.item)
                                                    from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
                                                    order by i.n), 'public.vector');
            raise exception 'item %: vector is not a vector of numbers (%)', problem.n, problem.reason
                using errcode = '22023',
                      hint = pg_catalog.format('Send %s finite numbers, as an array or as pgvector''s text "[0.1,...]".',
                                               dimension);
        end;
        select v.n, public.vector_dims(v.vector) as dimensions into problem
        from pg_catalog.unnest(vectors) with ordinality as v(vector, n)
        where v.vector is not null and (public.vector_dims(v.vector) operator(pg_catalog.<>) dimension
                                        or public.vector_norm(v.vector) operator(pg_catalog.=) 0)
        order by v.n
        limit 1;
        if found and problem.dimensions <> dimension then
            raise exception 'item %: vector has % dimensions but embedding space % (%) has %',
                problem.n, problem.dimensions, space.space_id, space.model_name, dimension
                using errcode = '22023';
        elsif found then
            raise exception 'item %: vector is the zero vector, which has no cosine distance', problem.n
                using errcode = '22023';
        end if;
    end if;

    -- An item whose source key its lane holds already is not written again.
    stored := emem._stored_keys(parsed);
    stored_ids := array(select (stored->>(p.lane || '/' || p.source_key))::bigint
                        from pg_catalog.unnest(parsed) as p order by p.item_number);
    new_ids := array(
        select case when stored_ids[n] is null then pg_catalog.nextval('emem.records_record_id_seq') end
        from pg_catalog.generate_series(1, item_count) as n);

    -- Vectors with their records (those of records not written after all go below), so that a
    -- record written with its vector is not queued for embedding in its space.
    if dimension is not null then
        insert into emem.record_vectors (space_id, record_id, embedding, lane_name)
        select space.space_id, new_ids[p.item_number], public.l2_normalize(v.vector), p.lane
        from pg_catalog.unnest(parsed) as p
        join pg_catalog.unnest(vectors) with ordinality as v(vector, n) on v.n = p.item_number
        where v.vector is not null and new_ids[p.item_number] is not null
        order by 2;
    end if;

    -- Records in a statement of their own, so that the tags below follow them; a key a
    -- concurrent writer stored meanwhile is skipped. Rows are written in the order of their lane
    -- and key, so that concurrent writers of the same keys take the same locks in the same order.
    with inserted as (
        insert into emem.records (record_id, kind, content, lane_name, authority, occurred_at,
                                  thread_id, thread_position, metadata, source_key)
        select new_ids[p.item_number], p.kind::emem.record_kind, p.content, p.lane, coalesce(p.authority::real, 0.5),
               coalesce(times[p.item_number], pg_catalog.now()), p.thread_id, p.thread_position::integer,
               coalesce(p.metadata, '{}'), p.source_key
        from pg_catalog.unnest(parsed) as p
        where new_ids[p.item_number] is not null
        order by p.lane, p.source_key, p.item_number
        on conflict (lane_name, source_key) where source_key is not null do nothing
        returning emem.records.record_id
    )
    select coalesce(pg_catalog.array_agg(inserted.record_id), '{}') into created_ids from inserted;

    -- The records are new: no tag of theirs can be there already (no ON CONFLICT, whose check of
    -- the key costs a probe a row).
    with written as (
        insert into emem.record_tags (record_id, tag, lane_name)
        select tagged.record_id, tagged.tag, tagged.lane_name
        from (select distinct c.record_id, p.lane as lane_name, emem._normal_tag(t.tag) as tag
              from pg_catalog.unnest(parsed) as p
              join pg_catalog.unnest(created_ids) as c(record_id) on c.record_id = new_ids[p.item_number]
              cross join lateral pg_catalog.jsonb_array_elements_text(coalesce(p.tags, '[]')) as t(tag)) as tagged
        order by tagged.lane_name, tagged.tag, tagged.record_id
        returning emem.record_tags.lane_name, emem.record_tags.tag
    )
    select pg_catalog.array_agg(w.lane_name), pg_catalog.array_agg(w.tag) into tag_lanes, tag_names from written as w;
    perform emem._count_tags(tag_lanes, tag_names);

    if dimension is not null and pg_catalog.cardinality(created_ids)
                                 < pg_catalog.cardinality(pg_catalog.array_remove(new_ids, null)) then
        delete from emem.record_vectors as v
        where v.space_id = space.space_id and v.record_id = any (pg_catalog.array_remove(new_ids, null))
          and v.record_id <> all (created_ids);
    end if;
    -- Nothing to queue when every record came with a vector and its space is the only one.
    if dimension is null or exists (select from pg_catalog.unnest(vectors) as v (vector) where v.vector is null)
       or exists (select from emem.embedding_spaces as s where s.space_id <> space.space_id) then
        perform emem._queue_new_records(q.record_ids, q.lanes, q.with_vectors, space.space_id)
        from (select pg_catalog.array_agg(c.record_id) as record_ids, pg_catalog.array_agg(p.lane) as lanes,
                     pg_catalog.array_agg(v.vector is not null) as with_vectors
              from pg_catalog.unnest(parsed) as p
              join pg_catalog.unnest(created_ids) as c(record_id) on c.record_id = new_ids[p.item_number]
              left join pg_catalog.unnest(vectors) with ordinality as v(vector, n) on v.n = p.item_number) as q
        where q.record_ids is not null;
    end if;

    -- A key a concurrent writer stored meanwhile: that writer's record.
    if pg_catalog.cardinality(created_ids) < pg_catalog.cardinality(pg_catalog.array_remove(new_ids, null)) then
        stored := emem._stored_keys(parsed);
    end if;
    return query
    select p.item_number,
           coalesce(c.record_id, stored_ids[p.item_number], (stored->>(p.lane || '/' || p.source_key))::bigint),
           c.record_id is not null
    from pg_catalog.unnest(parsed) as p
    left join pg_catalog.unnest(created_ids) as c(record_id) on c.record_id = new_ids[p.item_number]
    order by p.item_number;
end
$$;
comment on function emem.put_records(jsonb, integer) is
  'The bulk path: writes a JSON array of records ({kind, content, lane, tags, authority, occurred_at, thread_id, thread_position, metadata, source_key, vector}), all or nothing, into the lanes the role writes; a vector is an array of numbers or, faster, pgvector''s text "[0.1,0.2,...]"; returns each item''s record id. An item whose source_key its lane holds already is not written again (created = false). Vectors are stored at unit length. Limits: 50000 items, 64 MB, content 200000 characters, keys and thread ids 500, tags 200 (1000 per item), metadata 64 kB.';

create function emem.put_record(
    kind text, content text, lane text, tags text[] default '{}', authority real default 0.5,
    occurred_at timestamptz default null, thread_id text default null, thread_position integer default null,
    metadata jsonb default '{}', source_key text default null
) returns bigint
language sql
set search_path = pg_catalog, pg_temp
as $$
    select p.record_id
    from emem.put_records(pg_catalog.jsonb_build_array(pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
        'kind', kind, 'content', content, 'lane', lane, 'tags', pg_catalog.to_jsonb(tags),
        'authority', authority, 'occurred_at', occurred_at, 'thread_id', thread_id,
        'thread_position', thread_position, 'metadata', metadata, 'source_key', source_key)))) as p
$$;
comment on function emem.put_record(text, text, text, text[], real, timestamptz, text, integer, jsonb, text) is
  'Writes one record with its tags and returns its id (kinds: note, conversation, file, entity; conversation and file records need thread_id and thread_position).';

-- A record the acting role may read (writing => false) or write, or a clear error. An unreadable
-- record is an unknown one: its existence is not revealed.
create function emem._require_record(record_id bigint, what text, writing boolean) returns emem.records
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    role regrole := emem._acting_role();
    found_record emem.records;
    lanes text[];
begin
    select * into found_record from emem.records as r where r.record_id = _require_record.record_id;
    if found then
        lanes := emem._lanes_of(role, false);
        if lanes is not null and found_record.lane_name <> all (lanes) then
            found := false;
        end if;
    end if;
    if not found then
        raise exception 'unknown % %', what, coalesce(record_id::text, 'NULL')
            using errcode = '22023', hint = 'The record does not exist or lies outside the lanes of this role.';
    end if;
    lanes := emem._lanes_of(role, true);
    if writing and lanes is not null and found_record.lane_name <> all (lanes) then
        raise exception '% % lies in lane %, which this role may read but not write', what, record_id,
            found_record.lane_name using errcode = '42501';
    end if;
    return found_record;
end
$$;
comment on function emem._require_record(bigint, text, boolean) is
  'The record with this id when the acting role can read it (and write it, writing => true); otherwise an error.';

create function emem._check_tags(tags text[]) returns text[]
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    if tags is null or pg_catalog.cardinality(tags) not between 1 and 1000 or exists (
        select 1 from pg_catalog.unnest(tags) as t where t is null or pg_catalog.length(t) > 200 or emem._is_blank(t)) then
        raise exception 'tags must be an array of 1 to 1000 texts of 1 to 200 characters, not only white space'
            using errcode = '22023';
    end if;
    return array(select distinct emem._normal_tag(t) from pg_catalog.unnest(tags) as t order by 1);
end
$$;
comment on function emem._check_tags(text[]) is 'The given tags, stored form, after checking they are non-empty texts.';

create function emem.tag_record(record_id bigint, tags text[]) returns void
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
as $$
declare
    tagged emem.records := emem._require_record(record_id, 'record', true);
    wanted text[] := emem._check_tags(tags);
begin
    perform emem._add_tags(pg_catalog.array_fill(tagged.record_id, array[pg_catalog.cardinality(wanted)]),
                           pg_catalog.array_fill(tagged.lane_name, array[pg_catalog.cardinality(wanted)]), wanted);
end
$$;
comment on function emem.tag_record(bigint, text[]) is 'Adds tags to a record (tags it already has are kept).';

create function emem.untag_record(record_id bigint, tags text[]) returns integer
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
as $$
declare
    removed integer;
    unwanted text[] := emem._check_tags(tags);
begin
    perform emem._require_record(record_id, 'record', true);
    removed := emem._remove_tags(array[untag_record.record_id], unwanted);
    return removed;
end
$$;
comment on function emem.untag_record(bigint, text[]) is 'Removes tags from a record; returns how many it had.';

-- What is wrong with an edge's relation and properties, or NULL.
-- Without a SET clause: it runs for each item of put_edges, and setting search_path costs a call
-- as much as its checks. Every name in it is qualified.
create function emem._edge_problem(relation text, properties jsonb) returns text
language sql immutable
as $$
    select case
        when relation is null or emem._is_blank(relation) or pg_catalog.length(relation) operator(pg_catalog.>) 200
             or relation operator(pg_catalog.~) '[[:cntrl:]]'
            then 'relation must be a text of 1 to 200 characters, not only white space, without control characters'
        when properties is null or pg_catalog.jsonb_typeof(properties) operator(pg_catalog.<>) 'object'
            then 'properties must be a JSON object'
        when pg_catalog.pg_column_size(properties) operator(pg_catalog.>) 65536 then 'properties must be at most 64 kB'
        -- Each value is a label of the edge (emem.edge_labels), indexed whole: 2000 bytes fit an index row.
        when exists (select 1 from pg_catalog.jsonb_path_query(properties, 'strict $.**') as value
                     where pg_catalog.jsonb_typeof(value) operator(pg_catalog.=) any (array['string', 'number'])
                       and (pg_catalog.length(value operator(pg_catalog.#>>) '{}') operator(pg_catalog.>) 1000
                            or pg_catalog.octet_length(value operator(pg_catalog.#>>) '{}') operator(pg_catalog.>) 2000))
            then 'a property value (a text or a number) is longer than 1000 characters or 2000 bytes'
    end
$$;
comment on function emem._edge_problem(text, jsonb) is 'What is wrong with an edge''s relation or properties, or NULL.';

-- Edges written (parallel arrays; relations trimmed), each with its label rows; a link that
-- exists already is the same edge. Returns each one's edge id and whether it is new.
create function emem._write_edges(
    from_ids bigint[], to_ids bigint[], relations text[], properties jsonb[], from_lanes text[], to_lanes text[]
) returns table (n integer, edge_id bigint, created boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    new_edges bigint[];
begin
    -- In key order, so that concurrent writers of the same links lock them in one order.
    with written as (
        insert into emem.edges as e (from_record_id, to_record_id, relation, properties, from_lane_name, to_lane_name)
        select distinct on (w.from_lane, w.from_id, w.to_id, w.relation, pg_catalog.md5(w.properties::text))
               w.from_id, w.to_id, w.relation, w.properties, w.from_lane, w.to_lane
        from rows from (pg_catalog.unnest(_write_edges.from_ids), pg_catalog.unnest(_write_edges.to_ids), pg_catalog.unnest(_write_edges.relations),
                        pg_catalog.unnest(_write_edges.properties), pg_catalog.unnest(_write_edges.from_lanes), pg_catalog.unnest(_write_edges.to_lanes))
             as w (from_id, to_id, relation, properties, from_lane, to_lane)
        order by w.from_lane, w.from_id, w.to_id, w.relation, pg_catalog.md5(w.properties::text)
        on conflict (from_lane_name, from_record_id, to_record_id, relation, (pg_catalog.md5(properties::text))) do nothing
        returning e.edge_id
    )
    select pg_catalog.array_agg(written.edge_id) into new_edges from written;
    if new_edges is not null then
        perform emem._write_edge_labels(new_edges);
    end if;
    return query
        select w.n::integer, e.edge_id, c.edge_id is not null
        from rows from (pg_catalog.unnest(_write_edges.from_ids), pg_catalog.unnest(_write_edges.to_ids), pg_catalog.unnest(_write_edges.relations),
                        pg_catalog.unnest(_write_edges.properties), pg_catalog.unnest(_write_edges.from_lanes))
             with ordinality as w (from_id, to_id, relation, properties, from_lane, n)
        join emem.edges as e
          on e.from_lane_name = w.from_lane and e.from_record_id = w.from_id and e.to_record_id = w.to_id
         and e.relation = w.relation and pg_catalog.md5(e.properties::text) = pg_catalog.md5(w.properties::text)
        left join pg_catalog.unnest(new_edges) as c (edge_id) on c.edge_id = e.edge_id
        -- The edges at these records only: a join planned over every edge hashed them all.
        where e.from_record_id = any (_write_edges.from_ids)
        order by w.n;
end
$$;
comment on function emem._write_edges(bigint[], bigint[], text[], jsonb[], text[], text[]) is
  'Writes edges (parallel arrays) with their label rows; returns each one''s id and whether it is new.';

-- Two links with the same ends, relation and properties are one edge.
create function emem.link_records(
    from_record_id bigint, to_record_id bigint, relation text, properties jsonb default '{}'
) returns bigint
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
as $$
declare
    from_end emem.records := emem._require_record(from_record_id, 'from record', true);
    to_end emem.records := emem._require_record(to_record_id, 'to record', false);
    problem text := emem._edge_problem(relation, properties);
begin
    if problem is not null then
        raise exception '%', problem using errcode = '22023';
    end if;
    return (select w.edge_id
            from emem._write_edges(array[from_record_id], array[to_record_id], array[pg_catalog.btrim(relation)],
                                   array[properties], array[from_end.lane_name], array[to_end.lane_name]) as w);
end
$$;
comment on function emem.link_records(bigint, bigint, text, jsonb) is
  'Links two records with a directed edge (a relation name and JSON properties) and returns its id; the same link again returns the same edge. The from record must lie in a lane the role writes, the to record in one it reads. Limits: a relation of 1 to 200 characters without control characters; properties a JSON object of at most 64 kB, each value (text or number) at most 1000 characters and 2000 bytes.';

-- The bulk path of links: all or nothing, each item checked as link_records checks it.
create function emem.put_edges(items jsonb)
returns table (item_number integer, edge_id bigint, created boolean)
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
    problem_number bigint;
    problem text;
    writable text[] := emem._lanes_of(emem._acting_role(), true);
    readable text[] := emem._lanes_of(emem._acting_role(), false);
    from_ids bigint[];
    to_ids bigint[];
    relations text[];
    properties jsonb[];
    from_lanes text[];
    to_lanes text[];
begin
    if items is null or pg_catalog.jsonb_typeof(items) <> 'array' or pg_catalog.jsonb_array_length(items) > 50000 then
        raise exception 'items must be a JSON array of at most 50000 edge objects {from_record_id, to_record_id, relation, properties}'
            using errcode = '22023';
    end if;
    with item as (
        select i.n, f.record_id as from_id, t.record_id as to_id, pg_catalog.btrim(i.item->>'relation') as relation,
               coalesce(i.item->'properties', '{}') as properties, f.lane_name as from_lane, t.lane_name as to_lane,
               case
                   when pg_catalog.jsonb_typeof(i.item) <> 'object' then 'is not a JSON object'
                   when exists (select 1 from pg_catalog.jsonb_object_keys(i.item) as k
                                where k <> all (array['from_record_id', 'to_record_id', 'relation', 'properties']))
                       then 'has an unknown key; accepted: from_record_id, to_record_id, relation, properties'
                   when i.from_text is null or i.to_text is null then 'from_record_id and to_record_id must be record ids'
                   when f.record_id is null or (readable is not null and f.lane_name <> all (readable))
                       then pg_catalog.format('unknown from record %s', i.from_text)
                   when writable is not null and f.lane_name <> all (writable)
                       then pg_catalog.format('from record %s lies in lane %s, which this role may read but not write',
                                              i.from_text, f.lane_name)
                   when t.record_id is null or (readable is not null and t.lane_name <> all (readable))
                       then pg_catalog.format('unknown to record %s', i.to_text)
                   else emem._edge_problem(i.item->>'relation', coalesce(i.item->'properties', '{}'))
               end as problem
        from (select e.item, e.n,
                     case when pg_catalog.jsonb_typeof(e.item->'from_record_id') = 'number'
                               and (e.item->>'from_record_id') ~ '^[0-9]{1,18}$' then e.item->>'from_record_id' end
                         as from_text,
                     case when pg_catalog.jsonb_typeof(e.item->'to_record_id') = 'number'
                               and (e.item->>'to_record_id') ~ '^[0-9]{1,18}$' then e.item->>'to_record_id' end
                         as to_text
              from pg_catalog.jsonb_array_elements(items) with ordinality as e (item, n)) as i
        left join emem.records as f on f.record_id = i.from_text::bigint
        left join emem.records as t on t.record_id = i.to_text::bigint
    )
    select (select x.n from item as x where x.problem is not null order by x.n limit 1),
           (select x.problem from item as x where x.problem is not null order by x.n limit 1),
           pg_catalog.array_agg(x.from_id order by x.n), pg_catalog.array_agg(x.to_id order by x.n),
           pg_catalog.array_agg(x.relation order by x.n), pg_catalog.array_agg(x.properties order by x.n),
           pg_catalog.array_agg(x.from_lane order by x.n), pg_catalog.array_agg(x.to_lane order by x.n)
    into problem_number, problem, from_ids, to_ids, relations, properties, from_lanes, to_lanes
    from item as x;
    if problem is not null then
        raise exception 'item %: %', problem_number, problem
            using errcode = case when problem like '%may read but not write' then '42501' else '22023' end;
    end if;
    if from_ids is null then
        return;
    end if;
    return query select w.n, w.edge_id, w.created
                 from emem._write_edges(from_ids, to_ids, relations, properties, from_lanes, to_lanes) as w;
end
$$;
comment on function emem.put_edges(jsonb) is
  'The bulk path of links: writes a JSON array of edges ({from_record_id, to_record_id, relation, properties}), all or nothing, each checked as emem.link_records checks it (from records in lanes the role writes, to records in lanes it reads); returns each item''s edge id and whether it is new. At most 50000 items.';

create function emem.put_record_vector(record_id bigint, embedding public.vector, space_id integer default null)
returns void
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces := emem._resolve_space(space_id);
    vectored emem.records;
begin
    vectored := emem._require_record(record_id, 'record', true);
    perform emem._check_vector(embedding, space, 'the record vector');
    insert into emem.record_vectors as rv (space_id, record_id, embedding, lane_name)
        values (space.space_id, put_record_vector.record_id, public.l2_normalize(embedding), vectored.lane_name)
        on conflict on constraint record_vectors_pkey do update set embedding = excluded.embedding;
    perform emem._dequeue_records(space.space_id, array[put_record_vector.record_id]);
end
$$;
comment on function emem.put_record_vector(bigint, public.vector, integer) is
  'Stores (or replaces) a record''s vector, at unit length, in the given embedding space, the active one by default.';

create function emem.put_window(member_record_ids bigint[], embedding public.vector, space_id integer default null)
returns bigint
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
    space emem.embedding_spaces := emem._resolve_space(space_id);
    run record;
    new_window_id bigint;
begin
    if member_record_ids is null or pg_catalog.cardinality(member_record_ids) not between 1 and 1000
       or pg_catalog.array_position(member_record_ids, null) is not null then
        raise exception 'a window needs an array of 1 to 1000 record ids without NULLs' using errcode = '22023';
    end if;
    perform emem._require_record(m, 'window member', true) from pg_catalog.unnest(member_record_ids) as m;
    if embedding is not null then
        perform emem._check_vector(embedding, space, 'the window vector');
    end if;
    select pg_catalog.min(r.kind::text)::emem.record_kind as kind, pg_catalog.count(distinct r.kind) as kinds,
           pg_catalog.min(r.thread_id) as thread_id, pg_catalog.count(distinct r.thread_id) as threads,
           pg_catalog.min(r.lane_name) as lane_name, pg_catalog.count(distinct r.lane_name) as lanes,
           pg_catalog.min(r.thread_position) as first_position, pg_catalog.max(r.thread_position) as last_position,
           pg_catalog.count(*) as members
    into run
    from emem.records as r
    where r.record_id in (select pg_catalog.unnest(member_record_ids));
    if run.kinds <> 1 or not emem._has_thread(run.kind) or run.threads <> 1 then
        raise exception 'window members must all be records of one conversation or of one file'
            using errcode = '22023';
    end if;
    if run.lanes <> 1 then
        raise exception 'window members must all lie in one lane' using errcode = '22023';
    end if;
    if run.members <> pg_catalog.cardinality(member_record_ids)
       or run.last_position - run.first_position + 1 <> run.members then
        raise exception 'window members must be consecutive records of their % (distinct, no gap), got positions %',
            run.kind, (select pg_catalog.array_agg(r.thread_position order by r.thread_position)
                       from emem.records as r where r.record_id = any (member_record_ids))
            using errcode = '22023';
    end if;
    insert into emem.windows as w (space_id, lane_name, thread_kind, thread_id, first_position, last_position, embedding)
        values (space.space_id, run.lane_name, run.kind, run.thread_id, run.first_position, run.last_position,
                public.l2_normalize(embedding))
        on conflict on constraint one_window_per_run do update set embedding = coalesce(excluded.embedding, w.embedding)
        returning w.window_id into new_window_id;
    insert into emem.window_members (window_id, record_id, lane_name)
        select new_window_id, m, run.lane_name from pg_catalog.unnest(member_record_ids) as m
        on conflict do nothing;
    perform emem._sync_runs(array[row(run.lane_name, run.kind, run.thread_id, run.first_position,
                                      run.last_position)::emem._window_run]);
    return new_window_id;
end
$$;
comment on function emem.put_window(bigint[], public.vector, integer) is
  'Stores a window: a vector over consecutive records of one conversation or file (its members); the same run again replaces its vector. A NULL vector stores the window without one, for the embedding queue to fill (a stored vector is kept). Returns the window id.';

-- ---- edits, deletes and moves: the API's, so that what derives from a record follows it ------------

-- Records the acting role may write, all of them, or a clear error naming the first it may not.
create function emem._writable_records(record_ids bigint[], what text) returns emem.records[]
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    writable text[] := emem._lanes_of(emem._acting_role(), true);
    found_records emem.records[];
    wanted bigint;
begin
    if record_ids is null or pg_catalog.cardinality(record_ids) not between 1 and 50000
       or pg_catalog.array_position(record_ids, null) is not null then
        raise exception '% needs an array of 1 to 50000 record ids without NULLs', what using errcode = '22023';
    end if;
    found_records := array(select x from emem.records as x
                           where x.record_id = any (record_ids) and (writable is null or x.lane_name = any (writable))
                           order by x.record_id);
    -- Ids compared apart from the table: a Citus cluster cannot run a correlated probe over an unnest.
    select min(w) into wanted
    from (select pg_catalog.unnest(record_ids) as w
          except select x.record_id from pg_catalog.unnest(found_records) as x) as missing;
    if wanted is not null then
        perform emem._require_record(wanted, 'record', true);
    end if;
    return found_records;
end
$$;
comment on function emem._writable_records(bigint[], text) is
  'The records with these ids when the acting role may write every one of them; otherwise an error naming the first it may not.';

create function emem.update_record(
    record_id bigint, content text default null, metadata jsonb default null, authority real default null,
    occurred_at timestamptz default null
) returns boolean
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
as $$
declare
    edited emem.records := emem._require_record(record_id, 'record', true);
begin
    if content is not null and (emem._is_blank(content) or pg_catalog.length(content) > 200000) then
        raise exception 'content must be a non-empty text of at most 200000 characters' using errcode = '22023';
    end if;
    if metadata is not null and (pg_catalog.jsonb_typeof(metadata) <> 'object' or pg_catalog.pg_column_size(metadata) > 65536) then
        raise exception 'metadata must be a JSON object of at most 64 kB' using errcode = '22023';
    end if;
    if authority is not null and not authority between 0 and 1 then
        raise exception 'authority % is out of range', authority using errcode = '22023', hint = 'Accepted: 0 to 1.';
    end if;
    update emem.records as r
        set content = coalesce(update_record.content, r.content), metadata = coalesce(update_record.metadata, r.metadata),
            authority = coalesce(update_record.authority, r.authority),
            occurred_at = coalesce(update_record.occurred_at, r.occurred_at)
        where r.record_id = update_record.record_id and r.lane_name = edited.lane_name;
    if content is not null and content is distinct from edited.content then
        perform emem._requeue_edited(array[update_record.record_id]);
        return true;
    end if;
    return false;
end
$$;
comment on function emem.update_record(bigint, text, jsonb, real, timestamptz) is
  'Edits a record the role may write (arguments left NULL keep their value); a new content removes its vectors and stales the windows holding it, which are queued for embedding again. Returns whether the content changed.';

create function emem.delete_records(record_ids bigint[]) returns bigint
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
    perform emem._writable_records(record_ids, 'delete_records');
    return emem._delete_records(record_ids);
end
$$;
comment on function emem.delete_records(bigint[]) is
  'Deletes records (1 to 50000, all in lanes the role writes) with their tags, vectors, the windows holding them, their queued work and the edges at them; returns how many went.';

-- A lane column is the distribution column on a Citus cluster, which no UPDATE may change: rows
-- change lanes as copies in the new lane, then the old rows go.
create function emem._relane(table_name text, id_column text, lane_column text, ids bigint[], lane text)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    target_columns text;
    copied_values text;
    moved_rows bigint;
begin
    select pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' order by a.attnum),
           pg_catalog.string_agg(case when a.attname = lane_column then '$2'
                                      else 'x.' || pg_catalog.quote_ident(a.attname) end, ', ' order by a.attnum)
    into target_columns, copied_values
    from pg_catalog.pg_attribute as a
    where a.attrelid = pg_catalog.to_regclass('emem.' || table_name) and a.attnum > 0
      and not a.attisdropped and a.attgenerated = '';
    execute pg_catalog.format(
        'insert into emem.%1$I (%2$s) select %3$s from emem.%1$I as x where x.%4$I = any ($1) and x.%5$I <> $2',
        table_name, target_columns, copied_values, id_column, lane_column) using ids, lane;
    execute pg_catalog.format('delete from emem.%1$I as x where x.%2$I = any ($1) and x.%3$I <> $2',
                              table_name, id_column, lane_column) using ids, lane;
    get diagnostics moved_rows = row_count;
    return moved_rows;
end
$$;

-- A record moved keeps its id; its tags and vectors move with it, its windows go (a window is a
-- run of one lane), its edges take the new lane at that end.
create function emem.move_records(record_ids bigint[], lane text) returns bigint
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
    moved emem.records[] := emem._writable_records(record_ids, 'move_records');
    writable text[] := emem._lanes_of(emem._acting_role(), true);
    ids bigint[];
    count_moved bigint;
    tag_records bigint[];
    tag_names text[];
begin
    if lane is null or not exists (select 1 from emem.lanes as l where l.lane_name operator(pg_catalog.=) lane)
       or not (writable is null or lane = any (writable)) then
        raise exception 'lane % is not a lane this role may write (unknown, or outside its agent profile)',
            coalesce(pg_catalog.quote_literal(pg_catalog.left(lane, 100)), 'NULL') using errcode = '42501';
    end if;
    ids := array(select (m).record_id from pg_catalog.unnest(moved) as m where (m).lane_name <> lane);
    if pg_catalog.cardinality(ids) = 0 then
        return 0;
    end if;
    if exists (select 1 from emem.records as taken
               where taken.lane_name = lane
                 and taken.source_key = any (array(select (m).source_key from pg_catalog.unnest(moved) as m
                                                   where (m).record_id = any (ids)))) then
        raise exception 'a record to move has a source_key that lane % holds already', lane using errcode = '23505';
    end if;
    perform emem._delete_windows(array(select distinct m.window_id from emem.window_members as m
                                       where m.record_id = any (ids)));
    select pg_catalog.array_agg(rt.record_id order by rt.record_id, rt.tag), pg_catalog.array_agg(rt.tag order by rt.record_id, rt.tag)
    into tag_records, tag_names
    from emem.record_tags as rt where rt.record_id = any (ids);
    perform emem._remove_tags(ids, null);
    count_moved := emem._relane('records', 'record_id', 'lane_name', ids, lane);
    if tag_records is not null then
        perform emem._add_tags(tag_records, pg_catalog.array_fill(lane, array[pg_catalog.cardinality(tag_records)]),
                               tag_names);
    end if;
    perform emem._relane('record_vectors', 'record_id', 'lane_name', ids, lane);
    perform emem._relane('embedding_queue', 'record_id', 'lane_name', ids, lane);
    perform emem._relane('edges', 'from_record_id', 'from_lane_name', ids, lane);
    update emem.edges as e set to_lane_name = lane where e.to_record_id = any (ids);
    perform emem._relane('edge_labels', 'record_id', 'lane_name', ids, lane);
    update emem.edge_labels as l set far_lane_name = lane where l.far_record_id = any (ids);
    -- The moved edges' labels in the vocabulary of their from ends' new lane.
    insert into emem.edge_label_vocabulary (lane_name, label, label_terms, namespace_terms)
    select distinct on (l.label) lane, l.label, l.label_terms, l.namespace_terms
    from emem.edge_labels as l
    where l.record_id = any (ids)
    order by l.label
    on conflict do nothing;
    return count_moved;
end
$$;
comment on function emem.move_records(bigint[], text) is
  'Moves records (1 to 50000, in lanes the role writes) into another lane it writes: their ids, tags, vectors and edges move with them, the windows holding them are deleted (a window is a run of one lane). Returns how many moved.';

create function emem.unlink_records(edge_id bigint) returns boolean
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
as $$
declare
    edge emem.edges;
begin
    select * into edge from emem.edges as e where e.edge_id = unlink_records.edge_id;
    if not found then
        return false;
    end if;
    perform emem._require_record(edge.from_record_id, 'from record', true);
    return emem._delete_edges(array[unlink_records.edge_id]) > 0;
end
$$;
comment on function emem.unlink_records(bigint) is
  'Deletes an edge whose from record lies in a lane the role writes; returns whether it existed.';

create function emem.drop_embedding_space(space_id integer) returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces := emem._check_space_id(space_id);
begin
    delete from emem.record_vectors as v where v.space_id = space.space_id;
    delete from emem.window_members as m
        where m.window_id in (select w.window_id from emem.windows as w where w.space_id = space.space_id);
    delete from emem.windows as w where w.space_id = space.space_id;
    delete from emem.embedding_queue as q where q.space_id = space.space_id;
    execute pg_catalog.format('drop index if exists emem.record_vectors_space_%s', space.space_id);
    execute pg_catalog.format('drop index if exists emem.windows_space_%s', space.space_id);
    delete from emem.embedding_spaces as s where s.space_id = space.space_id;
    perform emem._sync_lane_indexes();
    return true;
end
$$;
comment on function emem.drop_embedding_space(integer) is
  'Drops an embedding space with its vectors, windows, queued work and HNSW indexes (for the extension''s owner; a space that answers finds is better switched with emem.activate_embedding_space first).';
