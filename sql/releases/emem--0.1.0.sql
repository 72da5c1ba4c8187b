-- emem 0.1.0: built by the Makefile from the numbered files in sql/.
\echo Use "CREATE EXTENSION emem CASCADE" to load this file. \quit

-- Every name below is qualified: nothing in the caller's search_path can stand in for it.
set local search_path = pg_catalog, pg_temp;

-- Function bodies pin search_path to pg_catalog and name pgvector's objects with its schema.
do $$
begin
    if (select e.extnamespace::pg_catalog.regnamespace::pg_catalog.text from pg_catalog.pg_extension as e where e.extname = 'vector')
       is distinct from 'public' then
        raise exception 'emem needs pgvector installed in schema public'
            using hint = 'CREATE EXTENSION vector SCHEMA public; then CREATE EXTENSION emem.';
    end if;
end
$$;

-- Question and label analysis, in PL/Python (plpython/emem_db): tokens that keep codes,
-- names and figures whole; case, punctuation and WordNet lemmas normalised the same way on
-- both sides.

create function emem.label_terms(label text) returns text[]
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
return backend(GD, plpy, "0.1.0").analyser.label_terms(label)
$$;
comment on function emem.label_terms(text) is
  'The normalised words of a label (tag, relation name, property value): lower-case WordNet lemmas, stop words dropped, codes kept whole.';

create function emem.analyse_question(question text) returns jsonb
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
import json
from emem_db.entry import backend
analysis = backend(GD, plpy, "0.1.0").analyser.analyse(question)
return json.dumps({"terms": analysis.terms, "known_words": analysis.known_words,
                   "unknown_terms": analysis.unknown_terms})
$$;
comment on function emem.analyse_question(text) is
  'How e_gather_find reads a question: its normalised terms, the words WordNet knows, and the terms full text searches (unknown to WordNet, or figures).';

-- OR of tsqueries, for the full-text lookup's terms.
create aggregate emem.tsquery_any(tsquery) (sfunc = pg_catalog.tsquery_or, stype = tsquery);
comment on aggregate emem.tsquery_any(tsquery) is 'The OR of the given text-search queries.';
-- The EPG: lanes, agent profiles, embedding spaces, records, tags, edges, vectors and windows.
-- Tables that hold user rows are registered with pg_extension_config_dump (end of file), so
-- pg_dump keeps their data.

-- Full text keeps codes, names and figures whole: the `simple` dictionary (no stemming, no
-- stop words) for every token type of the default parser. A question term is searched as a
-- phrase of the same parser's tokens, so `INV-2031` matches only the whole code.
create text search configuration emem.exact (copy = pg_catalog.simple);
comment on text search configuration emem.exact is
  'emem full text: every token kept as typed (lower-cased), codes such as INV-2031 searched whole';

create table emem.lanes (
    lane_name text primary key
        constraint lane_name_format check (lane_name ~ '^[a-z0-9][a-z0-9_.:-]{0,62}$'),
    created_at timestamptz not null default pg_catalog.now()
);
comment on table emem.lanes is 'Every record lives in exactly one lane; agent profiles name the lanes they read.';

create table emem.agent_profiles (
    profile_name text primary key
        constraint profile_name_format check (profile_name ~ '^[a-z0-9][a-z0-9_.:-]{0,62}$'),
    created_at timestamptz not null default pg_catalog.now()
);
comment on table emem.agent_profiles is 'An agent profile names the lanes it may read (emem.profile_lanes).';

create table emem.profile_lanes (
    profile_name text not null references emem.agent_profiles on delete cascade,
    lane_name text not null references emem.lanes on delete cascade,
    primary key (profile_name, lane_name)
);

create table emem.role_profiles (
    role_name name primary key,
    profile_name text not null references emem.agent_profiles on delete cascade,
    bound_at timestamptz not null default pg_catalog.now()
);
comment on table emem.role_profiles is
  'Each database role is bound to at most one agent profile; a role bound to none reads nothing.';

create table emem.embedding_spaces (
    space_id serial primary key,
    model_name text not null constraint model_name_not_empty check (pg_catalog.btrim(model_name) <> ''),
    dimension integer not null constraint dimension_range check (dimension between 1 and 2000),
    fingerprint text,
    is_active boolean not null default false,
    created_at timestamptz not null default pg_catalog.now(),
    unique (model_name, dimension)
);
create unique index embedding_spaces_one_active on emem.embedding_spaces (is_active) where is_active;
comment on table emem.embedding_spaces is
  'A model name and a dimension; exactly one space is active. Each has its own HNSW indexes.';

