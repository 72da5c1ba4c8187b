-- emem 0.2.1 -> 0.3.0, the tables (after the prologue has dropped 0.2.1's code; the code files and
-- emem--0.2.1--0.3.0.after.sql follow, see the Makefile).
--
-- 0.3.0 has no triggers: the write API writes the derived rows itself. Everything that belongs to
-- a record carries its lane, and every key holds it (the distribution column on a Citus cluster).
-- Edge labels become a row per end of an edge and label, and the table of each label's ends goes.
-- Role bindings remember their role's name. Sequences are set past every id (an earlier release
-- let rows be written with ids of their own). The derived tables are dumped.

-- ---- role bindings: by name and identity ---------------------------------------------------------------
alter table emem.role_profiles rename column role_id to old_role_id;
alter table emem.role_profiles drop constraint role_profiles_pkey;
alter table emem.role_profiles
    add column role_name name, add column role_id oid, add column bound_in_cluster text;
-- A binding whose role is gone held for no one: it goes.
delete from emem.role_profiles as rp where not exists (select 1 from pg_catalog.pg_roles as r where r.oid = rp.old_role_id);
update emem.role_profiles as rp
    set role_name = r.rolname, role_id = r.oid,
        bound_in_cluster = (select c.system_identifier::text from pg_catalog.pg_control_system() as c)
    from pg_catalog.pg_roles as r where r.oid = rp.old_role_id;
alter table emem.role_profiles drop column old_role_id;
alter table emem.role_profiles
    alter column role_name set not null, alter column role_id set not null, alter column bound_in_cluster set not null,
    add primary key (role_name);
-- The column order of a fresh install.
alter table emem.role_profiles rename column profile_name to old_profile_name;
alter table emem.role_profiles rename column bound_at to old_bound_at;
alter table emem.role_profiles add column profile_name text, add column bound_at timestamptz default pg_catalog.now();
update emem.role_profiles set profile_name = old_profile_name, bound_at = old_bound_at;
alter table emem.role_profiles drop column old_profile_name, drop column old_bound_at;
alter table emem.role_profiles alter column profile_name set not null, alter column bound_at set not null;

