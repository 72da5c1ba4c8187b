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
-- Triggers that keep derived rows and per-space indexes in step with what is written, and that
-- delete what hangs on a deleted row (the tables have no foreign keys: see 10_schema.sql).
-- They run as the extension's owner: the derived tables are not agents' to read or write.

-- An edge's ends' lanes come from its records, unless given (a restore gives them: the records
-- may load after the edges). Changing an end looks its lane up again.
create function emem._edge_lanes() returns trigger
language plpgsql
security definer  -- records of every lane
set search_path = pg_catalog, pg_temp
as $$
begin
    if tg_op = 'UPDATE' or new.from_lane_name is null then
        new.from_lane_name := (select r.lane_name from emem.records as r where r.record_id = new.from_record_id);
    end if;
    if tg_op = 'UPDATE' or new.to_lane_name is null then
        new.to_lane_name := (select r.lane_name from emem.records as r where r.record_id = new.to_record_id);
    end if;
    return new;
end
$$;
create trigger edges_lanes
    before insert or update of from_record_id, to_record_id on emem.edges
    for each row execute function emem._edge_lanes();

-- An edge is matched through its relation name (words split at underscores) and every scalar
-- value of its properties, however deeply nested.
create function emem._refresh_edge_labels() returns trigger
language plpgsql
security definer  -- edge_labels is derived: only the owner writes it
set search_path = pg_catalog, pg_temp
as $$
begin
    delete from emem.edge_labels where edge_id = new.edge_id;
    insert into emem.edge_labels (edge_id, label, label_terms, from_lane_name, to_lane_name, lane_terms)
    select new.edge_id, label, terms, new.from_lane_name, new.to_lane_name,
           emem._lane_qualified(array[new.from_lane_name, new.to_lane_name], terms)
    from (
        select label, emem._label_terms(label) as terms
        from (
            select pg_catalog.replace(new.relation, '_', ' ') as label
            union
            select value #>> '{}'
            from pg_catalog.jsonb_path_query(new.properties, 'strict $.**') as value
            where pg_catalog.jsonb_typeof(value) in ('string', 'number')
        ) as labels
        where pg_catalog.btrim(label) <> ''
        offset 0  -- each label analysed once
    ) as analysed;
    return null;
end
$$;
create trigger edges_refresh_labels
    after insert or update of relation, properties, from_lane_name, to_lane_name on emem.edges
    for each row execute function emem._refresh_edge_labels();

-- pgvector indexes need a fixed dimension: each space gets partial expression indexes for
-- its record and window vectors. Also fires when pg_restore reloads the spaces.
create function emem._create_space_indexes() returns trigger
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
    for each row execute function emem._create_space_indexes();

-- The tag vocabulary follows record_tags statement by statement (a bulk load touches each of
-- its tags once), one row per lane and tag: a writer locks only its own lane's rows, taken in
-- tag order so that concurrent writers of one lane lock them in one order.
create function emem._count_tags() returns trigger
language plpgsql
security definer  -- the vocabulary is not readable or writable by agents
set search_path = pg_catalog, pg_temp
as $$
begin
    if tg_op in ('DELETE', 'UPDATE') then
        update emem.tag_vocabulary as v set record_count = v.record_count - removed.records
        from (select r.lane_name, r.tag, pg_catalog.count(*) as records from removed_tags as r
              group by r.lane_name, r.tag order by r.lane_name, r.tag) as removed
        where v.lane_name = removed.lane_name and v.tag = removed.tag;
    end if;
    if tg_op in ('INSERT', 'UPDATE') then
        -- Only a tag seen for the first time needs its words worked out.
        insert into emem.tag_vocabulary as v (lane_name, tag, tag_terms, record_count, namespace_terms)
        select added.lane_name, added.tag, coalesce(known.tag_terms, emem._label_terms(added.tag)), added.records,
               coalesce(known.namespace_terms, emem._label_namespace_terms(added.tag))
        from (select a.lane_name, a.tag, pg_catalog.count(*) as records from added_tags as a
              group by a.lane_name, a.tag) as added
        left join lateral (select k.tag_terms, k.namespace_terms from emem.tag_vocabulary as k
                           where k.tag = added.tag limit 1) as known on true
        order by added.lane_name, added.tag
        on conflict (lane_name, tag) do update set record_count = v.record_count + excluded.record_count;
    end if;
    return null;
end
$$;
create trigger record_tags_count_added after insert on emem.record_tags
    referencing new table as added_tags for each statement execute function emem._count_tags();
create trigger record_tags_count_removed after delete on emem.record_tags
    referencing old table as removed_tags for each statement execute function emem._count_tags();
create trigger record_tags_count_changed after update on emem.record_tags
    referencing old table as removed_tags new table as added_tags
    for each statement execute function emem._count_tags();

create function emem._forget_tag_counts() returns trigger
language plpgsql
security definer  -- as emem._count_tags
set search_path = pg_catalog, pg_temp
as $$
begin
    update emem.tag_vocabulary set record_count = 0;
    return null;
end
$$;
create trigger record_tags_truncated after truncate on emem.record_tags
    for each statement execute function emem._forget_tag_counts();

-- What hangs on a deleted record, window, space or profile goes with it (what foreign keys
-- with ON DELETE CASCADE would do); a lane that still holds records cannot be deleted. A window
-- that loses a member goes too: its vector spoke for text that is gone, and what is left of its
-- run is no longer a run.
create function emem._delete_dependents() returns trigger
language plpgsql
security definer  -- deletes rows of every lane that hang on the deleted ones
set search_path = pg_catalog, pg_temp
as $$
begin
    case tg_table_name
    when 'records' then
        delete from emem.record_tags as t using deleted as d where t.record_id = d.record_id;
        delete from emem.record_vectors as v using deleted as d where v.record_id = d.record_id;
        delete from emem.windows as w using emem.window_members as m, deleted as d
            where m.window_id = w.window_id and m.record_id = d.record_id;
        delete from emem.embedding_queue as q using deleted as d where q.record_id = d.record_id;
        delete from emem.edges as e using deleted as d where d.record_id in (e.from_record_id, e.to_record_id);
    when 'windows' then
        delete from emem.window_members as m using deleted as d where m.window_id = d.window_id;
    when 'embedding_spaces' then
        delete from emem.record_vectors as v using deleted as d where v.space_id = d.space_id;
        delete from emem.windows as w using deleted as d where w.space_id = d.space_id;
        delete from emem.embedding_queue as q using deleted as d where q.space_id = d.space_id;
    when 'agent_profiles' then
        delete from emem.profile_lanes as p using deleted as d where p.profile_name = d.profile_name;
        delete from emem.role_profiles as r using deleted as d where r.profile_name = d.profile_name;
    when 'lanes' then
        if exists (select from emem.records as r join deleted as d on d.lane_name = r.lane_name) then
            raise exception 'a lane that holds records cannot be deleted' using errcode = '23503',
                hint = 'Delete or move its records first.';
        end if;
        delete from emem.profile_lanes as p using deleted as d where p.lane_name = d.lane_name;
    end case;
    return null;
end
$$;
create trigger records_delete_dependents after delete on emem.records
    referencing old table as deleted for each statement execute function emem._delete_dependents();
create trigger windows_delete_dependents after delete on emem.windows
    referencing old table as deleted for each statement execute function emem._delete_dependents();
create trigger embedding_spaces_delete_dependents after delete on emem.embedding_spaces
    referencing old table as deleted for each statement execute function emem._delete_dependents();
create trigger agent_profiles_delete_dependents after delete on emem.agent_profiles
    referencing old table as deleted for each statement execute function emem._delete_dependents();
create trigger lanes_delete_dependents after delete on emem.lanes
    referencing old table as deleted for each statement execute function emem._delete_dependents();