create table emem.records (
    record_id bigserial primary key,
    kind text not null
        constraint record_kind check (kind in ('note', 'conversation', 'file', 'entity')),
    content text not null constraint content_not_empty check (pg_catalog.btrim(content) <> '')
        constraint content_size check (pg_catalog.length(content) <= 200000),
    lane_name text not null references emem.lanes,
    authority real not null default 0.5 constraint authority_range check (authority between 0 and 1),
    occurred_at timestamptz not null default pg_catalog.now(),
    created_at timestamptz not null default pg_catalog.now(),
    thread_id text,
    thread_position integer constraint thread_position_range check (thread_position >= 0),
    source_key text,
    metadata jsonb not null default '{}'
        constraint metadata_is_object check (pg_catalog.jsonb_typeof(metadata) = 'object'),
    content_search tsvector generated always as (pg_catalog.to_tsvector('emem.exact'::pg_catalog.regconfig, content)) stored,
    constraint thread_for_conversation_and_file check (
        (kind in ('conversation', 'file')) = (thread_id is not null and thread_position is not null)),
    -- Keys are per lane: a key used in one lane neither blocks nor reveals another lane's.
    constraint one_record_per_thread_position unique (lane_name, kind, thread_id, thread_position)
);
create index records_content_search on emem.records using gin (content_search);
create index records_by_lane on emem.records (lane_name);
create index records_by_time on emem.records (occurred_at, record_id);
create unique index records_by_source_key on emem.records (lane_name, source_key) where source_key is not null;
comment on table emem.records is
  'Records: notes, conversation turns, file chunks and entities, each in one lane.';
comment on column emem.records.thread_id is 'The conversation or file a conversation or file record belongs to.';
comment on column emem.records.source_key is 'Optional key of the record''s source, unique in its lane: writing the same key again returns the stored record.';

create table emem.record_tags (
    record_id bigint not null references emem.records on delete cascade,
    tag text not null constraint tag_not_empty check (pg_catalog.btrim(tag) <> ''),
    primary key (record_id, tag)
);
create index record_tags_by_tag on emem.record_tags (tag, record_id);
comment on table emem.record_tags is 'Labels on records, stored lower-case (emem.normal_tag).';

-- Every distinct tag once, with its normalised words and how many records carry it (in every
-- lane), kept by the record_tags triggers: questions are matched against this small table, and
-- exact totals for broad tags come from the counts instead of touching every tagged row.
create table emem.tag_vocabulary (
    tag text primary key,
    tag_terms text[] not null,
    record_count bigint not null constraint record_count_not_negative check (record_count >= 0)
);
create index tag_vocabulary_by_terms on emem.tag_vocabulary using gin (tag_terms);
comment on table emem.tag_vocabulary is
  'Each tag''s normalised words and record count (all lanes); derived from emem.record_tags.';

create table emem.edges (
    edge_id bigserial primary key,
    from_record_id bigint not null references emem.records on delete cascade,
    to_record_id bigint not null references emem.records on delete cascade,
    relation text not null constraint relation_not_empty check (pg_catalog.btrim(relation) <> ''),
    properties jsonb not null default '{}'
        constraint properties_is_object check (pg_catalog.jsonb_typeof(properties) = 'object'),
    created_at timestamptz not null default pg_catalog.now()
);
create index edges_by_from on emem.edges (from_record_id);
create index edges_by_to on emem.edges (to_record_id);
create index edges_by_properties on emem.edges using gin (properties jsonb_path_ops);
comment on table emem.edges is 'Directed links between records, with a relation name and properties.';

-- What a question's words are matched against for an edge: its relation name and each scalar
-- property value, kept by the trigger below.
create table emem.edge_labels (
    edge_id bigint not null references emem.edges on delete cascade,
    label text not null,
    label_terms text[] not null generated always as (emem.label_terms(label)) stored,
    primary key (edge_id, label)
);
create index edge_labels_by_terms on emem.edge_labels using gin (label_terms);

