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