-- A record moved to another lane takes its tags and its edges' lanes along.
create function emem._move_tags_with_records() returns trigger
language plpgsql
security definer  -- tags of every lane follow their records
set search_path = pg_catalog, pg_temp
as $$
begin
    update emem.record_tags as t set lane_name = a.lane_name
    from moved_after as a join moved_before as b on b.record_id = a.record_id
    where t.record_id = a.record_id and a.lane_name is distinct from b.lane_name;
    update emem.edges as e set from_lane_name = a.lane_name
    from moved_after as a join moved_before as b on b.record_id = a.record_id
    where e.from_record_id = a.record_id and a.lane_name is distinct from b.lane_name;
    update emem.edges as e set to_lane_name = a.lane_name
    from moved_after as a join moved_before as b on b.record_id = a.record_id
    where e.to_record_id = a.record_id and a.lane_name is distinct from b.lane_name;
    return null;
end
$$;
create trigger records_move_tags after update on emem.records
    referencing old table as moved_before new table as moved_after
    for each statement execute function emem._move_tags_with_records();
-- Lanes, agent profiles, role bindings, and who acts: every API function acts for the role the
-- session acts as (its current role, so a pool that does SET ROLE agent_x works), reads the
-- lanes of that role's agent profile and writes its write lanes. The extension's owner, its
-- members and roles with BYPASSRLS read and write everything; a role bound to no profile reads
-- nothing. Row-level security keeps direct reads of the tables inside the same lanes.

-- A role by its exact name (role names are not parsed: 'Agent' is not 'agent'); NULL if none.
create function emem._role_named(role_name name) returns regrole
language sql stable
set search_path = pg_catalog, pg_temp
as $$ select r.oid::pg_catalog.regrole from pg_catalog.pg_roles as r where r.rolname = role_name $$;
comment on function emem._role_named(name) is 'The role with exactly this name, or NULL.';

-- The role the session acts as. Inside the API's SECURITY DEFINER functions current_user is the
-- owner; the session's current role is what SET ROLE set (the `role` setting), else the login.
create function emem._acting_role() returns regrole
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select emem._role_named(case when pg_catalog.current_setting('role') = 'none' then session_user
                                 else pg_catalog.current_setting('role')::name end)
$$;
comment on function emem._acting_role() is 'The role the session acts as (SET ROLE, else the login role).';

create function emem._reads_everything(role regrole) returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select r.rolsuper or r.rolbypassrls or pg_catalog.pg_has_role(r.oid, c.relowner, 'USAGE')
    from pg_catalog.pg_roles as r, pg_catalog.pg_class as c
    where r.oid = role and c.oid = 'emem.records'::pg_catalog.regclass
$$;
comment on function emem._reads_everything(regrole) is
  'Whether the role reads and writes every lane: a superuser, a role with BYPASSRLS, the extension''s owner or its member.';

-- The lanes a role reads (writing => false) or writes; NULL: every lane.
create function emem._lanes_of(role regrole, writing boolean) returns text[]
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select case when emem._reads_everything(role) then null else array(
        select pl.lane_name
        from emem.role_profiles as rp
        join emem.profile_lanes as pl on pl.profile_name = rp.profile_name
        where rp.role_id = role and case when writing then pl.can_write else pl.can_read end
        order by pl.lane_name) end
$$;
comment on function emem._lanes_of(regrole, boolean) is
  'The lanes a role reads (writing => false) or writes, from its agent profile; NULL when it reads and writes every lane.';

-- Fail closed: a read path refuses a role bound to no agent profile outright (no rows, no totals).
create function emem._readable_lanes_or_refuse() returns text[]
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    role regrole := emem._acting_role();
begin
    if not emem._reads_everything(role) and not exists (select from emem.role_profiles as rp where rp.role_id = role) then
        raise exception 'role % is bound to no agent profile: it reads nothing', role
            using errcode = '42501',
                  hint = 'The extension''s owner binds it: SELECT emem.bind_role(''<role>'', ''<agent profile>'').';
    end if;
    return emem._lanes_of(role, false);
end
$$;
comment on function emem._readable_lanes_or_refuse() is
  'The lanes the acting role reads (NULL: every lane); SQLSTATE 42501 for a role bound to no agent profile.';

-- For row-level security: the lanes the querying role reads.
create function emem.readable_lanes() returns setof text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select pl.lane_name
    from emem.role_profiles as rp
    join emem.profile_lanes as pl on pl.profile_name = rp.profile_name
    where rp.role_id operator(pg_catalog.=) (select r.oid from pg_catalog.pg_roles as r where r.rolname = current_user)
      and pl.can_read
$$;
comment on function emem.readable_lanes() is
  'The lanes the current role may read: those of the agent profile it is bound to (row-level security uses it).';

-- Lane and profile names: the domain's rule, with a clear error.
create function emem._check_name(what text, name text) returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    perform name::emem.object_name;
    if name is null then
        raise exception using errcode = '23514';
    end if;
exception when check_violation then
    raise exception 'invalid % name %', what, coalesce(pg_catalog.quote_literal(pg_catalog.left(name, 100)), 'NULL')
        using errcode = '22023',
              hint = pg_catalog.format('A %s name is 1 to 63 characters: lower-case letters, digits and _ . : -,'
                                       ' starting with a letter or digit.', what);
end
$$;
comment on function emem._check_name(text, text) is 'Refuses a lane or profile name the emem.object_name domain would not accept.';

create function emem.create_lane(lane_name text) returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform emem._check_name('lane', lane_name);
    insert into emem.lanes (lane_name) values (create_lane.lane_name) on conflict do nothing;
    return lane_name;
end
$$;
comment on function emem.create_lane(text) is 'Creates a lane (no-op when it exists); returns its name.';

create function emem._check_lanes(what text, profile_name text, lanes text[]) returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    unknown text[];
begin
    if lanes is null or pg_catalog.array_position(lanes, null) is not null or pg_catalog.cardinality(lanes) > 1000 then
        raise exception 'the %lanes of agent profile % must be an array of at most 1000 lane names without NULLs',
            what, profile_name using errcode = '22023';
    end if;
    select pg_catalog.array_agg(l order by l) into unknown
    from pg_catalog.unnest(lanes) as l
    where not exists (select from emem.lanes as known where known.lane_name operator(pg_catalog.=) l);
    if unknown is not null then
        raise exception 'unknown %lane(s) % for agent profile %', what, unknown, profile_name
            using errcode = '22023', hint = 'Create them first with emem.create_lane(name).';
    end if;
end
$$;
comment on function emem._check_lanes(text, text, text[]) is
  'Refuses (write) lanes of an agent profile that are not an array of existing lanes; what:  or ''write ''.';

create function emem.create_agent_profile(profile_name text, lanes text[], write_lanes text[] default null)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform emem._check_name('agent profile', profile_name);
    perform emem._check_lanes('', profile_name, lanes);
    write_lanes := coalesce(write_lanes, lanes);
    perform emem._check_lanes('write ', profile_name, write_lanes);
    insert into emem.agent_profiles (profile_name) values (create_agent_profile.profile_name)
        on conflict do nothing;
    delete from emem.profile_lanes as pl where pl.profile_name = create_agent_profile.profile_name;
    insert into emem.profile_lanes (profile_name, lane_name, can_read, can_write)
        select create_agent_profile.profile_name, l, l = any (lanes), l = any (write_lanes)
        from (select pg_catalog.unnest(lanes) union select pg_catalog.unnest(write_lanes)) as each_lane (l);
    return profile_name;
end
$$;
comment on function emem.create_agent_profile(text, text[], text[]) is
  'Creates an agent profile, or replaces its lanes when it exists: the lanes it reads, and those it writes (by default the same); returns its name.';