create table emem.record_vectors (
    space_id integer not null references emem.embedding_spaces on delete cascade,
    record_id bigint not null references emem.records on delete cascade,
    embedding public.vector not null,
    primary key (space_id, record_id)
);
create index record_vectors_by_record on emem.record_vectors (record_id);
comment on table emem.record_vectors is 'A record''s vector in an embedding space (HNSW index per space).';

create table emem.windows (
    window_id bigserial primary key,
    space_id integer not null references emem.embedding_spaces on delete cascade,
    lane_name text not null references emem.lanes,
    thread_kind text not null,
    thread_id text not null,
    first_position integer not null,
    last_position integer not null,
    embedding public.vector not null,
    created_at timestamptz not null default pg_catalog.now(),
    constraint one_window_per_run unique (space_id, lane_name, thread_kind, thread_id, first_position, last_position)
);
comment on table emem.windows is
  'A vector over a run of consecutive records of one conversation or file (its members).';

create table emem.window_members (
    window_id bigint not null references emem.windows on delete cascade,
    record_id bigint not null references emem.records on delete cascade,
    primary key (window_id, record_id)
);
create index window_members_by_record on emem.window_members (record_id);

-- One call per statement: each call updates the extension's catalog row. edge_labels is
-- left out: it is derived, and the edges trigger rebuilds it when the edges are restored.
select pg_catalog.pg_extension_config_dump('emem.lanes', '');
select pg_catalog.pg_extension_config_dump('emem.agent_profiles', '');
select pg_catalog.pg_extension_config_dump('emem.profile_lanes', '');
select pg_catalog.pg_extension_config_dump('emem.role_profiles', '');
select pg_catalog.pg_extension_config_dump('emem.embedding_spaces', '');
select pg_catalog.pg_extension_config_dump('emem.embedding_spaces_space_id_seq', '');
select pg_catalog.pg_extension_config_dump('emem.records', '');
select pg_catalog.pg_extension_config_dump('emem.records_record_id_seq', '');
select pg_catalog.pg_extension_config_dump('emem.record_tags', '');
select pg_catalog.pg_extension_config_dump('emem.edges', '');
select pg_catalog.pg_extension_config_dump('emem.edges_edge_id_seq', '');
select pg_catalog.pg_extension_config_dump('emem.record_vectors', '');
select pg_catalog.pg_extension_config_dump('emem.windows', '');
select pg_catalog.pg_extension_config_dump('emem.windows_window_id_seq', '');
select pg_catalog.pg_extension_config_dump('emem.window_members', '');
-- Triggers that keep derived rows and per-space indexes in step with what users write.

-- An edge is matched through its relation name (words split at underscores) and every scalar
-- value of its properties, however deeply nested.
create function emem.refresh_edge_labels() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    delete from emem.edge_labels where edge_id = new.edge_id;
    insert into emem.edge_labels (edge_id, label)
    select new.edge_id, label
    from (
        select pg_catalog.replace(new.relation, '_', ' ') as label
        union
        select value #>> '{}'
        from pg_catalog.jsonb_path_query(new.properties, 'strict $.**') as value
        where pg_catalog.jsonb_typeof(value) in ('string', 'number')
    ) as labels
    where pg_catalog.btrim(label) <> '';
    return null;
end
$$;
create trigger edges_refresh_labels
    after insert or update of relation, properties on emem.edges
    for each row execute function emem.refresh_edge_labels();

-- pgvector indexes need a fixed dimension: each space gets partial expression indexes for
-- its record and window vectors. Also fires when pg_restore reloads the spaces.
create function emem.create_space_indexes() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    execute pg_catalog.format(
        'create index if not exists record_vectors_space_%1$s on emem.record_vectors '
        'using hnsw ((embedding::public.vector(%2$s)) public.vector_cosine_ops) where space_id = %1$s',
        new.space_id, new.dimension);
    execute pg_catalog.format(
        'create index if not exists windows_space_%1$s on emem.windows '
        'using hnsw ((embedding::public.vector(%2$s)) public.vector_cosine_ops) where space_id = %1$s',
        new.space_id, new.dimension);
    return null;
end
$$;
create trigger embedding_spaces_create_indexes
    after insert on emem.embedding_spaces
    for each row execute function emem.create_space_indexes();

