-- emem 0.1.1 -> 0.2.0 (ALTER EXTENSION emem UPDATE): the steps of this upgrade, which the Makefile
-- (make upgrade-script) follows with 0.2.0's code (sql/20_* to sql/90_*) exactly as a fresh
-- install creates it, into sql/emem--0.1.1--0.2.0.sql.
--
-- 0.2.0: a private inside (internal functions named _x, executable by no one but the owner), the
-- write API as SECURITY DEFINER functions acting for the session's role, no foreign keys between
-- the dumped tables (pg_restore -j), tags and the tag vocabulary per lane, read and write lanes,
-- bindings by role identity, owner-set settings per agent profile, record kinds and the name
-- rule defined once, text searched in NFC, an embedding queue (emem embed) and a model switch
-- without a blind spot.

\echo Use "ALTER EXTENSION emem UPDATE" to load this file. \quit

set local search_path = pg_catalog, pg_temp;

-- ---- the old code goes (policies, triggers and the view first: they use functions) ----------
drop policy own_binding on emem.role_profiles;
drop policy own_profile on emem.agent_profiles;
drop policy own_profile_lanes on emem.profile_lanes;
drop policy readable_lane on emem.lanes;
drop policy readable_lane on emem.records;
drop policy readable_record on emem.record_tags;
drop policy readable_record on emem.record_vectors;
drop policy readable_endpoints on emem.edges;
drop policy readable_edge on emem.edge_labels;
drop policy readable_lane on emem.windows;
drop policy readable_window on emem.window_members;
drop trigger edges_refresh_labels on emem.edges;
drop trigger embedding_spaces_create_indexes on emem.embedding_spaces;
drop trigger record_tags_count_added on emem.record_tags;
drop trigger record_tags_count_removed on emem.record_tags;
drop trigger record_tags_count_changed on emem.record_tags;
drop trigger record_tags_truncated on emem.record_tags;
drop function emem.records_with_all_tags(text[]);
drop function emem.e_timeline(timestamptz, timestamptz, integer, integer, text[], text[]);
drop view emem.record_summaries;
drop function emem.refresh_edge_labels();
drop function emem.create_space_indexes();
drop function emem.count_tags();
drop function emem.forget_tag_counts();
drop function emem.readable_lanes();
drop function emem.check_name(text, text);
drop function emem.create_lane(text);
drop function emem.create_agent_profile(text, text[]);
drop function emem.bind_role(name, text);
drop function emem.normal_tag(text);
drop function emem.create_embedding_space(text, integer, text, boolean);
drop function emem.activate_embedding_space(integer);
drop function emem.put_record(text, text, text, text[], real, timestamptz, text, integer, jsonb, text);
drop function emem.put_records(jsonb, integer);
drop function emem.resolve_space(integer);
drop function emem.check_vector(public.vector, emem.embedding_spaces, text);
drop function emem.require_record(bigint, text);
drop function emem.check_tags(text[]);
drop function emem.tag_record(bigint, text[]);
drop function emem.untag_record(bigint, text[]);
drop function emem.link_records(bigint, bigint, text, jsonb);
drop function emem.put_record_vector(bigint, public.vector, integer);
drop function emem.put_window(bigint[], public.vector, integer);
drop function emem.e_gather_find(text, public.vector, integer, integer);
drop function emem.e_gather_explain(text, public.vector, integer, integer);
drop function emem.e_gather_find_envelope(text, public.vector, integer, integer);
drop function emem.gather(text, public.vector, integer, integer, boolean);
drop function emem.gather_for_role(name, text, public.vector, integer, integer);
drop function emem.explain_for_role(name, text, public.vector, integer, integer);
drop function emem.raise_plainly(text, text, text, text);
drop function emem.e_health(text, integer, text);

-- ---- analysis: renamed private, and a size limit --------------------------------------------
alter function emem.label_terms(text) rename to _label_terms;
create or replace function emem._label_terms(label text) returns text[]
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
return backend(GD, plpy, "0.2.0").label_terms(label)
$$;
comment on function emem._label_terms(text) is
  'The terms of a label (tag, relation name, property value): lower-case WordNet lemmas, a key: namespace left out, compound words as their parts, codes kept whole, stop words dropped unless the label has nothing else.';
create or replace function emem.analyse_question(question text) returns jsonb
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
import json
from emem_db.entry import backend
analysis = backend(GD, plpy, "0.2.0").analyse(question)
return json.dumps({"terms": analysis.terms, "known_words": analysis.known_words,
                   "unknown_terms": analysis.unknown_terms, "stop_words": analysis.stop_words})
$$;
comment on function emem.analyse_question(text) is
  'How e_gather_find reads a question (at most 10000 characters): its normalised terms (matched against labels), the words WordNet knows, the terms full text searches (unknown to WordNet, or figures), and its stop words (matched only by labels made of stop words).';