create function emem.bind_role(role_name name, profile_name text) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    role regrole := emem._role_named(role_name);
begin
    if role is null then
        raise exception 'unknown database role %', coalesce(pg_catalog.quote_ident(role_name), 'NULL')
            using errcode = '22023';
    end if;
    if profile_name is null or not exists (
        select from emem.agent_profiles as p where p.profile_name operator(pg_catalog.=) bind_role.profile_name) then
        raise exception 'unknown agent profile %', coalesce(pg_catalog.quote_literal(profile_name), 'NULL')
            using errcode = '22023', hint = 'Create it first with emem.create_agent_profile(name, lanes).';
    end if;
    insert into emem.role_profiles as rp (role_id, profile_name)
        values (role, bind_role.profile_name)
        on conflict on constraint role_profiles_pkey
        do update set profile_name = excluded.profile_name, bound_at = pg_catalog.now();
end
$$;
comment on function emem.bind_role(name, text) is
  'Binds a database role to an agent profile (replacing an earlier binding): the role then reads and writes the profile''s lanes. The binding is to the role itself: a role dropped and created again under the same name is not bound.';

-- Row-level security: a record is visible when its lane is readable; rows that belong to
-- records (tags, vectors, window members) follow their record, an edge both its endpoints.
create policy own_binding on emem.role_profiles for select
    using (role_id operator(pg_catalog.=) (select r.oid from pg_catalog.pg_roles as r where r.rolname = current_user));
create policy own_profile on emem.agent_profiles for select
    using (profile_name in (select rp.profile_name from emem.role_profiles as rp));
create policy own_profile_lanes on emem.profile_lanes for select
    using (profile_name in (select rp.profile_name from emem.role_profiles as rp));
create policy readable_lane on emem.lanes for select
    using (lane_name in (select emem.readable_lanes()));
create policy readable_lane on emem.records for select
    using (lane_name in (select emem.readable_lanes()));
create policy readable_lane on emem.record_tags for select
    using (lane_name in (select emem.readable_lanes()));
create policy readable_record on emem.record_vectors for select
    using (exists (select from emem.records as r where r.record_id = record_vectors.record_id));
create policy readable_endpoints on emem.edges for select
    using (exists (select from emem.records as r where r.record_id = edges.from_record_id)
       and exists (select from emem.records as r where r.record_id = edges.to_record_id));
create policy readable_edge on emem.edge_labels for select
    using (exists (select from emem.edges as e where e.edge_id = edge_labels.edge_id));
create policy readable_lane on emem.windows for select
    using (lane_name in (select emem.readable_lanes()));
create policy readable_window on emem.window_members for select
    using (exists (select from emem.windows as w where w.window_id = window_members.window_id)
       and exists (select from emem.records as r where r.record_id = window_members.record_id));

-- The settings an agent profile's finds run under. Checked by the same code that reads them.
create function emem._check_setting(setting text, value text) returns void
language plpython3u immutable
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
from emem_db.settings import SettingError, check_setting
state = backend(GD, plpy, "0.2.0")
try:
    check_setting(setting, value)
except SettingError as error:
    state.fail(str(error))
$$;
comment on function emem._check_setting(text, text) is 'Refuses an emem setting or value that a find would refuse.';

create function emem.set_agent_setting(profile_name text, setting text, value text) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    state text; message text; hint text;
    now_set jsonb;
begin
    begin
        perform emem._check_setting(setting, value);
    exception when others then
        get stacked diagnostics state = returned_sqlstate, message = message_text, hint = pg_exception_hint;
        perform emem._raise_plainly(state, message, '', hint);
    end;
    update emem.agent_profiles as p
        set settings = case when value is null then p.settings - setting
                            else p.settings || pg_catalog.jsonb_build_object(setting, value) end
        where p.profile_name operator(pg_catalog.=) set_agent_setting.profile_name
        returning p.settings into now_set;
    if not found then
        raise exception 'unknown agent profile %', coalesce(pg_catalog.quote_literal(profile_name), 'NULL')
            using errcode = '22023', hint = 'Create it first with emem.create_agent_profile(name, lanes).';
    end if;
    return now_set;
end
$$;
comment on function emem.set_agent_setting(text, text, text) is
  'Sets (value NULL: removes) an emem setting for the finds of an agent profile''s roles: emem.pipeline_profile, emem.record_vector_candidates, emem.window_vector_candidates, emem.lane_isolation (seed or strict), emem.vector_coverage_threshold (0 to 1), emem.exact_totals_up_to (0: totals always exact). Agents cannot change them in their sessions. Returns the profile''s settings.';
-- The write API. Agents write only through it (they may not write the tables): every function
-- runs as the extension's owner (SECURITY DEFINER), acts for the session's role
-- (emem._acting_role()) and writes only into that role's write lanes. Every argument is checked
-- before anything is written; a refusal says what is accepted (SQLSTATE 22023 for a value it
-- does not accept, 42501 for a lane the role may not write) and writes nothing.

-- No SET clause, so that it is inlined into bulk writes; every name in it is qualified.
create function emem._normal_tag(tag text) returns text
language sql immutable strict parallel safe
as $$
    select pg_catalog.lower(pg_catalog.btrim(pg_catalog.regexp_replace(pg_catalog.normalize(tag, 'NFC'),
        '[\s\u00a0\u1680\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]+', ' ', 'g')))
$$;
comment on function emem._normal_tag(text) is
  'How tags are stored: in Unicode''s composed form (NFC), every run of white space (in any script) one space, trimmed, lower-case.';

-- White space in any script counts as white space: a text of only that says nothing.
create function emem._is_blank(value text) returns boolean
language sql immutable strict parallel safe
set search_path = pg_catalog, pg_temp
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
        returning s.space_id into new_space_id;
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
    if not force and exists (select from emem.embedding_spaces as s where s.is_active) then
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