-- The tag vocabulary follows record_tags statement by statement (a bulk load touches each of
-- its tags once). Rows are taken in tag order so concurrent writers lock them in one order.
-- Definer: agents write tags but must not read the vocabulary, which spans every lane.
create function emem.count_tags() returns trigger
language plpgsql
security definer  -- the vocabulary is not readable or writable by agents
set search_path = pg_catalog, pg_temp
as $$
begin
    if tg_op in ('DELETE', 'UPDATE') then
        update emem.tag_vocabulary as v set record_count = v.record_count - removed.records
        from (select r.tag, pg_catalog.count(*) as records from removed_tags as r group by r.tag order by r.tag) as removed
        where v.tag = removed.tag;
    end if;
    if tg_op in ('INSERT', 'UPDATE') then
        -- Only a tag seen for the first time needs its words worked out.
        insert into emem.tag_vocabulary as v (tag, tag_terms, record_count)
        select added.tag, case when known.tag is null then emem.label_terms(added.tag) else known.tag_terms end,
               added.records
        from (select a.tag, pg_catalog.count(*) as records from added_tags as a group by a.tag) as added
        left join emem.tag_vocabulary as known on known.tag = added.tag
        order by added.tag
        on conflict (tag) do update set record_count = v.record_count + excluded.record_count;
    end if;
    return null;
end
$$;
create trigger record_tags_count_added after insert on emem.record_tags
    referencing new table as added_tags for each statement execute function emem.count_tags();
create trigger record_tags_count_removed after delete on emem.record_tags
    referencing old table as removed_tags for each statement execute function emem.count_tags();
create trigger record_tags_count_changed after update on emem.record_tags
    referencing old table as removed_tags new table as added_tags
    for each statement execute function emem.count_tags();

create function emem.forget_tag_counts() returns trigger
language plpgsql
security definer  -- as emem.count_tags
set search_path = pg_catalog, pg_temp
as $$
begin
    update emem.tag_vocabulary set record_count = 0;
    return null;
end
$$;
create trigger record_tags_truncated after truncate on emem.record_tags
    for each statement execute function emem.forget_tag_counts();
-- Lanes, agent profiles, role bindings, and the row-level security that keeps every role
-- inside the lanes of its profile. The tables' owner (the extension's owner) and roles with
-- BYPASSRLS read everything; a role bound to no profile reads nothing.

create function emem.readable_lanes() returns setof text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select pl.lane_name
    from emem.role_profiles as rp
    join emem.profile_lanes as pl on pl.profile_name = rp.profile_name
    where rp.role_name = current_user
$$;
comment on function emem.readable_lanes() is
  'The lanes the current role may read and write: those of the agent profile it is bound to.';

-- Lane and profile names: the same rule as the tables' check constraints, with a clear error.
create function emem.check_name(what text, name text) returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    if name is null or name !~ '^[a-z0-9][a-z0-9_.:-]{0,62}$' then
        raise exception 'invalid % name %', what, coalesce(pg_catalog.quote_literal(name), 'NULL')
            using errcode = '22023',
                  hint = pg_catalog.format('A %s name is 1 to 63 characters: lower-case letters, digits and _ . : -,'
                                           ' starting with a letter or digit.', what);
    end if;
end
$$;
comment on function emem.check_name(text, text) is 'Refuses a lane or profile name the tables would not accept.';

create function emem.create_lane(lane_name text) returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform emem.check_name('lane', lane_name);
    insert into emem.lanes (lane_name) values (create_lane.lane_name) on conflict do nothing;
    return lane_name;
end
$$;
comment on function emem.create_lane(text) is 'Creates a lane (no-op when it exists); returns its name.';

create function emem.create_agent_profile(profile_name text, lanes text[]) returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    unknown text[];
begin
    perform emem.check_name('agent profile', profile_name);
    if lanes is null or pg_catalog.array_position(lanes, null) is not null then
        raise exception 'the lanes of agent profile % must be an array of lane names without NULLs', profile_name
            using errcode = '22023';
    end if;
    select pg_catalog.array_agg(l order by l) into unknown
    from pg_catalog.unnest(lanes) as l
    where not exists (select from emem.lanes as known where known.lane_name = l);
    if unknown is not null then
        raise exception 'unknown lane(s) % for agent profile %', unknown, profile_name
            using errcode = '22023', hint = 'Create them first with emem.create_lane(name).';
    end if;
    insert into emem.agent_profiles (profile_name) values (create_agent_profile.profile_name)
        on conflict do nothing;
    delete from emem.profile_lanes as pl where pl.profile_name = create_agent_profile.profile_name;
    insert into emem.profile_lanes (profile_name, lane_name)
        select distinct create_agent_profile.profile_name, l from pg_catalog.unnest(lanes) as l;
    return profile_name;
