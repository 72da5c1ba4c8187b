-- The write API. Every function checks its arguments and says what it accepts
-- (SQLSTATE 22023 for a value it does not accept, 42501 for a lane the role may not write).
-- Functions run with the caller's rights: row-level security keeps agents inside their lanes.

-- No SET clause, so that it is inlined into bulk writes; every name in it is qualified.
create function emem.normal_tag(tag text) returns text
language sql immutable strict parallel safe
as $$ select pg_catalog.lower(pg_catalog.btrim(pg_catalog.regexp_replace(tag, '\s+', ' ', 'g'))) $$;
comment on function emem.normal_tag(text) is 'How tags are stored: every run of white space one space, trimmed, lower-case.';

create function emem.create_embedding_space(
    model_name text, dimension integer, fingerprint text default null, activate boolean default false
) returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    new_space_id integer;
begin
    if model_name is null or pg_catalog.btrim(model_name) = '' then
        raise exception 'model_name must be a non-empty text' using errcode = '22023';
    end if;
    if dimension is null or dimension not between 1 and 2000 then
        raise exception 'dimension % is out of range', coalesce(dimension::text, 'NULL')
            using errcode = '22023', hint = 'Accepted: 1 to 2000 (the most pgvector indexes with HNSW).';
    end if;
    insert into emem.embedding_spaces as s (model_name, dimension, fingerprint)
        values (create_embedding_space.model_name, create_embedding_space.dimension, create_embedding_space.fingerprint)
        on conflict on constraint embedding_spaces_model_name_dimension_key do update
            set fingerprint = coalesce(excluded.fingerprint, s.fingerprint)
        returning s.space_id into new_space_id;
    if activate then
        perform emem.activate_embedding_space(new_space_id);
    end if;
    return new_space_id;
end
$$;
comment on function emem.create_embedding_space(text, integer, text, boolean) is
  'Creates (or returns) the embedding space of a model and dimension, with its HNSW indexes; activate => true makes it the active one.';

create function emem.activate_embedding_space(space_id integer) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if not exists (select from emem.embedding_spaces as s where s.space_id = activate_embedding_space.space_id) then
        raise exception 'unknown embedding space %', coalesce(space_id::text, 'NULL')
            using errcode = '22023', hint = 'See emem.embedding_spaces for the spaces that exist.';
    end if;
    update emem.embedding_spaces as s set is_active = false
        where s.is_active and s.space_id <> activate_embedding_space.space_id;
    update emem.embedding_spaces as s set is_active = true
        where s.space_id = activate_embedding_space.space_id;
end
$$;
comment on function emem.activate_embedding_space(integer) is 'Makes the given embedding space the one active space.';

-- The space a vector is written to: the given one, or the active one.
create function emem.resolve_space(space_id integer) returns emem.embedding_spaces
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
        select * into space from emem.embedding_spaces as s where s.space_id = resolve_space.space_id;
        if not found then
            raise exception 'unknown embedding space %', space_id using errcode = '22023';
        end if;
    end if;
    return space;
end
$$;
comment on function emem.resolve_space(integer) is 'The given embedding space, or the active one when NULL; an error when there is none.';

create function emem.check_vector(embedding public.vector, space emem.embedding_spaces, what text) returns void
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
comment on function emem.check_vector(public.vector, emem.embedding_spaces, text) is
  'Refuses a vector that is NULL, of another dimension than the space, or zero (pgvector itself refuses NaN and infinity).';