-- What is wrong with one item of put_records, or NULL. The cheap checks of shape and size; the
-- values that need a cast (occurred_at, a vector) are parsed afterwards.
create function emem._item_problem(item jsonb, writable text[]) returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select case
        when pg_catalog.jsonb_typeof(item) <> 'object' then 'is not a JSON object'
        when exists (select from pg_catalog.jsonb_object_keys(item) as k
                     where k <> all (array['kind', 'content', 'lane', 'tags', 'authority', 'occurred_at',
                                           'thread_id', 'thread_position', 'metadata', 'source_key', 'vector']))
            then 'has an unknown key; accepted: kind, content, lane, tags, authority, occurred_at, '
                 'thread_id, thread_position, metadata, source_key, vector'
        when pg_catalog.jsonb_typeof(item->'kind') is distinct from 'string'
             or item->>'kind' <> all (pg_catalog.enum_range(null::emem.record_kind)::text[])
            then pg_catalog.format('kind must be one of %s',
                                   pg_catalog.array_to_string(pg_catalog.enum_range(null::emem.record_kind), ', '))
        when pg_catalog.jsonb_typeof(item->'content') is distinct from 'string'
             or emem._is_blank(item->>'content') or pg_catalog.length(item->>'content') > 200000
            then 'content must be a non-empty text of at most 200000 characters (split longer text into file chunks)'
        when pg_catalog.jsonb_typeof(item->'lane') is distinct from 'string'
             or not (writable is null or item->>'lane' = any (writable))
             or not exists (select from emem.lanes as l where l.lane_name operator(pg_catalog.=) (item->>'lane'))
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
             or exists (select from pg_catalog.jsonb_array_elements_text(item->'tags') as t
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
        when item ? 'vector' and (pg_catalog.jsonb_typeof(item->'vector') not in ('array', 'string')
             or pg_catalog.length((item->'vector')::text) > 100000)
            then 'vector must be an array of numbers, or pgvector''s text of one such as "[0.1,0.2,...]"'
        end
$$;
comment on function emem._item_problem(jsonb, text[]) is
  'What is wrong with one item of emem.put_records (shape, sizes, lane), or NULL.';

-- A value that needs a cast to be checked: the first item whose value does not cast, with why.
create function emem._first_uncastable(items jsonb, field text, as_type text) returns record
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    each_item record;
    found_problem record;
begin
    for each_item in select i.n, i.item->>field as value
                     from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
                     where i.item ? field order by i.n loop
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
comment on function emem._first_uncastable(jsonb, text, text) is
  'The number of the first item whose field does not cast to the type, and the cast''s message (for put_records'' errors).';

create function emem.put_records(items jsonb, space_id integer default null)
returns table (item_number integer, record_id bigint, created boolean)
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
as $$
declare
    problem record;
    space emem.embedding_spaces;
    dimension integer;
    item_count integer;
    writable text[] := emem._lanes_of(emem._acting_role(), true);
    times timestamptz[];
    vectors public.vector[];
    stored_ids bigint[];
    new_ids bigint[];
    created_ids bigint[];
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
    if pg_catalog.jsonb_path_exists(items, 'lax $[*].vector') then
        space := emem._resolve_space(space_id);
        dimension := space.dimension;
    end if;

    select i.n, i.reason into problem
    from (
        select n, coalesce(emem._item_problem(item, writable), case
            when i.n > pg_catalog.min(i.n) over (partition by i.item->>'lane', i.item->>'source_key')
                 and item ? 'source_key'
                then 'repeats the lane and source_key of an earlier item of this batch' end) as reason
        from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
    ) as i
    where i.reason is not null
    order by i.n
    limit 1;
    if found then
        raise exception 'item %: %', problem.n, problem.reason
            using errcode = case when problem.reason like 'lane % is not a lane%' then '42501' else '22023' end;
    end if;

    -- Times and vectors are parsed once, all together; only when one does not parse is each
    -- item tried on its own, to name it. Vectors are parsed by pgvector (from the array's text,
    -- or the string as given: the fast form for bulk loads) and stored at unit length: cosine is
    -- all emem measures, and unit vectors cannot overflow its arithmetic.
    begin
        times := array(
            select (i.item->>'occurred_at')::timestamptz
            from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n) order by i.n);
    exception when others then
        problem := emem._first_uncastable(items, 'occurred_at', 'timestamptz');
        raise exception 'item %: occurred_at must be an ISO 8601 date or time (%)', problem.n, problem.reason
            using errcode = '22023';
    end;
    if dimension is not null then
        begin
            vectors := array(
                select case when i.item ? 'vector' then
                           (case when pg_catalog.jsonb_typeof(i.item->'vector') = 'string' then i.item->>'vector'
                                 else (i.item->'vector')::pg_catalog.text end)::public.vector end
                from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
                order by i.n);
        exception when others then
            problem := emem._first_uncastable(
                (select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('vector', case
                     when pg_catalog.jsonb_typeof(i.item->'vector') = 'string' then i.item->>'vector'
                     else (i.item->'vector')::pg_catalog.text end) order by i.n)
                 from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)),
                'vector', 'public.vector');
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
    stored_ids := array(
        select (select r.record_id from emem.records as r
                where r.lane_name = i.item->>'lane' and r.source_key = i.item->>'source_key')
        from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
        order by i.n);
    new_ids := array(
        select case when stored_ids[n] is null then pg_catalog.nextval('emem.records_record_id_seq') end
        from pg_catalog.generate_series(1, item_count) as n);

    -- Vectors before their records, so that a record written with its vector is never queued
    -- for embedding (emem.embedding_queue); those of records not written after all go below.
    if dimension is not null then
        insert into emem.record_vectors (space_id, record_id, embedding)
        select space.space_id, new_ids[n], public.l2_normalize(vectors[n])
        from pg_catalog.generate_series(1, item_count) as n
        where vectors[n] is not null and new_ids[n] is not null;
    end if;

    -- Records in a statement of their own, so that the tags below follow them; a key a
    -- concurrent writer stored meanwhile is skipped. Rows are written in the order of their lane
    -- and key, so that concurrent writers of the same keys take the same locks in the same order.
    with inserted as (
        insert into emem.records (record_id, kind, content, lane_name, authority, occurred_at,
                                  thread_id, thread_position, metadata, source_key)
        select new_ids[i.n], x.kind::emem.record_kind, x.content, x.lane, coalesce(x.authority, 0.5),
               coalesce(times[i.n], pg_catalog.now()), x.thread_id, x.thread_position,
               coalesce(x.metadata, '{}'), x.source_key
        from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
        cross join lateral pg_catalog.jsonb_to_record(i.item) as x(
            kind text, content text, lane text, authority real, thread_id text, thread_position integer,
            metadata jsonb, source_key text)
        where new_ids[i.n] is not null
        order by x.lane, x.source_key, i.n
        on conflict (lane_name, source_key) where source_key is not null do nothing
        returning emem.records.record_id
    )
    select coalesce(pg_catalog.array_agg(inserted.record_id), '{}') into created_ids from inserted;

    insert into emem.record_tags (record_id, tag, lane_name)
    select distinct new_ids[i.n], emem._normal_tag(t.tag), i.item->>'lane'
    from pg_catalog.jsonb_array_elements(items) with ordinality as i(item, n)
    cross join lateral pg_catalog.jsonb_array_elements_text(coalesce(i.item->'tags', '[]')) as t(tag)
    where new_ids[i.n] in (select pg_catalog.unnest(created_ids));

    if dimension is not null and pg_catalog.cardinality(created_ids)
                                 < pg_catalog.cardinality(pg_catalog.array_remove(new_ids, null)) then
        delete from emem.record_vectors as v
        where v.space_id = space.space_id and v.record_id = any (pg_catalog.array_remove(new_ids, null))
          and v.record_id <> all (created_ids);
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
        select from pg_catalog.unnest(tags) as t where t is null or pg_catalog.length(t) > 200 or emem._is_blank(t)) then
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
begin
    insert into emem.record_tags (record_id, tag, lane_name)
        select tagged.record_id, t, tagged.lane_name from pg_catalog.unnest(emem._check_tags(tags)) as t
        on conflict do nothing;
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
    delete from emem.record_tags as rt
        where rt.record_id = untag_record.record_id and rt.tag = any (unwanted);
    get diagnostics removed = row_count;
    return removed;
end
$$;
comment on function emem.untag_record(bigint, text[]) is 'Removes tags from a record; returns how many it had.';

-- Two links with the same ends, relation and properties are one edge.
create function emem.link_records(
    from_record_id bigint, to_record_id bigint, relation text, properties jsonb default '{}'
) returns bigint
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare
    edge bigint;
    trimmed_relation text := pg_catalog.btrim(link_records.relation);