end
$$;
comment on function emem.create_agent_profile(text, text[]) is
  'Creates an agent profile, or replaces its lanes when it exists; returns its name.';

create function emem.bind_role(role_name name, profile_name text) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if role_name is null or not exists (select from pg_catalog.pg_roles as r where r.rolname = bind_role.role_name) then
        raise exception 'unknown database role %', coalesce(pg_catalog.quote_ident(role_name), 'NULL')
            using errcode = '22023';
    end if;
    if profile_name is null or not exists (
        select from emem.agent_profiles as p where p.profile_name = bind_role.profile_name) then
        raise exception 'unknown agent profile %', coalesce(pg_catalog.quote_literal(profile_name), 'NULL')
            using errcode = '22023', hint = 'Create it first with emem.create_agent_profile(name, lanes).';
    end if;
    insert into emem.role_profiles as rp (role_name, profile_name)
        values (bind_role.role_name, bind_role.profile_name)
        on conflict on constraint role_profiles_pkey
        do update set profile_name = excluded.profile_name, bound_at = pg_catalog.now();
end
$$;
comment on function emem.bind_role(name, text) is
  'Binds a database role to an agent profile (replacing an earlier binding): the role then reads the profile''s lanes.';

-- Row-level security: a record is visible when its lane is readable; rows that belong to
-- records (tags, vectors, window members) follow their record, an edge both its endpoints.
alter table emem.lanes enable row level security;
alter table emem.agent_profiles enable row level security;
alter table emem.profile_lanes enable row level security;
alter table emem.role_profiles enable row level security;
alter table emem.records enable row level security;
alter table emem.record_tags enable row level security;
alter table emem.edges enable row level security;
alter table emem.edge_labels enable row level security;
alter table emem.record_vectors enable row level security;
alter table emem.windows enable row level security;
alter table emem.window_members enable row level security;

create policy own_binding on emem.role_profiles for select using (role_name = current_user);
create policy own_profile on emem.agent_profiles for select
    using (profile_name in (select rp.profile_name from emem.role_profiles as rp));
create policy own_profile_lanes on emem.profile_lanes for select
    using (profile_name in (select rp.profile_name from emem.role_profiles as rp));
create policy readable_lane on emem.lanes for select
    using (lane_name in (select emem.readable_lanes()));
create policy readable_lane on emem.records
    using (lane_name in (select emem.readable_lanes()))
    with check (lane_name in (select emem.readable_lanes()));
create policy readable_record on emem.record_tags
    using (exists (select from emem.records as r where r.record_id = record_tags.record_id));
create policy readable_record on emem.record_vectors
    using (exists (select from emem.records as r where r.record_id = record_vectors.record_id));
create policy readable_endpoints on emem.edges
    using (exists (select from emem.records as r where r.record_id = edges.from_record_id)
       and exists (select from emem.records as r where r.record_id = edges.to_record_id));
create policy readable_edge on emem.edge_labels
    using (exists (select from emem.edges as e where e.edge_id = edge_labels.edge_id));
create policy readable_lane on emem.windows
    using (lane_name in (select emem.readable_lanes()))
    with check (lane_name in (select emem.readable_lanes()));
