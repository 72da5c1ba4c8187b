-- emem 0.1.0 -> 0.1.1 (ALTER EXTENSION emem UPDATE). The PL/Python functions name the release
-- their modules must belong to; 0.1.1's modules read broad lists of the opt-in components lazily.

\echo Use "ALTER EXTENSION emem UPDATE" to load this file. \quit

set local search_path = pg_catalog, pg_temp;

create or replace function emem.label_terms(label text) returns text[]
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
return backend(GD, plpy, "0.1.1").analyser.label_terms(label)
$$;

create or replace function emem.analyse_question(question text) returns jsonb
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
import json
from emem_db.entry import backend
analysis = backend(GD, plpy, "0.1.1").analyser.analyse(question)
return json.dumps({"terms": analysis.terms, "known_words": analysis.known_words,
                   "unknown_terms": analysis.unknown_terms})
$$;

create or replace function emem.gather_for_role(
    caller name, question text, question_vector public.vector, page integer, page_size integer
) returns jsonb
language plpython3u volatile
security definer  -- reads every lane: the page is cut before the lane filter
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
from emem_db.gather import Gather, envelope_json
state = backend(GD, plpy, "0.1.1")
return envelope_json(Gather(state).find(caller, question, question_vector, page, page_size))
$$;

create or replace function emem.explain_for_role(
    caller name, question text, question_vector public.vector, page integer, page_size integer
) returns jsonb
language plpython3u volatile
security definer  -- reads every lane, as e_gather_find does; rows keep to the caller's lanes
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
from emem_db.gather import Gather, envelope_json
state = backend(GD, plpy, "0.1.1")
return envelope_json(Gather(state).explain(caller, question, question_vector, page, page_size))
$$;

-- Added after 0.1.1 shipped: 0.1.1's bulk path (a vector may come as pgvector's text). The frozen
-- 0.1.0 script had been edited to hold it, so this step never carried it.
create or replace function emem.put_records(items jsonb, space_id integer default null)
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