begin
    perform emem._require_record(link_records.from_record_id, 'from record', true);
    perform emem._require_record(link_records.to_record_id, 'to record', false);
    if link_records.relation is null or emem._is_blank(link_records.relation)
       or pg_catalog.length(link_records.relation) > 200 or link_records.relation operator(pg_catalog.~) '[[:cntrl:]]' then
        raise exception 'relation must be a text of 1 to 200 characters, not only white space, without control characters'
            using errcode = '22023';
    end if;
    if link_records.properties is null or pg_catalog.jsonb_typeof(link_records.properties) <> 'object' then
        raise exception 'properties must be a JSON object' using errcode = '22023';
    end if;
    if pg_catalog.pg_column_size(link_records.properties) > 65536 then
        raise exception 'properties must be at most 64 kB' using errcode = '22023';
    end if;
    -- Each value is a label of the edge (emem.edge_labels), indexed whole: 2000 bytes fit an index row.
    if exists (select from pg_catalog.jsonb_path_query(link_records.properties, 'strict $.**') as value
               where pg_catalog.jsonb_typeof(value) in ('string', 'number')
                 and (pg_catalog.length(value #>> '{}') > 1000 or pg_catalog.octet_length(value #>> '{}') > 2000)) then
        raise exception 'a property value (a text or a number) is longer than 1000 characters or 2000 bytes'
            using errcode = '22023';
    end if;
    insert into emem.edges as e (from_record_id, to_record_id, relation, properties)
        values (link_records.from_record_id, link_records.to_record_id, trimmed_relation, link_records.properties)
        on conflict (from_record_id, to_record_id, relation, (pg_catalog.md5(properties::text))) do nothing
        returning e.edge_id into edge;
    if edge is null then
        select e.edge_id into edge from emem.edges as e
        where e.from_record_id = link_records.from_record_id and e.to_record_id = link_records.to_record_id
          and e.relation = trimmed_relation
          and pg_catalog.md5(e.properties::text) = pg_catalog.md5(link_records.properties::text);
    end if;
    return edge;
end
$$;
comment on function emem.link_records(bigint, bigint, text, jsonb) is
  'Links two records with a directed edge (a relation name and JSON properties) and returns its id; the same link again returns the same edge. The from record must lie in a lane the role writes, the to record in one it reads. Limits: a relation of 1 to 200 characters without control characters; properties a JSON object of at most 64 kB, each value (text or number) at most 1000 characters and 2000 bytes.';

create function emem.put_record_vector(record_id bigint, embedding public.vector, space_id integer default null)
returns void
language plpgsql
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces := emem._resolve_space(space_id);
begin
    perform emem._require_record(record_id, 'record', true);
    perform emem._check_vector(embedding, space, 'the record vector');
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
security definer  -- agents write only through the API, into their own write lanes
set search_path = pg_catalog, pg_temp
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
    select pg_catalog.min(r.kind) as kind, pg_catalog.count(distinct r.kind) as kinds,
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
    insert into emem.window_members (window_id, record_id)
        select new_window_id, m from pg_catalog.unnest(member_record_ids) as m
        on conflict do nothing;
    return new_window_id;
end
$$;
comment on function emem.put_window(bigint[], public.vector, integer) is
  'Stores a window: a vector over consecutive records of one conversation or file (its members); the same run again replaces its vector. A NULL vector stores the window without one, for the embedding queue to fill (a stored vector is kept). Returns the window id.';
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
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select case when readable is null then null else array(
        select l from pg_catalog.unnest(readable) as l
        intersect
        select l from pg_catalog.unnest(emem._lanes_of(emem._acting_role(), true)) as l
        order by 1) end
    from emem._readable_lanes_or_refuse() as readable
$$;
comment on function emem._embedding_lanes() is
  'The lanes whose embedding work the acting role may do: those it reads and writes (NULL: every lane); 42501 for a role bound to no agent profile.';

-- ---- what is missing ----------------------------------------------------------------------------

-- The window runs that hold any of these records: those of their windows in any space, and those
-- only queued.
create function emem._runs_holding(record_ids bigint[])
returns table (lane_name text, thread_kind emem.record_kind, thread_id text, first_position integer, last_position integer)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position
    from emem.window_members as m join emem.windows as w on w.window_id = m.window_id
    where m.record_id = any (record_ids)
    union
    select q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position
    from emem.records as r
    join emem.embedding_queue as q
      on q.record_id is null and q.lane_name = r.lane_name and q.thread_kind = r.kind and q.thread_id = r.thread_id
     and r.thread_position between q.first_position and q.last_position
    where r.record_id = any (record_ids)
$$;
comment on function emem._runs_holding(bigint[]) is 'The window runs (in any space, or queued) that hold any of the records.';

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
      and not exists (select from emem.record_vectors as v
                      where v.space_id = _queue_missing.space_id and v.record_id = r.record_id)
    order by r.record_id
    on conflict do nothing;
    get diagnostics added_records = row_count;
    insert into emem.embedding_queue (space_id, lane_name, thread_kind, thread_id, first_position, last_position)
    select _queue_missing.space_id, run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position
    from (select distinct w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position
          from emem.windows as w
          where lanes is null or w.lane_name = any (lanes)) as run
    where not exists (select from emem.windows as current
                      where current.space_id = _queue_missing.space_id and current.embedding is not null
                        and (current.lane_name, current.thread_kind, current.thread_id, current.first_position,
                             current.last_position)
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
      and exists (select from emem.records as r where r.record_id = q.record_id)
      and not exists (select from emem.record_vectors as v where v.space_id = q.space_id and v.record_id = q.record_id);
    select pg_catalog.count(*) into windows
    from emem.windows as w
    where w.space_id = _vector_coverage.space_id and w.embedding is not null
      and (lanes is null or w.lane_name = any (lanes));
    select pg_catalog.count(*) into windows_missing
    from (select q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position
          from emem.embedding_queue as q
          where q.space_id = _vector_coverage.space_id and q.record_id is null
            and (lanes is null or q.lane_name = any (lanes))
            and not exists (select from emem.windows as w
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
begin
    if threshold <= 0 or not exists (
        select from emem.embedding_queue as q
        where q.space_id = _coverage_below.space_id and (lanes is null or q.lane_name = any (lanes))
          and case when q.record_id is not null then
                  (select v.record_id from emem.record_vectors as v
                   where v.space_id = q.space_id and v.record_id = q.record_id) is null
                  and (select r.record_id from emem.records as r where r.record_id = q.record_id) is not null
              else
                  (select w.window_id from emem.windows as w
                   where w.space_id = q.space_id and w.embedding is not null
                     and (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                       = (q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position)) is null
              end) then
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
from emem_db.entry import backend
from emem_db.settings import SettingError, acting_role_values, coverage_threshold
state = backend(GD, plpy, "0.2.0")
try:
    return coverage_threshold(acting_role_values(state))
except SettingError as error:
    state.fail(str(error))
$$;
comment on function emem._vector_coverage_threshold() is
  'The emem.vector_coverage_threshold the acting role''s finds and health run under (default 1: every vector).';

-- ---- the triggers that keep the queue -----------------------------------------------------------

-- New records, in every space (a vector written with them removes the entry again at once).
create function emem._queue_new_records() returns trigger
language plpgsql
security definer  -- the queue is written for every lane
set search_path = pg_catalog, pg_temp
as $$
begin
    insert into emem.embedding_queue (space_id, lane_name, record_id)
    select s.space_id, n.lane_name, n.record_id
    from new_records as n cross join emem.embedding_spaces as s
    where not exists (select from emem.record_vectors as v where v.space_id = s.space_id and v.record_id = n.record_id)
    order by s.space_id, n.record_id
    on conflict do nothing;
    return null;
end
$$;
create trigger records_queue_new after insert on emem.records
    referencing new table as new_records for each statement execute function emem._queue_new_records();

-- Edited records: queued again (waiting for a worker that holds the entry), windows holding them
-- lose their vectors, then their own vectors go. Queued work follows a record to another lane.
create function emem._queue_edited_records() returns trigger
language plpgsql
security definer  -- the queue, vectors and windows of every lane follow their records
set search_path = pg_catalog, pg_temp
as $$
declare
    edited bigint[];
begin
    update emem.embedding_queue as q set lane_name = a.lane_name
    from records_after as a join records_before as b on b.record_id = a.record_id
    where q.record_id = a.record_id and a.lane_name is distinct from b.lane_name;
    edited := array(select a.record_id from records_after as a join records_before as b on b.record_id = a.record_id
                    where a.content is distinct from b.content order by a.record_id);
    if pg_catalog.cardinality(edited) = 0 then
        return null;
    end if;
    -- A fresh queue_id: a worker that claimed the entry before the edit cannot store for it.
    insert into emem.embedding_queue as q (space_id, lane_name, record_id)
    select s.space_id, r.lane_name, r.record_id
    from emem.records as r cross join emem.embedding_spaces as s
    where r.record_id = any (edited)
    order by s.space_id, r.record_id
    on conflict (space_id, record_id) where record_id is not null do update
        set queue_id = pg_catalog.nextval('emem.embedding_queue_queue_id_seq'), lane_name = excluded.lane_name,
            queued_at = excluded.queued_at, attempts = 0, not_before = null, last_error = null;
    insert into emem.embedding_queue as q (space_id, lane_name, thread_kind, thread_id, first_position, last_position)
    select s.space_id, run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position
    from emem._runs_holding(edited) as run cross join emem.embedding_spaces as s
    order by run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position, s.space_id
    on conflict (lane_name, thread_kind, thread_id, first_position, last_position, space_id) where record_id is null
    do update set queue_id = pg_catalog.nextval('emem.embedding_queue_queue_id_seq'), queued_at = excluded.queued_at,
                  attempts = 0, not_before = null, last_error = null;
    update emem.windows as w set embedding = null
    from emem._runs_holding(edited) as run
    where (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position)
      and w.embedding is not null;
    delete from emem.record_vectors as v where v.record_id = any (edited);
    return null;
end
$$;
create trigger records_queue_edits after update on emem.records
    referencing old table as records_before new table as records_after
    for each statement execute function emem._queue_edited_records();

-- A new space lacks everything. Writers of records and windows wait meanwhile (and it waits for
-- those under way), so that no record or window falls between the fill and their own triggers.
create function emem._queue_new_space() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    lock table emem.records, emem.windows in share mode;
    perform emem._queue_missing(new.space_id, null);
    return null;
end
$$;
create trigger embedding_spaces_queue_new after insert on emem.embedding_spaces
    for each row execute function emem._queue_new_space();

-- Vectors written: their entries are done (an entry a worker holds is left to it).
create function emem._dequeue_written_vectors() returns trigger
language plpgsql
security definer  -- the queue is written for every lane
set search_path = pg_catalog, pg_temp
as $$
begin
    delete from emem.embedding_queue as q
    where q.queue_id in (select e.queue_id from emem.embedding_queue as e
                         join written_vectors as w on w.space_id = e.space_id and w.record_id = e.record_id
                         for update of e skip locked);
    return null;
end
$$;
create trigger record_vectors_dequeue after insert on emem.record_vectors
    referencing new table as written_vectors for each statement execute function emem._dequeue_written_vectors();

-- Vectors removed other than with their record or space (say by a DBA): queued again.
create function emem._queue_removed_vectors() returns trigger
language plpgsql
security definer  -- the queue is written for every lane
set search_path = pg_catalog, pg_temp
as $$
begin
    insert into emem.embedding_queue (space_id, lane_name, record_id)
    select d.space_id, r.lane_name, d.record_id
    from removed_vectors as d join emem.records as r on r.record_id = d.record_id
    where exists (select from emem.embedding_spaces as s where s.space_id = d.space_id)
      and not exists (select from emem.record_vectors as v where v.space_id = d.space_id and v.record_id = d.record_id)
    order by d.space_id, d.record_id
    on conflict do nothing;
    return null;
end
$$;
create trigger record_vectors_queue_removed after delete on emem.record_vectors
    referencing old table as removed_vectors for each statement execute function emem._queue_removed_vectors();

-- Windows written or changed: each run is done in the spaces that now hold a current window for
-- it, and queued in those that do not (a run written in one space is wanted in all).
create function emem._queue_window_runs() returns trigger
language plpgsql
security definer  -- the queue is written for every lane
set search_path = pg_catalog, pg_temp
as $$
begin
    delete from emem.embedding_queue as q
    where q.queue_id in (
        select e.queue_id
        from (select distinct c.lane_name, c.thread_kind, c.thread_id, c.first_position, c.last_position
              from changed_windows as c) as run
        join emem.embedding_queue as e
          on e.record_id is null and (e.lane_name, e.thread_kind, e.thread_id, e.first_position, e.last_position)
                                     = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position)
        where exists (select from emem.windows as w
                      where w.space_id = e.space_id and w.embedding is not null
                        and (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                          = (e.lane_name, e.thread_kind, e.thread_id, e.first_position, e.last_position))
        for update of e skip locked);
    insert into emem.embedding_queue (space_id, lane_name, thread_kind, thread_id, first_position, last_position)
    select s.space_id, run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position
    from (select distinct c.lane_name, c.thread_kind, c.thread_id, c.first_position, c.last_position
          from changed_windows as c) as run
    cross join emem.embedding_spaces as s
    where not exists (select from emem.windows as w
                      where w.space_id = s.space_id and w.embedding is not null
                        and (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position))
    order by run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position, s.space_id
    on conflict do nothing;
    return null;
end
$$;
create trigger windows_queue_written after insert on emem.windows
    referencing new table as changed_windows for each statement execute function emem._queue_window_runs();
create trigger windows_queue_changed after update on emem.windows
    referencing new table as changed_windows for each statement execute function emem._queue_window_runs();

-- Windows removed: a run no window remembers any more leaves the queue; one still known elsewhere
-- is queued where it now lacks a window.
create function emem._queue_removed_windows() returns trigger
language plpgsql
security definer  -- the queue is written for every lane
set search_path = pg_catalog, pg_temp
as $$
begin
    delete from emem.embedding_queue as q
    using (select distinct r.lane_name, r.thread_kind, r.thread_id, r.first_position, r.last_position
           from removed_windows as r) as run
    where q.record_id is null
      and (q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position)
          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position)
      and not exists (select from emem.windows as w
                      where (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position));
    insert into emem.embedding_queue (space_id, lane_name, thread_kind, thread_id, first_position, last_position)
    select s.space_id, run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position
    from (select distinct r.lane_name, r.thread_kind, r.thread_id, r.first_position, r.last_position
          from removed_windows as r) as run
    cross join emem.embedding_spaces as s
    where exists (select from emem.windows as w
                  where (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                      = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position))
      and not exists (select from emem.windows as w
                      where w.space_id = s.space_id and w.embedding is not null
                        and (w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position)
                          = (run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position))
    order by run.lane_name, run.thread_kind, run.thread_id, run.first_position, run.last_position, s.space_id
    on conflict do nothing;
    return null;
end
$$;
create trigger windows_queue_removed after delete on emem.windows
    referencing old table as removed_windows for each statement execute function emem._queue_removed_windows();

-- Row-level security: an agent sees the queued work of the lanes it reads.
create policy readable_lane on emem.embedding_queue for select
    using (lane_name in (select emem.readable_lanes()));

-- Work from an earlier release: every space's missing vectors, queued once (nothing on a fresh install).
select emem._queue_missing(s.space_id, null) from emem.embedding_spaces as s;

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
            not exists (select from emem.records as r where r.record_id = q.record_id)
            or exists (select from emem.record_vectors as v where v.space_id = q.space_id and v.record_id = q.record_id)
        else
            exists (select from emem.windows as w
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
        claimed := array(
            select q.queue_id from emem.embedding_queue as q
            where q.space_id = space.space_id and (lanes is null or q.lane_name = any (lanes))
              and (q.not_before is null or q.not_before <= pg_catalog.clock_timestamp())
            order by q.queue_id
            limit batch_size
            for update skip locked);
        exit when pg_catalog.cardinality(claimed) = 0 or emem._drop_done_entries(claimed) > 0;
    end loop;
    return query
    select q.queue_id, q.record_id, null::bigint[], array[r.content], q.attempts
    from emem.embedding_queue as q join emem.records as r on r.record_id = q.record_id
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
    problem record;
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
    held := array(select q.queue_id from emem.embedding_queue as q
                  where q.queue_id = any (queue_ids) and (lanes is null or q.lane_name = any (lanes))
                  order by q.queue_id
                  for update);
    select given.queue_id, public.vector_dims(given.embedding) as dimensions, public.vector_norm(given.embedding) as norm,
           s.space_id, s.model_name, s.dimension
    into problem
    from rows from (pg_catalog.unnest(queue_ids), pg_catalog.unnest(embeddings)) as given (queue_id, embedding)
    join emem.embedding_queue as q on q.queue_id = given.queue_id
    join emem.embedding_spaces as s on s.space_id = q.space_id
    where given.queue_id = any (held)
      and (public.vector_dims(given.embedding) <> s.dimension or public.vector_norm(given.embedding) = 0)
    order by given.queue_id limit 1;
    if found and problem.dimensions <> problem.dimension then
        raise exception 'the vector for queue entry % has % dimensions but embedding space % (%) has %',
            problem.queue_id, problem.dimensions, problem.space_id, problem.model_name, problem.dimension
            using errcode = '22023';
    elsif found then
        raise exception 'the vector for queue entry % is the zero vector, which has no cosine distance', problem.queue_id
            using errcode = '22023';
    end if;
    insert into emem.record_vectors as rv (space_id, record_id, embedding)
    select q.space_id, q.record_id, public.l2_normalize(given.embedding)
    from rows from (pg_catalog.unnest(queue_ids), pg_catalog.unnest(embeddings)) as given (queue_id, embedding)
    join emem.embedding_queue as q on q.queue_id = given.queue_id
    where given.queue_id = any (held) and q.record_id is not null
      and exists (select from emem.records as r where r.record_id = q.record_id)
    order by q.space_id, q.record_id
    on conflict on constraint record_vectors_pkey do update set embedding = excluded.embedding;
    with written as (
        insert into emem.windows as w (space_id, lane_name, thread_kind, thread_id, first_position, last_position, embedding)
        select q.space_id, q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position,
               public.l2_normalize(given.embedding)
        from rows from (pg_catalog.unnest(queue_ids), pg_catalog.unnest(embeddings)) as given (queue_id, embedding)
        join emem.embedding_queue as q on q.queue_id = given.queue_id
        where given.queue_id = any (held) and q.record_id is null
        order by q.lane_name, q.thread_kind, q.thread_id, q.first_position, q.last_position, q.space_id
        on conflict on constraint one_window_per_run do update set embedding = excluded.embedding
        returning w.window_id, w.lane_name, w.thread_kind, w.thread_id, w.first_position, w.last_position
    )
    insert into emem.window_members (window_id, record_id)
    select written.window_id, r.record_id
    from written join emem.records as r
      on r.lane_name = written.lane_name and r.kind = written.thread_kind and r.thread_id = written.thread_id
     and r.thread_position between written.first_position and written.last_position
    on conflict do nothing;
    -- The triggers of the writes above took most of them off already.
    delete from emem.embedding_queue as q where q.queue_id = any (held);
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
-- e_gather_find: four lookups (tags and edge properties, full text, record vectors, window
-- vectors) interleaved 40:35:20:5 into one ranked list; pages are cut from it before the
-- records of lanes the caller cannot read are removed.
--
-- The lookups must see every lane (the page rule counts all of them), so the public functions
-- run as the extension's owner (SECURITY DEFINER) and act for the session's role
-- (emem._acting_role()): its agent profile, never a claim, decides which rows it gets.

create function emem._gather(
    question text, question_vector public.vector, page integer, page_size integer, explain boolean,
    model_name text, model_fingerprint text
) returns jsonb
language plpython3u volatile
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
from emem_db.find import Declaration, Gather, envelope_json
gather = Gather(backend(GD, plpy, "0.2.0"))
run = gather.explain if explain else gather.find
return envelope_json(run(question, question_vector, page, page_size, Declaration(model_name, model_fingerprint)))
$$;
comment on function emem._gather(text, public.vector, integer, integer, boolean, text, text) is
  'The pipeline behind e_gather_find_envelope (explain => false) and e_gather_explain (explain => true), for the acting role.';

-- PL/Python reports its errors as "plpy.Error: <message>" with a Python traceback; the public
-- functions re-raise them as a DBA expects: the message, its SQLSTATE, detail and hint.
create function emem._raise_plainly(state text, message text, detail text, hint text) returns void
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
comment on function emem._raise_plainly(text, text, text, text) is
  'Raises an error with the given SQLSTATE, message (without PL/Python''s exception prefix), detail and hint.';

create function emem._gather_plainly(
    question text, question_vector public.vector, page integer, page_size integer, explain boolean,
    model_name text, model_fingerprint text
) returns jsonb
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    state text; message text; detail text; hint text;
begin
    return emem._gather(question, question_vector, page, page_size, explain, model_name, model_fingerprint);
exception when others then
    get stacked diagnostics state = returned_sqlstate, message = message_text, detail = pg_exception_detail,
                            hint = pg_exception_hint;
    perform emem._raise_plainly(state, message, detail, hint);
end
$$;
comment on function emem._gather_plainly(text, public.vector, integer, integer, boolean, text, text) is
  'emem._gather with its errors re-raised plainly.';

create function emem.e_gather_find_envelope(
    question text, question_vector public.vector default null, page integer default 1, page_size integer default 30,
    model_name text default null, model_fingerprint text default null
) returns jsonb
language sql volatile
security definer  -- reads every lane: the page is cut before the lane filter; rows keep to the caller's lanes
set search_path = pg_catalog, pg_temp
as $$ select emem._gather_plainly(question, question_vector, page, page_size, false, model_name, model_fingerprint) $$;
comment on function emem.e_gather_find_envelope(text, public.vector, integer, integer, text, text) is
  'e_gather_find as one JSON object: page, page_size, total_pages, total_candidates, degraded, degraded_reason, pipeline_profile, lane_isolation, lookups and rows; the totals arrive even when every row of the page lies outside the caller''s lanes.';

create function emem.e_gather_find(
    question text, question_vector public.vector default null, page integer default 1, page_size integer default 30,
    model_name text default null, model_fingerprint text default null
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
        emem.e_gather_find_envelope(question, question_vector, page, page_size, model_name, model_fingerprint) -> 'rows') as r (
        rank integer, record_id bigint, kind text, lane text, content text, tags text[],
        distance double precision, distance_kind text, placed_by text, found_by text[], windows bigint[])
$$;
comment on function emem.e_gather_find(text, public.vector, integer, integer, text, text) is
  'Answers a question (at most 10000 characters) with four lookups at once (tags and edge properties, full text, record vectors, window vectors) interleaved 40:35:20:5 into one ranked list; returns one page (page 1 to 100000, page_size 1 to 1000, default 30). question_vector NULL means embeddings are unavailable: the exact lookups answer alone, with placeholder distances. model_name and model_fingerprint declare the model the vector was made with: a vector of another model than the active space''s is not used (degraded, declaration_mismatch).';

create function emem.e_gather_explain(
    question text, question_vector public.vector default null, page integer default 1, page_size integer default 30,
    model_name text default null, model_fingerprint text default null
) returns jsonb
language sql volatile
security definer  -- reads every lane, as e_gather_find does; tells an agent only of its own lanes
set search_path = pg_catalog, pg_temp
as $$ select emem._gather_plainly(question, question_vector, page, page_size, true, model_name, model_fingerprint) $$;
comment on function emem.e_gather_explain(text, public.vector, integer, integer, text, text) is
  'How e_gather_find reads the question (terms, words WordNet knows, full-text terms), the pipeline profile, each lookup''s candidate count and time, and for each row of the page its rank in every lookup''s list. For the extension''s owner; an agent sees the analysis and the ranks of its own rows only.';

create function emem.lookup_registry() returns table (
    name text, label text, default_weight double precision, tie_order integer, needs_vector boolean,
    in_seed_profile boolean, description text
)
language plpython3u immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
from emem_db.registry import LOOKUPS
backend(GD, plpy, "0.2.0")
return [(lookup.name, lookup.label, lookup.default_weight, order, lookup.needs_vector, lookup.in_seed_profile,
         lookup.description) for order, lookup in enumerate(LOOKUPS, start=1)]
$$;
comment on function emem.lookup_registry() is
  'The lookups emem.pipeline_profile may name, in the merge''s tie order: name, the label clients show, default weight, whether it needs a question vector, whether the seed''s profile runs it, and what it matches.';
-- Reads for the acting role: only the records of the lanes its agent profile reads (a role
-- bound to no profile is refused). They run as the extension's owner and filter by lane
-- themselves, so that they refuse instead of silently answering nothing.

create view emem.record_summaries with (security_invoker = true) as
    select r.record_id, r.kind, r.lane_name as lane, r.content,
           array(select t.tag from emem.record_tags as t where t.record_id = r.record_id order by t.tag) as tags,
           r.authority, r.occurred_at, r.created_at, r.thread_id, r.thread_position, r.metadata
    from emem.records as r;
comment on view emem.record_summaries is 'Records with their tags, as the caller may read them.';

create function emem.records_with_all_tags(tags text[]) returns setof emem.record_summaries
language sql stable
security definer  -- filters by the acting role's lanes (emem._readable_lanes_or_refuse)
set search_path = pg_catalog, pg_temp
as $$
    with wanted as (select emem._check_tags(tags) as tags, emem._readable_lanes_or_refuse() as lanes)
    select s.*
    from emem.record_summaries as s, wanted
    where (wanted.lanes is null or s.lane operator(pg_catalog.=) any (wanted.lanes))
      and s.record_id in (
        select rt.record_id
        from emem.record_tags as rt, wanted
        where rt.tag operator(pg_catalog.=) any (wanted.tags)
        group by rt.record_id
        having pg_catalog.count(*) = (select pg_catalog.cardinality(wanted.tags) from wanted))
    order by s.record_id
$$;
comment on function emem.records_with_all_tags(text[]) is
  'Label intersection: every record (in the caller''s lanes) carrying all of the given tags (1 to 1000), nothing else.';

create function emem.e_timeline(
    from_time timestamptz, to_time timestamptz default null, page integer default 1, page_size integer default 30,
    kinds text[] default null, tags text[] default null
) returns setof emem.record_summaries
language plpgsql stable
security definer  -- filters by the acting role's lanes (emem._readable_lanes_or_refuse)
set search_path = pg_catalog, pg_temp
as $$
declare
    lanes text[] := emem._readable_lanes_or_refuse();
    wanted_tags text[];
    wanted_kinds emem.record_kind[];
begin
    to_time := coalesce(to_time, 'infinity');
    if from_time is null or from_time > to_time then
        raise exception 'the timeline needs from_time <= to_time, got % and %',
            coalesce(from_time::text, 'NULL'), to_time using errcode = '22023',
            hint = 'to_time may be NULL: no upper bound.';
    end if;
    if page is null or page not between 1 and 100000 then
        raise exception 'page % is out of range', coalesce(page::text, 'NULL')
            using errcode = '22023', hint = 'Accepted: 1 to 100000.';
    end if;
    if page_size is null or page_size not between 1 and 1000 then
        raise exception 'page_size % is out of range', coalesce(page_size::text, 'NULL')
            using errcode = '22023', hint = 'Accepted: 1 to 1000.';
    end if;
    if kinds is not null and (pg_catalog.cardinality(kinds) > 100
       or not kinds <@ pg_catalog.enum_range(null::emem.record_kind)::text[]) then
        raise exception 'kinds holds an unknown kind' using errcode = '22023',
            hint = 'Accepted kinds: ' || pg_catalog.array_to_string(pg_catalog.enum_range(null::emem.record_kind), ', ') || '.';
    end if;
    wanted_kinds := kinds::emem.record_kind[];
    wanted_tags := case when e_timeline.tags is not null then emem._check_tags(e_timeline.tags) end;
    return query
        select s.*
        from emem.record_summaries as s
        where s.occurred_at between from_time and to_time
          and (lanes is null or s.lane = any (lanes))
          and (wanted_kinds is null or s.kind = any (wanted_kinds))
          and (wanted_tags is null or s.tags @> wanted_tags)
        order by s.occurred_at, s.record_id
        limit page_size offset (page - 1) * page_size;
end
$$;
comment on function emem.e_timeline(timestamptz, timestamptz, integer, integer, text[], text[]) is
  'Records by date (occurred_at, then id) between from_time and to_time inclusive (NULL: no upper bound), in the caller''s lanes; optional filters: kinds, tags (all of them).';
-- Health: does the embedding gateway's declared model match the active space and its vectors,
-- and does every record and window have a current vector there? Degraded is not an outage:
-- e_gather_find answers from the exact lookups meanwhile.
--
-- Agents call it too: the coverage it reports counts the lanes the caller reads (the extension's
-- owner: every lane), so that an agent learns nothing of other lanes' sizes.

create function emem.e_health(
    model_name text, dimension integer, fingerprint text default null
) returns jsonb
language plpgsql stable
security definer  -- counts the coverage of the acting role's readable lanes only
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces;
    reasons text[] := '{}';
    stored_dimensions integer[];
    lanes text[] := emem._lanes_of(emem._acting_role(), false);
    coverage jsonb;
    threshold double precision := emem._vector_coverage_threshold();
begin
    if pg_catalog.length(model_name) > 200 or pg_catalog.length(fingerprint) > 200 then
        raise exception 'model_name and fingerprint must be at most 200 characters' using errcode = '22023';
    end if;
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
              where rv.space_id = space.space_id
                and (lanes is null or exists (select from emem.records as r
                                              where r.record_id = rv.record_id and r.lane_name = any (lanes)))
              limit 1000) as sample;
        if stored_dimensions is not null and stored_dimensions <> array[space.dimension] then
            reasons := pg_catalog.array_append(reasons, 'stored_vectors_mismatch');
        end if;
        coverage := emem._vector_coverage(space.space_id, lanes) || pg_catalog.jsonb_build_object(
            'lanes', case when lanes is null then 'all' else 'readable' end, 'threshold', threshold);
        if (coverage->>'share')::float8 < threshold then
            reasons := pg_catalog.array_append(reasons, 'vectors_incomplete');
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
        'stored_vector_dimensions', pg_catalog.to_jsonb(stored_dimensions),
        'coverage', coverage);
end
$$;
comment on function emem.e_health(text, integer, text) is
  'ok or degraded, with reasons (declaration_unreadable, no_active_space, model_mismatch, dimension_mismatch, fingerprint_mismatch, stored_vectors_mismatch, vectors_incomplete), for the model the embedding gateway declares (NULLs: it could not be read); coverage: the active space''s records and windows with a current vector, in the lanes the caller reads, degraded below emem.vector_coverage_threshold.';
-- Who may do what. Agents (any role) call the API below; it acts for them within their lanes.
-- They read the tables directly under row-level security, and write nothing directly (no
-- chosen record ids, no rows around the API's checks). Setting up lanes, profiles, bindings
-- and embedding spaces is for the extension's owner. Everything else is private.

revoke all on all tables in schema emem from public;
revoke all on all sequences in schema emem from public;
revoke all on all functions in schema emem from public;
grant usage on schema emem to public;
grant select on all tables in schema emem to public;
revoke select on emem.tag_vocabulary from public;

grant execute on function
    emem.e_gather_find(text, public.vector, integer, integer, text, text),
    emem.e_gather_find_envelope(text, public.vector, integer, integer, text, text),
    emem.e_gather_explain(text, public.vector, integer, integer, text, text),
    emem.e_timeline(timestamptz, timestamptz, integer, integer, text[], text[]),
    emem.records_with_all_tags(text[]),
    emem.e_health(text, integer, text),
    emem.analyse_question(text),
    emem.lookup_registry(),
    emem.readable_lanes(),
    emem.put_records(jsonb, integer),
    emem.put_record(text, text, text, text[], real, timestamptz, text, integer, jsonb, text),
    emem.tag_record(bigint, text[]),
    emem.untag_record(bigint, text[]),
    emem.link_records(bigint, bigint, text, jsonb),
    emem.put_record_vector(bigint, public.vector, integer),
    emem.put_window(bigint[], public.vector, integer),
    emem.embedding_coverage(integer),
    emem.queue_missing_embeddings(integer),
    emem.claim_embeddings(integer, integer),
    emem.store_embeddings(bigint[], public.vector[]),
    emem.defer_embeddings(bigint[], text, double precision)
to public;
