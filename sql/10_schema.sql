-- The emem property graph: lanes, agent profiles, embedding spaces, records, tags, edges with
-- properties, vectors and windows.
--
-- No triggers and no foreign keys: the write API (40_writes.sql, 45_embeddings.sql) writes every
-- row, derived ones included (tag vocabulary, edge labels, the embedding queue), set-based in the
-- statement that writes what they derive from. So the schema is the same on one node and on a
-- Citus cluster (which refuses triggers on distributed tables), and pg_restore -j loads every
-- table in parallel, in any order. Every table is dumped (pg_extension_config_dump, end of file),
-- derived ones too; each space's HNSW indexes are not (made outside the extension's script), and
-- emem.rebuild_derived() makes them after a restore.
--
-- Everything that belongs to a record carries its lane (`lane_name`): on a cluster it is the
-- distribution column (emem.distribute()), and every unique key holds it. A lane's rows are
-- read first by lane wherever a caller keeps to some lanes (strict isolation), so that no
-- other lane's volume shows in its time.

-- Full text keeps codes, names and figures whole: the `simple` dictionary (no stemming, no
-- stop words) for every token type of the default parser. A question term is searched as a
-- phrase of the same parser's tokens, so `INV-2031` matches only the whole code.
create text search configuration emem.exact (copy = pg_catalog.simple);
comment on text search configuration emem.exact is
  'emem full text: every token kept as typed (lower-cased), codes such as INV-2031 searched whole';

-- ---- reference tables: small, the same on every node of a cluster ---------------------------------

create table emem.lanes (
    lane_name emem.object_name primary key,
    created_at timestamptz not null default pg_catalog.now()
);
comment on table emem.lanes is 'Every record lives in exactly one lane; agent profiles name the lanes they read and write.';

create table emem.agent_profiles (
    profile_name emem.object_name primary key,
    created_at timestamptz not null default pg_catalog.now(),
    -- What the owner sets for the profile's finds (emem.set_agent_setting): its agents cannot.
    settings jsonb not null default '{}' constraint settings_is_object check (pg_catalog.jsonb_typeof(settings) = 'object')
);
comment on table emem.agent_profiles is 'An agent profile names the lanes it may read and write (emem.profile_lanes).';

create table emem.profile_lanes (
    profile_name text not null,
    lane_name text not null,
    can_read boolean not null default true,
    can_write boolean not null default true,
    primary key (profile_name, lane_name),
    constraint reads_or_writes check (can_read or can_write)
);
comment on table emem.profile_lanes is 'The lanes of an agent profile: which it reads, which it writes.';

-- A binding names its role and remembers which role that was (its OID, in the cluster whose
-- system identifier is kept): it holds for the role of that name only while the OID still names
-- it, or once the binding was restored into another cluster (where OIDs are new). A role dropped
-- and created again under the same name is another role; a restored role is the same one.
create table emem.role_profiles (
    role_name name primary key,
    role_id oid not null,
    bound_in_cluster text not null,
    profile_name text not null,
    bound_at timestamptz not null default pg_catalog.now()
);
comment on table emem.role_profiles is
  'Each database role is bound to at most one agent profile, by name and identity: a role dropped and created again under the same name is not bound; a binding restored into another cluster holds for the role of its name. A role bound to none reads nothing.';

create table emem.embedding_spaces (
    space_id serial primary key,
    model_name text not null constraint model_name_not_empty check (pg_catalog.btrim(model_name) <> '')
        constraint model_name_size check (pg_catalog.length(model_name) <= 200),
    dimension integer not null constraint dimension_range check (dimension between 1 and 2000),
    fingerprint text constraint fingerprint_size check (pg_catalog.length(fingerprint) <= 200),
    is_active boolean not null default false,
    created_at timestamptz not null default pg_catalog.now(),
    unique (model_name, dimension)
);
create unique index embedding_spaces_one_active on emem.embedding_spaces (is_active) where is_active;
comment on table emem.embedding_spaces is
  'A model name and a dimension; exactly one space is active. Each has its own HNSW indexes.';

-- ---- records and what belongs to them: distributed by lane on a cluster -----------------------------