create policy readable_window on emem.window_members
    using (exists (select from emem.windows as w where w.window_id = window_members.window_id)
       and exists (select from emem.records as r where r.record_id = window_members.record_id));
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
            when item ? 'vector' and (pg_catalog.jsonb_typeof(item->'vector') <> 'array'
                 or pg_catalog.jsonb_array_length(item->'vector') <> dimension)
                then pg_catalog.format('vector must be an array of %s numbers (embedding space %s, %s)',
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

    -- Vectors are parsed once (a non-number fails the cast) and stored at unit length: cosine is
    -- all emem measures, and unit vectors cannot overflow its arithmetic.
    if dimension is not null then
        vectors := array(
            select x.vector::public.vector
            from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n),
                 pg_catalog.jsonb_to_record(i.item) as x(vector real[])
            order by i.n);
        select v.n into problem
        from pg_catalog.unnest(vectors) with ordinality as v(vector, n)
        where v.vector is not null and public.vector_norm(v.vector) operator(pg_catalog.=) 0
        limit 1;
        if found then
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
  'The bulk path: writes a JSON array of records ({kind, content, lane, tags, authority, occurred_at, thread_id, thread_position, metadata, source_key, vector}), all or nothing; returns each item''s record id. An item whose source_key its lane holds already is not written again (created = false). Vectors are stored at unit length.';

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
-- e_gather_find: four lookups (tags and edge properties, full text, record vectors, window
-- vectors) interleaved 40:35:20:5 into one ranked list; pages are cut from it before the
-- records of lanes the caller cannot read are removed.
--
-- The lookups must see every lane (the page rule counts all of them), so the pipeline runs in
-- SECURITY DEFINER functions. They act for the role passed by the public wrappers, which pass
-- current_user, and accept only a role this session could SET ROLE to anyway: the profile
-- comes from the role, never from a claim.

create function emem.gather_for_role(
    caller name, question text, question_vector public.vector, page integer, page_size integer
) returns jsonb
language plpython3u volatile
security definer  -- reads every lane: the page is cut before the lane filter
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
from emem_db.gather import Gather, envelope_json
state = backend(GD, plpy, "0.1.0")
return envelope_json(Gather(state).find(caller, question, question_vector, page, page_size))
$$;
comment on function emem.gather_for_role(name, text, public.vector, integer, integer) is
  'The pipeline behind e_gather_find, for a role the session can act as. Call e_gather_find or e_gather_find_envelope instead.';

create function emem.explain_for_role(
    caller name, question text, question_vector public.vector, page integer, page_size integer
) returns jsonb
language plpython3u volatile
security definer  -- reads every lane, as e_gather_find does; rows keep to the caller's lanes
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
from emem_db.gather import Gather, envelope_json
state = backend(GD, plpy, "0.1.0")
return envelope_json(Gather(state).explain(caller, question, question_vector, page, page_size))
$$;
comment on function emem.explain_for_role(name, text, public.vector, integer, integer) is
  'The analysis behind e_gather_explain, for a role the session can act as. Call e_gather_explain instead.';

-- PL/Python reports its errors as "plpy.Error: <message>" with a Python traceback; the public
-- functions re-raise them as a DBA expects: the message, its SQLSTATE, detail and hint.
create function emem.raise_plainly(state text, message text, detail text, hint text) returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    message := pg_catalog.regexp_replace(message, '^(plpy\.Error|plpy\.spiexceptions\.\w+|spiexceptions\.\w+): ', '');
    if detail <> '' and hint <> '' then
        raise exception using errcode = state, message = message, detail = detail, hint = hint;
    elsif hint <> '' then
        raise exception using errcode = state, message = message, hint = hint;
    elsif detail <> '' then
        raise exception using errcode = state, message = message, detail = detail;
    end if;
    raise exception using errcode = state, message = message;
end
$$;
comment on function emem.raise_plainly(text, text, text, text) is
  'Raises an error with the given SQLSTATE, message (without PL/Python''s exception prefix), detail and hint.';

-- The one door of the public functions into the pipeline: acts for current_user and re-raises
-- the pipeline's errors plainly.
create function emem.gather(
    question text, question_vector public.vector, page integer, page_size integer, explain boolean
) returns jsonb
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    state text; message text; detail text; hint text;
begin
    if explain then
        return emem.explain_for_role(current_user, question, question_vector, page, page_size);
    end if;
    return emem.gather_for_role(current_user, question, question_vector, page, page_size);
exception when others then
    get stacked diagnostics state = returned_sqlstate, message = message_text, detail = pg_exception_detail,
                            hint = pg_exception_hint;
    perform emem.raise_plainly(state, message, detail, hint);
end
$$;
comment on function emem.gather(text, public.vector, integer, integer, boolean) is
  'e_gather_find_envelope (explain => false) or e_gather_explain (explain => true) for the current role.';

create function emem.e_gather_find_envelope(
    question text, question_vector public.vector default null, page integer default 1, page_size integer default 30
) returns jsonb
language sql volatile
set search_path = pg_catalog, pg_temp
as $$ select emem.gather(question, question_vector, page, page_size, false) $$;
comment on function emem.e_gather_find_envelope(text, public.vector, integer, integer) is
  'e_gather_find as one JSON object: page, page_size, total_pages, total_candidates, degraded, degraded_reason, pipeline_profile and rows; the totals arrive even when every row of the page lies outside the caller''s lanes.';