create function emem._label_namespace_terms(label text) returns text[]
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
return backend(GD, plpy, "0.2.0").namespace_terms(label)
$$;
comment on function emem._label_namespace_terms(text) is
  'The terms of a label''s key: namespace (empty without one): the seed''s tags lookup asks for them in the question, the opt-in components do not.';
create function emem._lane_qualified(lanes text[], terms text[]) returns text[]
language sql immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
select coalesce(pg_catalog.array_agg(distinct l operator(pg_catalog.||) '/' operator(pg_catalog.||) t), '{}')
from pg_catalog.unnest(lanes) as l, pg_catalog.unnest(terms) as t
where l is not null
$$;
comment on function emem._lane_qualified(text[], text[]) is
  'Each term prefixed with each lane and a slash (''ops/invoice''): edge label terms within lanes.';
alter aggregate emem.tsquery_any(tsquery) rename to _tsquery_any;

-- ---- names and kinds, defined once ---------------------------------------------------------
create domain emem.object_name as text
    constraint object_name_format check (value ~ '^[a-z0-9][a-z0-9_.:-]{0,62}$');
comment on domain emem.object_name is
  'A lane or agent profile name: 1 to 63 characters, lower-case letters, digits and _ . : -, starting with a letter or digit.';
create type emem.record_kind as enum ('note', 'conversation', 'file', 'entity');
comment on type emem.record_kind is
  'What a record is: a note, one turn of a conversation, one chunk of a file, or an entity.';
create function emem._has_thread(kind emem.record_kind) returns boolean
language sql immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$ select kind operator(pg_catalog.=) any (array['conversation', 'file']::emem.record_kind[]) $$;
comment on function emem._has_thread(emem.record_kind) is
  'Whether records of this kind belong to a thread (conversation, file).';

-- ---- no foreign keys between the dumped tables (edge_labels keeps its own: it is derived) -----
do $$
declare
    fk record;
begin
    for fk in select c.conrelid::pg_catalog.regclass as relation, c.conname from pg_catalog.pg_constraint as c
              where c.contype = 'f' and c.connamespace = 'emem'::pg_catalog.regnamespace
                and c.conrelid <> 'emem.edge_labels'::pg_catalog.regclass loop
        execute pg_catalog.format('alter table %s drop constraint %I', fk.relation, fk.conname);
    end loop;
end
$$;

-- ---- tables ----------------------------------------------------------------------------------
alter table emem.lanes drop constraint lane_name_format;
alter table emem.lanes alter column lane_name type emem.object_name;
comment on table emem.lanes is 'Every record lives in exactly one lane; agent profiles name the lanes they read and write.';

alter table emem.agent_profiles drop constraint profile_name_format;
alter table emem.agent_profiles alter column profile_name type emem.object_name;
alter table emem.agent_profiles add column settings jsonb not null default '{}'
    constraint settings_is_object check (pg_catalog.jsonb_typeof(settings) = 'object');
comment on table emem.agent_profiles is 'An agent profile names the lanes it may read and write (emem.profile_lanes).';

alter table emem.profile_lanes add column can_read boolean not null default true,
    add column can_write boolean not null default true,
    add constraint reads_or_writes check (can_read or can_write);
comment on table emem.profile_lanes is 'The lanes of an agent profile: which it reads, which it writes.';

-- A binding of a role that no longer exists is dropped (a role of that name created later is
-- another role); the others now name the role itself.
delete from emem.role_profiles as rp where pg_catalog.to_regrole(pg_catalog.quote_ident(rp.role_name)) is null;
alter table emem.role_profiles drop constraint role_profiles_pkey;
alter table emem.role_profiles alter column role_name type regrole
    using pg_catalog.to_regrole(pg_catalog.quote_ident(role_name));
alter table emem.role_profiles rename column role_name to role_id;
alter table emem.role_profiles add constraint role_profiles_pkey primary key (role_id);
comment on table emem.role_profiles is
  'Each database role is bound to at most one agent profile, by its identity (a role dropped and created again under the same name is another role); a role bound to none reads nothing.';

alter table emem.embedding_spaces
    add constraint model_name_size check (pg_catalog.length(model_name) <= 200),
    add constraint fingerprint_size check (pg_catalog.length(fingerprint) <= 200);

alter table emem.records drop constraint record_kind, drop constraint thread_for_conversation_and_file;
alter table emem.records alter column kind type emem.record_kind using kind::emem.record_kind;
alter table emem.records
    add constraint thread_id_size check (pg_catalog.length(thread_id) <= 500),
    add constraint source_key_size check (pg_catalog.length(source_key) <= 500),
    add constraint thread_for_conversation_and_file check (
        emem._has_thread(kind) = (thread_id is not null and thread_position is not null));
alter table emem.records drop column content_search;
alter table emem.records add column content_search tsvector generated always as (
    pg_catalog.to_tsvector('emem.exact'::pg_catalog.regconfig, pg_catalog.normalize(content, 'NFC'))) stored;
create index records_content_search on emem.records using gin (content_search);