create table emem.records (
    record_id bigserial not null,
    kind emem.record_kind not null,
    content text not null constraint content_not_empty check (pg_catalog.btrim(content) <> '')
        constraint content_size check (pg_catalog.length(content) <= 200000),
    lane_name text not null,
    authority real not null default 0.5 constraint authority_range check (authority between 0 and 1),
    occurred_at timestamptz not null default pg_catalog.now(),
    created_at timestamptz not null default pg_catalog.now(),
    thread_id text constraint thread_id_size check (pg_catalog.length(thread_id) <= 500),
    thread_position integer constraint thread_position_range check (thread_position >= 0),
    source_key text constraint source_key_size check (pg_catalog.length(source_key) <= 500),
    metadata jsonb not null default '{}'
        constraint metadata_is_object check (pg_catalog.jsonb_typeof(metadata) = 'object'),
    -- Searched in Unicode's composed form (NFC), as questions are: NFC and NFD spellings match.
    content_search tsvector generated always as (
        pg_catalog.to_tsvector('emem.exact'::pg_catalog.regconfig, emem._nfc(content))) stored,
    -- Led by the id: a record is found by its id alone (ids are unique: one sequence), in id order.
    constraint records_pkey primary key (record_id, lane_name),
    constraint thread_for_conversation_and_file check (
        emem._has_thread(kind) = (thread_id is not null and thread_position is not null)),
    -- Keys are per lane: a key used in one lane neither blocks nor reveals another lane's.
    constraint one_record_per_thread_position unique (lane_name, kind, thread_id, thread_position)
);
-- Lane first: a caller kept to some lanes reads only their entries (btree_gin).
create index records_content_search on emem.records using gin (lane_name, content_search);
create index records_by_lane on emem.records (lane_name, record_id);
create index records_by_lane_and_time on emem.records (lane_name, occurred_at, record_id);
create unique index records_by_source_key on emem.records (lane_name, source_key) where source_key is not null;
comment on table emem.records is
  'Records: notes, conversation turns, file chunks and entities, each in one lane.';
comment on column emem.records.thread_id is 'The conversation or file a conversation or file record belongs to.';
comment on column emem.records.source_key is 'Optional key of the record''s source, unique in its lane: writing the same key again returns the stored record.';

create table emem.record_tags (
    record_id bigint not null,
    tag text not null constraint tag_not_empty check (pg_catalog.btrim(tag) <> '')
        constraint tag_size check (pg_catalog.length(tag) <= 200),
    lane_name text not null,
    primary key (record_id, tag, lane_name)
);
create index record_tags_by_tag on emem.record_tags (tag, record_id);
create index record_tags_by_lane on emem.record_tags (lane_name, tag, record_id);
comment on table emem.record_tags is 'Labels on records, stored lower-case (emem._normal_tag), with the record''s lane.';

-- Every distinct tag of each lane once, with its normalised words and how many of the lane's
-- records carry it: questions are matched against this small table, and broad tags are sized by
-- their counts. Written with the tags (a writer updates only its own lane's rows).
create table emem.tag_vocabulary (
    lane_name text not null,
    tag text not null,
    tag_terms text[] not null,
    record_count bigint not null constraint record_count_not_negative check (record_count >= 0),
    namespace_terms text[] not null default '{}',
    primary key (lane_name, tag)
);
create index tag_vocabulary_by_terms on emem.tag_vocabulary using gin (tag_terms);
create index tag_vocabulary_by_tag on emem.tag_vocabulary (tag);
comment on table emem.tag_vocabulary is
  'Each lane''s tags with their normalised words and record counts; written with emem.record_tags.';

create table emem.edges (
    edge_id bigserial not null,
    from_record_id bigint not null,
    to_record_id bigint not null,
    relation text not null constraint relation_not_empty check (pg_catalog.btrim(relation) <> '')
        constraint relation_size check (pg_catalog.length(relation) <= 200),
    properties jsonb not null default '{}'
        constraint properties_is_object check (pg_catalog.jsonb_typeof(properties) = 'object'),
    created_at timestamptz not null default pg_catalog.now(),
    -- The ends' lanes: who may read an edge. An edge lives in its from end's lane.
    from_lane_name text not null,
    to_lane_name text not null,
    constraint edges_pkey primary key (edge_id, from_lane_name)
);
create index edges_by_from on emem.edges (from_record_id);
create index edges_by_to on emem.edges (to_record_id);
create unique index edges_one_per_link
    on emem.edges (from_lane_name, from_record_id, to_record_id, relation, pg_catalog.md5(properties::text));
comment on table emem.edges is 'Directed links between records, with a relation name and properties.';

-- What a question's words are matched against for an edge: its relation name (underscores as
-- spaces) and each scalar property value, its labels. One row per end of the edge and label, in
-- the end's lane, with the far end and its lane: the ends of a label come in record-id order from
-- one index, an end's score needs nothing from another lane, and an edge counts for a caller
-- only when it reads both lanes (an edge carries the secrecy of both its ends).
create table emem.edge_labels (
    record_id bigint not null,
    lane_name text not null,
    label text not null,
    edge_id bigint not null,
    far_record_id bigint not null,
    far_lane_name text not null,
    label_terms text[] not null,
    namespace_terms text[] not null,
    primary key (label, record_id, edge_id, lane_name)
);
create index edge_labels_by_lane on emem.edge_labels (lane_name, label, record_id);
create index edge_labels_by_record on emem.edge_labels (record_id);
create index edge_labels_by_edge on emem.edge_labels (edge_id);
comment on table emem.edge_labels is
  'Each end of each edge with each of the edge''s labels (relation, property values) and their terms; written with the edge.';

-- Every label once per lane of the edges' from ends, with its terms: the labels a question
-- matches are found here, not among the rows of every edge. A label seen stays (its edges say
-- whether it still matches anything); a writer adds only its own lane's rows.
create table emem.edge_label_vocabulary (
    lane_name text not null,
    label text not null,
    label_terms text[] not null,
    namespace_terms text[] not null,
    primary key (lane_name, label)
);
create index edge_label_vocabulary_by_terms on emem.edge_label_vocabulary using gin (label_terms);
create index edge_label_vocabulary_by_label on emem.edge_label_vocabulary (label);