create function emem.e_gather_find(
    question text, question_vector public.vector default null, page integer default 1, page_size integer default 30
) returns table (
    rank integer, record_id bigint, kind text, lane text, content text, tags text[],
    distance double precision, distance_kind text, placed_by text, found_by text[], windows bigint[]
)
language sql volatile
set search_path = pg_catalog, pg_temp
as $$
    select r.rank, r.record_id, r.kind, r.lane, r.content, r.tags, r.distance, r.distance_kind,
           r.placed_by, r.found_by, r.windows
    from pg_catalog.jsonb_to_recordset(
        emem.e_gather_find_envelope(question, question_vector, page, page_size) -> 'rows') as r (
        rank integer, record_id bigint, kind text, lane text, content text, tags text[],
        distance double precision, distance_kind text, placed_by text, found_by text[], windows bigint[])
$$;
comment on function emem.e_gather_find(text, public.vector, integer, integer) is
  'Answers a question with four lookups at once (tags and edge properties, full text, record vectors, window vectors) interleaved 40:35:20:5 into one ranked list; returns one page (page from 1, page_size 1 to 1000, default 30). question_vector NULL means embeddings are unavailable: the exact lookups answer alone, with placeholder distances.';

create function emem.e_gather_explain(
    question text, question_vector public.vector default null, page integer default 1, page_size integer default 30
) returns jsonb
language sql volatile
set search_path = pg_catalog, pg_temp
as $$ select emem.gather(question, question_vector, page, page_size, true) $$;
comment on function emem.e_gather_explain(text, public.vector, integer, integer) is
  'For DBAs: how e_gather_find reads the question (terms, words WordNet knows, full-text terms), the pipeline profile, each lookup''s candidate count and time, and for each row of the page its rank in every lookup''s list.';
-- Reads with the caller's rights: row-level security keeps them inside the caller's lanes.

create view emem.record_summaries with (security_invoker = true) as
    select r.record_id, r.kind, r.lane_name as lane, r.content,
           array(select t.tag from emem.record_tags as t where t.record_id = r.record_id order by t.tag) as tags,
           r.authority, r.occurred_at, r.created_at, r.thread_id, r.thread_position, r.metadata
    from emem.records as r;
comment on view emem.record_summaries is 'Records with their tags, as the caller may read them.';

create function emem.records_with_all_tags(tags text[]) returns setof emem.record_summaries
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    with wanted as (select emem.check_tags(tags) as tags)
    select s.*
    from emem.record_summaries as s
    where s.record_id in (
        select rt.record_id
        from emem.record_tags as rt, wanted
        where rt.tag operator(pg_catalog.=) any (wanted.tags)
        group by rt.record_id
        having pg_catalog.count(*) = (select pg_catalog.cardinality(wanted.tags) from wanted))
    order by s.record_id
$$;
comment on function emem.records_with_all_tags(text[]) is
  'Label intersection: every record (in the caller''s lanes) carrying all of the given tags, nothing else.';

create function emem.e_timeline(
    from_time timestamptz, to_time timestamptz, page integer default 1, page_size integer default 30,
    kinds text[] default null, tags text[] default null
) returns setof emem.record_summaries
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    wanted_tags text[];
begin
    if from_time is null or to_time is null or from_time > to_time then
        raise exception 'the timeline needs from_time <= to_time, got % and %',
            coalesce(from_time::text, 'NULL'), coalesce(to_time::text, 'NULL') using errcode = '22023';
    end if;
    if page is null or page not between 1 and 100000 then
        raise exception 'page % is out of range', coalesce(page::text, 'NULL')
            using errcode = '22023', hint = 'Accepted: 1 to 100000.';
    end if;
    if page_size is null or page_size not between 1 and 1000 then
        raise exception 'page_size % is out of range', coalesce(page_size::text, 'NULL')
            using errcode = '22023', hint = 'Accepted: 1 to 1000.';
    end if;
    if kinds is not null and not kinds <@ array['note', 'conversation', 'file', 'entity'] then
        raise exception 'kinds % holds an unknown kind', kinds
            using errcode = '22023', hint = 'Accepted kinds: note, conversation, file, entity.';
    end if;
    wanted_tags := case when e_timeline.tags is not null then emem.check_tags(e_timeline.tags) end;
    return query
        select s.*
        from emem.record_summaries as s
        where s.occurred_at between from_time and to_time
          and (e_timeline.kinds is null or s.kind = any (e_timeline.kinds))
          and (wanted_tags is null or s.tags @> wanted_tags)
        order by s.occurred_at, s.record_id
        limit page_size offset (page - 1) * page_size;