create function emem.put_records(items jsonb, space_id integer default null)
returns table (item_number integer, record_id bigint, created boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    problem record;
    space emem.embedding_spaces;
    dimension integer;
    item_count integer;
    vectors public.vector[];
    stored_ids bigint[];
    new_ids bigint[];
    created_ids bigint[];
begin
    if items is null or pg_catalog.jsonb_typeof(items) <> 'array' then
        raise exception 'items must be a JSON array of record objects' using errcode = '22023';
    end if;
    item_count := pg_catalog.jsonb_array_length(items);
    if item_count > 50000 then
        raise exception 'at most 50000 items per call, got %', item_count
            using errcode = '22023', hint = 'Split the load into batches.';
    end if;
    if pg_catalog.jsonb_path_exists(items, 'lax $[*].vector') then
        space := emem.resolve_space(space_id);
        dimension := space.dimension;
    end if;

    select i.n, i.reason into problem
    from (
        select n, case
            when pg_catalog.jsonb_typeof(item) <> 'object' then 'is not a JSON object'
            when exists (select from pg_catalog.jsonb_object_keys(item) as k
                         where k <> all (array['kind', 'content', 'lane', 'tags', 'authority', 'occurred_at',
                                               'thread_id', 'thread_position', 'metadata', 'source_key', 'vector']))
                then 'has an unknown key; accepted: kind, content, lane, tags, authority, occurred_at, '
                     'thread_id, thread_position, metadata, source_key, vector'
            when coalesce(item->>'kind', '') not in ('note', 'conversation', 'file', 'entity')
                then 'kind must be one of note, conversation, file, entity'
            when pg_catalog.jsonb_typeof(item->'content') is distinct from 'string'
                 or pg_catalog.btrim(item->>'content') = '' or pg_catalog.length(item->>'content') > 200000
                then 'content must be a non-empty text of at most 200000 characters (split longer text into file chunks)'
            when not exists (select from emem.lanes as l where l.lane_name = item->>'lane')
                then pg_catalog.format('lane %s is not a lane this role may write (unknown, or outside its agent profile)',
                                       coalesce(pg_catalog.quote_literal(item->>'lane'), 'NULL'))
            when (item->>'kind' in ('conversation', 'file'))
                 and (pg_catalog.jsonb_typeof(item->'thread_id') is distinct from 'string'
                      or coalesce(item->>'thread_id', '') = ''
                      or pg_catalog.jsonb_typeof(item->'thread_position') is distinct from 'number'
                      or (item->>'thread_position') !~ '^[0-9]{1,9}$')
                then 'conversation and file records need a thread_id (text) and a thread_position (an integer from 0)'
            when (item->>'kind' not in ('conversation', 'file')) and (item ? 'thread_id' or item ? 'thread_position')
                then 'only conversation and file records have a thread_id and thread_position'
            when item ? 'tags' and (pg_catalog.jsonb_typeof(item->'tags') <> 'array'
                 or pg_catalog.jsonb_path_exists(item->'tags', 'strict $[*] ? (@.type() != "string")')
                 or exists (select from pg_catalog.jsonb_array_elements_text(item->'tags') as t
                            where emem.normal_tag(t) = '' or pg_catalog.length(t) > 200))
                then 'tags must be an array of texts of 1 to 200 characters, not only white space'
            when item ? 'authority' and (pg_catalog.jsonb_typeof(item->'authority') <> 'number'
                 or (item->>'authority')::numeric not between 0 and 1)
                then 'authority must be a number from 0 to 1'
            when item ? 'metadata' and pg_catalog.jsonb_typeof(item->'metadata') <> 'object'
                then 'metadata must be a JSON object'
            when item ? 'source_key' and (pg_catalog.jsonb_typeof(item->'source_key') <> 'string'
                 or item->>'source_key' = '')
                then 'source_key must be a non-empty text'
            when item ? 'vector' and pg_catalog.jsonb_typeof(item->'vector') not in ('array', 'string')
                then pg_catalog.format('vector must be an array of %s numbers, or pgvector''s text of one'
                                       ' such as "[0.1,0.2,...]" (embedding space %s, %s)',
                                       dimension, space.space_id, space.model_name)
            when i.n > pg_catalog.min(i.n) over (partition by i.item->>'lane', i.item->>'source_key')
                 and item ? 'source_key'
                then 'repeats the lane and source_key of an earlier item of this batch'
            end as reason
        from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
    ) as i
    where i.reason is not null
    order by i.n
    limit 1;
    if found then
        raise exception 'item %: %', problem.n, problem.reason
            using errcode = case when problem.reason like 'lane % is not a lane%' then '42501' else '22023' end;
    end if;

    -- Vectors are parsed once by pgvector (from the array's text, or the string as given: the
    -- string is the fast form for bulk loads) and stored at unit length: cosine is all emem
    -- measures, and unit vectors cannot overflow its arithmetic.
    if dimension is not null then
        vectors := array(
            select case when i.item ? 'vector' then
                       (case when pg_catalog.jsonb_typeof(i.item->'vector') = 'string' then i.item->>'vector'
                             else (i.item->'vector')::pg_catalog.text end)::public.vector end
            from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
            order by i.n);
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
    stored_ids := array(
        select (select r.record_id from emem.records as r
                where r.lane_name = i.item->>'lane' and r.source_key = i.item->>'source_key')
        from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
        order by i.n);
    new_ids := array(
        select case when stored_ids[n] is null then pg_catalog.nextval('emem.records_record_id_seq') end
        from pg_catalog.generate_series(1, item_count) as n);

    -- Records first, in a statement of their own, so that the row-level security checks of the
    -- tags and vectors below see them; a key a concurrent writer stored meanwhile is skipped.
    with inserted as (
        insert into emem.records (record_id, kind, content, lane_name, authority, occurred_at,
                                  thread_id, thread_position, metadata, source_key)
        select new_ids[i.n], x.kind, x.content, x.lane, coalesce(x.authority, 0.5),
               coalesce(x.occurred_at, pg_catalog.now()), x.thread_id, x.thread_position,
               coalesce(x.metadata, '{}'), x.source_key
        from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
        cross join lateral pg_catalog.jsonb_to_record(i.item) as x(
            kind text, content text, lane text, authority real, occurred_at timestamptz,
            thread_id text, thread_position integer, metadata jsonb, source_key text)
        where new_ids[i.n] is not null
        on conflict (lane_name, source_key) where source_key is not null do nothing
        returning emem.records.record_id
    )
    select coalesce(pg_catalog.array_agg(inserted.record_id), '{}') into created_ids from inserted;

    insert into emem.record_tags (record_id, tag)
    select distinct new_ids[i.n], emem.normal_tag(t.tag)
    from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
    cross join lateral pg_catalog.jsonb_array_elements_text(coalesce(i.item->'tags', '[]')) as t(tag)
    where new_ids[i.n] in (select pg_catalog.unnest(created_ids));

    if dimension is not null then
        insert into emem.record_vectors (space_id, record_id, embedding)
        select space.space_id, new_ids[n], public.l2_normalize(vectors[n])
        from pg_catalog.generate_series(1, item_count) as n
        where vectors[n] is not null and new_ids[n] in (select pg_catalog.unnest(created_ids));
    end if;

    return query
    select i.n::integer,
           case when new_ids[i.n] in (select pg_catalog.unnest(created_ids)) then new_ids[i.n]
                else coalesce(stored_ids[i.n],
                              (select r.record_id from emem.records as r
                               where r.lane_name = i.item->>'lane' and r.source_key = i.item->>'source_key'))
           end,
           new_ids[i.n] in (select pg_catalog.unnest(created_ids))
    from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
    order by i.n;
end
$$;
comment on function emem.put_records(jsonb, integer) is
  'The bulk path: writes a JSON array of records ({kind, content, lane, tags, authority, occurred_at, thread_id, thread_position, metadata, source_key, vector}), all or nothing; a vector is an array of numbers or, faster, pgvector''s text "[0.1,0.2,...]"; returns each item''s record id. An item whose source_key its lane holds already is not written again (created = false). Vectors are stored at unit length.';

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

-- A record visible to the caller, or a clear error.
create function emem.require_record(record_id bigint, what text default 'record') returns emem.records
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    found_record emem.records;
begin
    select * into found_record from emem.records as r where r.record_id = require_record.record_id;
    if not found then
        raise exception 'unknown % %', what, coalesce(record_id::text, 'NULL')
            using errcode = '22023', hint = 'The record does not exist or lies outside the lanes of this role.';
    end if;
    return found_record;
end
$$;
comment on function emem.require_record(bigint, text) is 'The record with this id when the caller can read it; otherwise an error.';

create function emem.check_tags(tags text[]) returns text[]
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    if tags is null or pg_catalog.cardinality(tags) = 0 or exists (
        select from pg_catalog.unnest(tags) as t where t is null or emem.normal_tag(t) = '' or pg_catalog.length(t) > 200) then
        raise exception 'tags must be a non-empty array of texts of 1 to 200 characters, not only white space'
            using errcode = '22023';
    end if;
    return array(select distinct emem.normal_tag(t) from pg_catalog.unnest(tags) as t order by 1);
end
$$;
comment on function emem.check_tags(text[]) is 'The given tags, stored form, after checking they are non-empty texts.';

create function emem.tag_record(record_id bigint, tags text[]) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform emem.require_record(record_id);
    insert into emem.record_tags (record_id, tag)
        select tag_record.record_id, t from pg_catalog.unnest(emem.check_tags(tags)) as t
        on conflict do nothing;
end
$$;
comment on function emem.tag_record(bigint, text[]) is 'Adds tags to a record (tags it already has are kept).';

create function emem.untag_record(record_id bigint, tags text[]) returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    removed integer;
begin
    perform emem.require_record(record_id);
    delete from emem.record_tags as rt
        where rt.record_id = untag_record.record_id and rt.tag = any (emem.check_tags(tags));
    get diagnostics removed = row_count;
    return removed;
end
$$;
comment on function emem.untag_record(bigint, text[]) is 'Removes tags from a record; returns how many it had.';

create function emem.link_records(
    from_record_id bigint, to_record_id bigint, relation text, properties jsonb default '{}'
) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    new_edge_id bigint;
begin
    perform emem.require_record(from_record_id, 'from record');
    perform emem.require_record(to_record_id, 'to record');
    if relation is null or pg_catalog.btrim(relation) = '' or pg_catalog.length(relation) > 200 then
        raise exception 'relation must be a non-empty text of at most 200 characters' using errcode = '22023';
    end if;
    if properties is null or pg_catalog.jsonb_typeof(properties) <> 'object' then
        raise exception 'properties must be a JSON object' using errcode = '22023';
    end if;
    insert into emem.edges (from_record_id, to_record_id, relation, properties)
        values (from_record_id, to_record_id, pg_catalog.btrim(relation), properties)
        returning edge_id into new_edge_id;
    return new_edge_id;
end
$$;
comment on function emem.link_records(bigint, bigint, text, jsonb) is
  'Links two records with a directed edge: a relation name and JSON properties; returns the edge id.';

create function emem.put_record_vector(record_id bigint, embedding public.vector, space_id integer default null)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces := emem.resolve_space(space_id);
begin
    perform emem.require_record(record_id);
    perform emem.check_vector(embedding, space, 'the record vector');
    insert into emem.record_vectors as rv (space_id, record_id, embedding)
        values (space.space_id, put_record_vector.record_id, public.l2_normalize(embedding))
        on conflict on constraint record_vectors_pkey do update set embedding = excluded.embedding;
end
$$;
comment on function emem.put_record_vector(bigint, public.vector, integer) is
  'Stores (or replaces) a record''s vector, at unit length, in the given embedding space, the active one by default.';

create function emem.put_window(member_record_ids bigint[], embedding public.vector, space_id integer default null)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces := emem.resolve_space(space_id);
    run record;
    new_window_id bigint;
begin
    if member_record_ids is null or pg_catalog.cardinality(member_record_ids) = 0
       or pg_catalog.array_position(member_record_ids, null) is not null then
        raise exception 'a window needs a non-empty array of record ids' using errcode = '22023';
    end if;
    perform emem.require_record(m, 'window member') from pg_catalog.unnest(member_record_ids) as m;
    perform emem.check_vector(embedding, space, 'the window vector');
    select pg_catalog.min(r.kind) as kind, pg_catalog.count(distinct r.kind) as kinds,
           pg_catalog.min(r.thread_id) as thread_id, pg_catalog.count(distinct r.thread_id) as threads,
           pg_catalog.min(r.lane_name) as lane_name, pg_catalog.count(distinct r.lane_name) as lanes,
           pg_catalog.min(r.thread_position) as first_position, pg_catalog.max(r.thread_position) as last_position,
           pg_catalog.count(*) as members
    into run
    from emem.records as r
    where r.record_id in (select pg_catalog.unnest(member_record_ids));
    if run.kinds <> 1 or run.kind not in ('conversation', 'file') or run.threads <> 1 then
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
        on conflict on constraint one_window_per_run do update set embedding = excluded.embedding
        returning w.window_id into new_window_id;
    insert into emem.window_members (window_id, record_id)
        select new_window_id, m from pg_catalog.unnest(member_record_ids) as m
        on conflict do nothing;
    return new_window_id;
end
$$;
comment on function emem.put_window(bigint[], public.vector, integer) is
  'Stores a window: a vector over consecutive records of one conversation or file (its members); the same run again replaces its vector. Returns the window id.';