create table emem.record_vectors (
    space_id integer not null,
    record_id bigint not null,
    embedding public.vector not null,
    lane_name text not null,
    primary key (space_id, record_id, lane_name)
);
create index record_vectors_by_record on emem.record_vectors (record_id);
comment on table emem.record_vectors is 'A record''s vector in an embedding space (HNSW index per space).';

create table emem.windows (
    window_id bigserial not null,
    space_id integer not null,
    lane_name text not null,
    thread_kind emem.record_kind not null constraint thread_kind_has_thread check (emem._has_thread(thread_kind)),
    thread_id text not null,
    first_position integer not null,
    last_position integer not null,
    -- NULL: not embedded yet, or stale (a member's content changed); the embedding queue fills it.
    embedding public.vector,
    created_at timestamptz not null default pg_catalog.now(),
    constraint windows_pkey primary key (window_id, lane_name),
    constraint one_window_per_run unique (space_id, lane_name, thread_kind, thread_id, first_position, last_position)
);
create index windows_without_vector on emem.windows (space_id) where embedding is null;
comment on table emem.windows is
  'A vector over a run of consecutive records of one conversation or file (its members); without one (NULL) until the embedding queue fills it.';

create table emem.window_members (
    window_id bigint not null,
    record_id bigint not null,
    lane_name text not null,
    primary key (window_id, record_id, lane_name)
);
create index window_members_by_record on emem.window_members (record_id);

-- The work of the embedding workers (`emem embed`): each record without a vector, and each window
-- run without a current vector, in each embedding space; written by the writes that make it.
create table emem.embedding_queue (
    queue_id bigserial not null,
    space_id integer not null,
    lane_name text not null,
    -- A record's own vector (record_id), or a window: its run of thread positions in its lane.
    record_id bigint,
    thread_kind emem.record_kind,
    thread_id text,
    first_position integer,
    last_position integer,
    queued_at timestamptz not null default pg_catalog.now(),
    attempts integer not null default 0,
    not_before timestamptz,
    last_error text,
    constraint embedding_queue_pkey primary key (queue_id, lane_name),
    constraint record_or_window check (
        (record_id is not null and thread_kind is null and thread_id is null and first_position is null
         and last_position is null)
        or (record_id is null and thread_kind is not null and thread_id is not null and first_position is not null
            and last_position >= first_position))
);
create unique index embedding_queue_one_per_record on emem.embedding_queue (space_id, record_id, lane_name)
    where record_id is not null;
create unique index embedding_queue_one_per_run on emem.embedding_queue
    (lane_name, thread_kind, thread_id, first_position, last_position, space_id) where record_id is null;
create index embedding_queue_in_order on emem.embedding_queue (space_id, queue_id);
create index embedding_queue_by_lane on emem.embedding_queue (space_id, lane_name, queue_id);
create index embedding_queue_by_record on emem.embedding_queue (record_id) where record_id is not null;
comment on table emem.embedding_queue is
  'What the embedding workers (emem embed) have to do: records and window runs without a current vector in a space.';

-- Row-level security keeps direct reads inside the reader's lanes (policies: 30_lanes.sql).
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
alter table emem.embedding_queue enable row level security;

-- One call per statement: each call updates the extension's catalog row.
select pg_catalog.pg_extension_config_dump('emem.lanes', '');
select pg_catalog.pg_extension_config_dump('emem.agent_profiles', '');
select pg_catalog.pg_extension_config_dump('emem.profile_lanes', '');
select pg_catalog.pg_extension_config_dump('emem.role_profiles', '');
select pg_catalog.pg_extension_config_dump('emem.embedding_spaces', '');
select pg_catalog.pg_extension_config_dump('emem.embedding_spaces_space_id_seq', '');
select pg_catalog.pg_extension_config_dump('emem.records', '');
select pg_catalog.pg_extension_config_dump('emem.records_record_id_seq', '');
select pg_catalog.pg_extension_config_dump('emem.record_tags', '');
select pg_catalog.pg_extension_config_dump('emem.tag_vocabulary', '');
select pg_catalog.pg_extension_config_dump('emem.edges', '');
select pg_catalog.pg_extension_config_dump('emem.edges_edge_id_seq', '');
select pg_catalog.pg_extension_config_dump('emem.edge_labels', '');
select pg_catalog.pg_extension_config_dump('emem.edge_label_vocabulary', '');
select pg_catalog.pg_extension_config_dump('emem.record_vectors', '');
select pg_catalog.pg_extension_config_dump('emem.windows', '');
select pg_catalog.pg_extension_config_dump('emem.windows_window_id_seq', '');
select pg_catalog.pg_extension_config_dump('emem.window_members', '');
select pg_catalog.pg_extension_config_dump('emem.embedding_queue', '');
select pg_catalog.pg_extension_config_dump('emem.embedding_queue_queue_id_seq', '');