end
$$;
comment on function emem.e_timeline(timestamptz, timestamptz, integer, integer, text[], text[]) is
  'Records by date (occurred_at, then id) between from_time and to_time inclusive, in the caller''s lanes; optional filters: kinds, tags (all of them).';
-- Health: does the embedding gateway's declared model match the active space and its vectors?
-- Degraded is not an outage: e_gather_find answers from the exact lookups meanwhile.

create function emem.e_health(
    model_name text, dimension integer, fingerprint text default null
) returns jsonb
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces;
    reasons text[] := '{}';
    stored_dimensions integer[];
begin
    select * into space from emem.embedding_spaces as s where s.is_active;
    if not found then
        reasons := pg_catalog.array_append(reasons, 'no_active_space');
    end if;
    if model_name is null or dimension is null then
        reasons := pg_catalog.array_append(reasons, 'declaration_unreadable');
    elsif space.space_id is not null then
        if model_name <> space.model_name then
            reasons := pg_catalog.array_append(reasons, 'model_mismatch');
        end if;
        if dimension <> space.dimension then
            reasons := pg_catalog.array_append(reasons, 'dimension_mismatch');
        end if;
        if fingerprint is not null and space.fingerprint is not null and fingerprint <> space.fingerprint then
            reasons := pg_catalog.array_append(reasons, 'fingerprint_mismatch');
        end if;
    end if;
    if space.space_id is not null then
        -- Writes check dimensions; a sample still catches rows written around the API.
        select pg_catalog.array_agg(distinct public.vector_dims(sample.embedding)) into stored_dimensions
        from (select rv.embedding from emem.record_vectors as rv
              where rv.space_id = space.space_id limit 1000) as sample;
        if stored_dimensions is not null and stored_dimensions <> array[space.dimension] then
            reasons := pg_catalog.array_append(reasons, 'stored_vectors_mismatch');
        end if;
    end if;
    return pg_catalog.jsonb_build_object(
        'status', case when pg_catalog.cardinality(reasons) = 0 then 'ok' else 'degraded' end,
        'reasons', pg_catalog.to_jsonb(reasons),
        'declared', pg_catalog.jsonb_build_object('model_name', model_name, 'dimension', dimension,
                                                  'fingerprint', fingerprint),
        'active_space', case when space.space_id is null then null else pg_catalog.jsonb_build_object(
            'space_id', space.space_id, 'model_name', space.model_name, 'dimension', space.dimension,
            'fingerprint', space.fingerprint) end,
        'stored_vector_dimensions', pg_catalog.to_jsonb(stored_dimensions));
end
$$;
comment on function emem.e_health(text, integer, text) is
  'ok or degraded, with reasons (declaration_unreadable, no_active_space, model_mismatch, dimension_mismatch, fingerprint_mismatch, stored_vectors_mismatch), for the model the embedding gateway declares (NULLs: it could not be read).';
-- Who may do what. Agents (any role) read and write through row-level security; setting up
-- lanes, profiles, bindings and embedding spaces is for the extension's owner.

grant usage on schema emem to public;
grant select on all tables in schema emem to public;
grant insert, update, delete on emem.records, emem.record_tags, emem.edges, emem.edge_labels,
    emem.record_vectors, emem.windows, emem.window_members to public;
grant usage on all sequences in schema emem to public;
revoke all on emem.lanes, emem.agent_profiles, emem.profile_lanes, emem.role_profiles,
    emem.embedding_spaces from public;
grant select on emem.lanes, emem.agent_profiles, emem.profile_lanes, emem.role_profiles,
    emem.embedding_spaces to public;
revoke execute on function emem.create_lane(text), emem.create_agent_profile(text, text[]),
    emem.bind_role(name, text), emem.create_embedding_space(text, integer, text, boolean),
    emem.activate_embedding_space(integer) from public;
revoke all on emem.tag_vocabulary from public;