alter table emem.record_tags add column lane_name text;
update emem.record_tags as t set lane_name = r.lane_name from emem.records as r where r.record_id = t.record_id;
delete from emem.record_tags where lane_name is null;
alter table emem.record_tags alter column lane_name set not null,
    add constraint tag_size check (pg_catalog.length(tag) <= 200);
comment on table emem.record_tags is 'Labels on records, stored lower-case (emem._normal_tag), with the record''s lane.';

drop table emem.tag_vocabulary;
create table emem.tag_vocabulary (
    lane_name text not null,
    tag text not null,
    tag_terms text[] not null,
    record_count bigint not null constraint record_count_not_negative check (record_count >= 0),
    namespace_terms text[] not null default '{}',
    primary key (lane_name, tag)
);
create index tag_vocabulary_by_terms on emem.tag_vocabulary using gin (tag_terms);
comment on table emem.tag_vocabulary is
  'Each lane''s tags with their normalised words and record counts; derived from emem.record_tags.';
insert into emem.tag_vocabulary (lane_name, tag, tag_terms, record_count, namespace_terms)
    select t.lane_name, t.tag, emem._label_terms(t.tag), pg_catalog.count(*), emem._label_namespace_terms(t.tag)
    from emem.record_tags as t group by t.lane_name, t.tag;

-- Two links with the same ends, relation and properties are one edge from now on.
delete from emem.edges as e using emem.edges as first
    where first.from_record_id = e.from_record_id and first.to_record_id = e.to_record_id
      and first.relation = e.relation and first.properties = e.properties and first.edge_id < e.edge_id;
alter table emem.edges add constraint relation_size check (pg_catalog.length(relation) <= 200);
create unique index edges_one_per_link on emem.edges (from_record_id, to_record_id, relation, pg_catalog.md5(properties::text));

alter table emem.windows alter column thread_kind type emem.record_kind using thread_kind::emem.record_kind,
    add constraint thread_kind_has_thread check (emem._has_thread(thread_kind));

-- ---- labels analysed as 0.2.0 does (namespaces, compound words, codes, stop-word labels) ------
-- edge_labels.label_terms: the edges trigger writes them from now on (analysing each label once
-- for its terms and its lane-qualified terms); 0.2.0's terms now (tag_vocabulary was rebuilt above).
alter table emem.edge_labels alter column label_terms drop expression;
update emem.edge_labels set label_terms = emem._label_terms(label);
alter table emem.edge_labels
    add column namespace_terms text[] not null generated always as (emem._label_namespace_terms(label)) stored;

-- ---- edges carry their ends' lanes: strict isolation finds a lane's edges through one index ----
alter table emem.edges add column from_lane_name text, add column to_lane_name text;
update emem.edges as e set from_lane_name = f.lane_name, to_lane_name = t.lane_name
from emem.records as f, emem.records as t
where f.record_id = e.from_record_id and t.record_id = e.to_record_id;
alter table emem.edge_labels
    add column from_lane_name text, add column to_lane_name text, add column lane_terms text[] not null default '{}';
update emem.edge_labels as l
set from_lane_name = e.from_lane_name, to_lane_name = e.to_lane_name,
    lane_terms = emem._lane_qualified(array[e.from_lane_name, e.to_lane_name], l.label_terms)
from emem.edges as e where e.edge_id = l.edge_id;
create index edge_labels_by_lane_terms on emem.edge_labels using gin (lane_terms);

-- ---- embeddings that stay true: a queue of what lacks a vector, windows without one ----------
alter table emem.windows alter column embedding drop not null;
create index windows_without_vector on emem.windows (space_id) where embedding is null;
comment on table emem.windows is
  'A vector over a run of consecutive records of one conversation or file (its members); without one (NULL) until the embedding queue fills it.';

-- The work of the embedding workers (`emem embed`): each record without a vector, and each window
-- run without a current vector, in each embedding space. Derived from the tables above by the
-- triggers of 45_embeddings.sql (so not dumped: a restore fills it again as it loads them).
create table emem.embedding_queue (
    queue_id bigserial primary key,
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
    constraint record_or_window check (
        (record_id is not null and thread_kind is null and thread_id is null and first_position is null
         and last_position is null)
        or (record_id is null and thread_kind is not null and thread_id is not null and first_position is not null
            and last_position >= first_position))
);
create unique index embedding_queue_one_per_record on emem.embedding_queue (space_id, record_id)
    where record_id is not null;
-- Led by the thread, so that the windows holding an edited record are found without a space.
create unique index embedding_queue_one_per_run on emem.embedding_queue
    (lane_name, thread_kind, thread_id, first_position, last_position, space_id) where record_id is null;
create index embedding_queue_in_order on emem.embedding_queue (space_id, queue_id);
create index embedding_queue_by_lane on emem.embedding_queue (space_id, lane_name);
comment on table emem.embedding_queue is
  'What the embedding workers (emem embed) have to do: records and window runs without a current vector in a space; kept by triggers.';

alter table emem.embedding_queue enable row level security;

-- ---- 0.2.0's code, as a fresh install creates it, follows ----------------------------------