-- ---- records ---------------------------------------------------------------------------------------------
alter table emem.records drop constraint records_pkey, add constraint records_pkey primary key (record_id, lane_name);
-- The search terms are read through emem._nfc (NFC's quick check first): the column is written again.
create function emem._nfc(value text) returns text
language sql immutable parallel safe
as $$
    select case when pg_catalog.is_normalized(value, 'NFC') then value else pg_catalog.normalize(value, 'NFC') end
$$;
comment on function emem._nfc(text) is 'The text in Unicode''s composed form (NFC).';
alter table emem.records drop column content_search;
alter table emem.records add column content_search tsvector generated always as (
    pg_catalog.to_tsvector('emem.exact'::pg_catalog.regconfig, emem._nfc(content))) stored;
create index records_content_search on emem.records using gin (lane_name, content_search);
drop index emem.records_by_lane;
create index records_by_lane on emem.records (lane_name, record_id);
create index records_by_lane_and_time on emem.records (lane_name, occurred_at, record_id);
drop index emem.records_by_time;  -- the timeline reads each lane's records_by_lane_and_time

alter table emem.record_tags drop constraint record_tags_pkey, add primary key (record_id, tag, lane_name);
create index record_tags_by_lane on emem.record_tags (lane_name, tag, record_id);
create index tag_vocabulary_by_tag on emem.tag_vocabulary (tag);

-- ---- edges and their labels --------------------------------------------------------------------------------
drop table emem.edge_label_ends;
drop table emem.edge_labels;
drop function emem._label_namespace_terms(text);  -- its generated column is gone: the code creates it again
drop table emem.edge_label_vocabulary;
drop index emem.edges_by_properties;
drop index emem.edges_one_per_link;
update emem.edges as e set from_lane_name = r.lane_name from emem.records as r
    where r.record_id = e.from_record_id and e.from_lane_name is distinct from r.lane_name;
update emem.edges as e set to_lane_name = r.lane_name from emem.records as r
    where r.record_id = e.to_record_id and e.to_lane_name is distinct from r.lane_name;
delete from emem.edges as e where e.from_lane_name is null or e.to_lane_name is null;  -- an end is gone
alter table emem.edges alter column from_lane_name set not null, alter column to_lane_name set not null;
alter table emem.edges drop constraint edges_pkey, add constraint edges_pkey primary key (edge_id, from_lane_name);
create unique index edges_one_per_link
    on emem.edges (from_lane_name, from_record_id, to_record_id, relation, pg_catalog.md5(properties::text));

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
create table emem.edge_label_vocabulary (
    lane_name text not null,
    label text not null,
    label_terms text[] not null,
    namespace_terms text[] not null,
    primary key (lane_name, label)
);
create index edge_label_vocabulary_by_terms on emem.edge_label_vocabulary using gin (label_terms);
create index edge_label_vocabulary_by_label on emem.edge_label_vocabulary (label);
alter table emem.edge_labels enable row level security;

-- ---- vectors, windows, the queue ---------------------------------------------------------------------------
alter table emem.record_vectors add column lane_name text;
update emem.record_vectors as v set lane_name = r.lane_name from emem.records as r where r.record_id = v.record_id;
delete from emem.record_vectors where lane_name is null;  -- its record is gone
alter table emem.record_vectors alter column lane_name set not null,
    drop constraint record_vectors_pkey, add primary key (space_id, record_id, lane_name);

alter table emem.windows drop constraint windows_pkey, add constraint windows_pkey primary key (window_id, lane_name);
alter table emem.window_members add column lane_name text;
update emem.window_members as m set lane_name = w.lane_name from emem.windows as w where w.window_id = m.window_id;
delete from emem.window_members where lane_name is null;  -- its window is gone
alter table emem.window_members alter column lane_name set not null,
    drop constraint window_members_pkey, add primary key (window_id, record_id, lane_name);

alter table emem.embedding_queue drop constraint embedding_queue_pkey,
    add constraint embedding_queue_pkey primary key (queue_id, lane_name);
drop index emem.embedding_queue_one_per_record;
create unique index embedding_queue_one_per_record on emem.embedding_queue (space_id, record_id, lane_name)
    where record_id is not null;
drop index emem.embedding_queue_by_lane;
create index embedding_queue_by_lane on emem.embedding_queue (space_id, lane_name, queue_id);
create index embedding_queue_by_record on emem.embedding_queue (record_id) where record_id is not null;

create type emem._window_run as (
    lane_name text, thread_kind emem.record_kind, thread_id text, first_position integer, last_position integer);
comment on type emem._window_run is 'A run of consecutive positions of one thread (conversation or file) in a lane.';
-- Kept by the prologue (the records' check needs it): without its SET clause, and not strict, it
-- is inlined there.
alter function emem._has_thread(emem.record_kind) called on null input reset search_path;

create type emem._record_item as (
    item_number integer, problem text, kind text, content text, lane text, tags jsonb, authority text,
    occurred_at text, thread_id text, thread_position text, metadata jsonb, source_key text);
comment on type emem._record_item is 'One item of emem.put_records as read from its JSON, before any cast (its vector apart).';

-- ---- ids: every sequence past every id an earlier release let in -------------------------------------------
select pg_catalog.setval('emem.records_record_id_seq',
                         greatest((select pg_catalog.max(record_id) from emem.records), 1),
                         (select pg_catalog.max(record_id) from emem.records) is not null);
select pg_catalog.setval('emem.edges_edge_id_seq', greatest((select pg_catalog.max(edge_id) from emem.edges), 1),
                         (select pg_catalog.max(edge_id) from emem.edges) is not null);
select pg_catalog.setval('emem.windows_window_id_seq', greatest((select pg_catalog.max(window_id) from emem.windows), 1),
                         (select pg_catalog.max(window_id) from emem.windows) is not null);
select pg_catalog.setval('emem.embedding_queue_queue_id_seq',
                         greatest((select pg_catalog.max(queue_id) from emem.embedding_queue), 1),
                         (select pg_catalog.max(queue_id) from emem.embedding_queue) is not null);
select pg_catalog.setval('emem.embedding_spaces_space_id_seq',
                         greatest((select pg_catalog.max(space_id) from emem.embedding_spaces), 1),
                         (select pg_catalog.max(space_id) from emem.embedding_spaces) is not null);

-- ---- what the tables say of themselves ---------------------------------------------------------------
comment on table emem.role_profiles is
  'Each database role is bound to at most one agent profile, by name and identity: a role dropped and created again under the same name is not bound; a binding restored into another cluster holds for the role of its name. A role bound to none reads nothing.';
comment on table emem.tag_vocabulary is
  'Each lane''s tags with their normalised words and record counts; written with emem.record_tags.';
comment on table emem.embedding_queue is
  'What the embedding workers (emem embed) have to do: records and window runs without a current vector in a space.';

-- ---- the derived tables are dumped now ---------------------------------------------------------------------
select pg_catalog.pg_extension_config_dump('emem.tag_vocabulary', '');
select pg_catalog.pg_extension_config_dump('emem.edge_labels', '');
select pg_catalog.pg_extension_config_dump('emem.edge_label_vocabulary', '');
select pg_catalog.pg_extension_config_dump('emem.embedding_queue', '');
select pg_catalog.pg_extension_config_dump('emem.embedding_queue_queue_id_seq', '');
