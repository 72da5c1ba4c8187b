-- emem 0.2.0 -> 0.2.1 (ALTER EXTENSION emem UPDATE): the steps of this upgrade, which the Makefile
-- (make upgrade-script) follows with 0.2.1's code (sql/20_* to sql/90_*) exactly as a fresh
-- install creates it, into sql/emem--0.2.0--0.2.1.sql.
--
-- 0.2.1: an edge whose end ids an UPDATE changes gets its labels' lanes again (0.2.0's trigger
-- fired only on the lane columns an UPDATE names, so such labels kept the old ends' lanes and a
-- strict agent could find the edge through them): every label is written again from its edge
-- here. Edge labels carry their edge's ends, and two derived tables, a vocabulary of labels and
-- each label's distinct ends, let a find read a label's ends without reading its edges.

\echo Use "ALTER EXTENSION emem UPDATE" to load this file. \quit

set local search_path = pg_catalog, pg_temp;

-- ---- the old code goes (policies and triggers use functions; functions return the view's rows) ----------
drop policy own_profile on emem.agent_profiles;
drop policy readable_edge on emem.edge_labels;
drop policy readable_endpoints on emem.edges;
drop policy readable_lane on emem.embedding_queue;
drop policy readable_lane on emem.lanes;
drop policy own_profile_lanes on emem.profile_lanes;
drop policy readable_lane on emem.record_tags;
drop policy readable_record on emem.record_vectors;
drop policy readable_lane on emem.records;
drop policy own_binding on emem.role_profiles;
drop policy readable_window on emem.window_members;
drop policy readable_lane on emem.windows;
drop trigger agent_profiles_delete_dependents on emem.agent_profiles;
drop trigger edges_lanes on emem.edges;
drop trigger edges_refresh_labels on emem.edges;
drop trigger embedding_spaces_create_indexes on emem.embedding_spaces;
drop trigger embedding_spaces_delete_dependents on emem.embedding_spaces;
drop trigger embedding_spaces_queue_new on emem.embedding_spaces;
drop trigger lanes_delete_dependents on emem.lanes;
drop trigger record_tags_count_added on emem.record_tags;
drop trigger record_tags_count_changed on emem.record_tags;
drop trigger record_tags_count_removed on emem.record_tags;
drop trigger record_tags_truncated on emem.record_tags;
drop trigger record_vectors_dequeue on emem.record_vectors;
drop trigger record_vectors_queue_removed on emem.record_vectors;
drop trigger records_delete_dependents on emem.records;
drop trigger records_move_tags on emem.records;
drop trigger records_queue_edits on emem.records;
drop trigger records_queue_new on emem.records;
drop trigger windows_delete_dependents on emem.windows;
drop trigger windows_queue_changed on emem.windows;
drop trigger windows_queue_removed on emem.windows;
drop trigger windows_queue_written on emem.windows;
drop function emem._acting_role();
drop function emem._check_lanes(what text, profile_name text, lanes text[]);
drop function emem._check_name(what text, name text);
drop function emem._check_setting(setting text, value text);
drop function emem._check_space_id(space_id integer);
drop function emem._check_tags(tags text[]);
drop function emem._check_vector(embedding public.vector, space emem.embedding_spaces, what text);
drop function emem._count_tags();
drop function emem._coverage_below(space_id integer, lanes text[], threshold double precision);
drop function emem._create_space_indexes();
drop function emem._delete_dependents();
drop function emem._dequeue_written_vectors();
drop function emem._drop_done_entries(queue_ids bigint[]);
drop function emem._edge_lanes();
drop function emem._embedding_lanes();
drop function emem._first_uncastable(items jsonb, field text, as_type text);
drop function emem._forget_tag_counts();
drop function emem._gather(question text, question_vector public.vector, page integer, page_size integer, explain boolean, model_name text, model_fingerprint text);
drop function emem._gather_plainly(question text, question_vector public.vector, page integer, page_size integer, explain boolean, model_name text, model_fingerprint text);
drop function emem._is_blank(value text);
drop function emem._item_problem(item jsonb, writable text[]);
drop function emem._lanes_of(role regrole, writing boolean);
drop function emem._move_tags_with_records();
drop function emem._normal_tag(tag text);
drop function emem._queue_edited_records();
drop function emem._queue_missing(space_id integer, lanes text[]);
drop function emem._queue_new_records();
drop function emem._queue_new_space();
drop function emem._queue_removed_vectors();
drop function emem._queue_removed_windows();
drop function emem._queue_window_runs();
drop function emem._raise_plainly(state text, message text, detail text, hint text);
drop function emem._readable_lanes_or_refuse();
drop function emem._reads_everything(role regrole);
drop function emem._refresh_edge_labels();
drop function emem._require_record(record_id bigint, what text, writing boolean);
drop function emem._resolve_space(space_id integer);
drop function emem._role_named(role_name name);
drop function emem._runs_holding(record_ids bigint[]);
drop function emem._vector_coverage(space_id integer, lanes text[]);
drop function emem._vector_coverage_threshold();
drop function emem.activate_embedding_space(space_id integer, force boolean);
drop function emem.bind_role(role_name name, profile_name text);
drop function emem.claim_embeddings(space_id integer, batch_size integer);
drop function emem.create_agent_profile(profile_name text, lanes text[], write_lanes text[]);
drop function emem.create_embedding_space(model_name text, dimension integer, fingerprint text, activate boolean);
drop function emem.create_lane(lane_name text);
drop function emem.defer_embeddings(queue_ids bigint[], reason text, retry_after double precision);
drop function emem.e_gather_explain(question text, question_vector public.vector, page integer, page_size integer, model_name text, model_fingerprint text);
drop function emem.e_gather_find(question text, question_vector public.vector, page integer, page_size integer, model_name text, model_fingerprint text);
drop function emem.e_gather_find_envelope(question text, question_vector public.vector, page integer, page_size integer, model_name text, model_fingerprint text);
drop function emem.e_health(model_name text, dimension integer, fingerprint text);
drop function emem.e_timeline(from_time timestamp with time zone, to_time timestamp with time zone, page integer, page_size integer, kinds text[], tags text[]);
drop function emem.embedding_coverage(space_id integer);
drop function emem.link_records(from_record_id bigint, to_record_id bigint, relation text, properties jsonb);
drop function emem.lookup_registry();
drop function emem.put_record(kind text, content text, lane text, tags text[], authority real, occurred_at timestamp with time zone, thread_id text, thread_position integer, metadata jsonb, source_key text);
drop function emem.put_record_vector(record_id bigint, embedding public.vector, space_id integer);
drop function emem.put_records(items jsonb, space_id integer);
drop function emem.put_window(member_record_ids bigint[], embedding public.vector, space_id integer);
drop function emem.queue_missing_embeddings(space_id integer);
drop function emem.readable_lanes();
drop function emem.records_with_all_tags(tags text[]);
drop function emem.set_agent_setting(profile_name text, setting text, value text);
drop function emem.store_embeddings(queue_ids bigint[], embeddings public.vector[]);
drop function emem.tag_record(record_id bigint, tags text[]);
drop function emem.untag_record(record_id bigint, tags text[]);
drop view emem.record_summaries;

-- ---- the analysis functions in PL/Python name the release their modules must be -------------
create or replace function emem._label_terms(label text) returns text[]
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
return backend(GD, plpy, "@EXTVERSION@").label_terms(label)
$$;
create or replace function emem._label_namespace_terms(label text) returns text[]
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
return backend(GD, plpy, "@EXTVERSION@").namespace_terms(label)
$$;
create or replace function emem.analyse_question(question text) returns jsonb
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
import json
from emem_db.entry import backend
analysis = backend(GD, plpy, "@EXTVERSION@").analyse(question)
return json.dumps({"terms": analysis.terms, "known_words": analysis.known_words,
                   "unknown_terms": analysis.unknown_terms, "stop_words": analysis.stop_words})
$$;

-- ---- edge labels carry their edge's ends (and its lanes again, where an UPDATE of an end id left
-- the old end's); every label's vocabulary row and distinct ends -----------------------------------
alter table emem.edge_labels add column from_record_id bigint, add column to_record_id bigint;
update emem.edge_labels as l
set from_lane_name = e.from_lane_name,
    to_lane_name = e.to_lane_name,
    lane_terms = emem._lane_qualified(array[e.from_lane_name, e.to_lane_name], l.label_terms),
    from_record_id = e.from_record_id,
    to_record_id = e.to_record_id
from emem.edges as e
where e.edge_id = l.edge_id;

create table emem.edge_label_vocabulary (
    label text not null,
    -- The lane of the edge's from end: a label new in one lane's open transaction never makes
    -- another lane's writer of the same label wait.
    lane_name text not null,
    label_terms text[] not null,
    namespace_terms text[] not null,
    primary key (label, lane_name)
);
create index edge_label_vocabulary_by_terms on emem.edge_label_vocabulary using gin (label_terms);
create table emem.edge_label_ends (
    label text not null,
    record_id bigint not null,
    edges integer not null,
    primary key (label, record_id)
);
insert into emem.edge_label_vocabulary (label, lane_name, label_terms, namespace_terms)
select distinct on (l.label, lane_name) l.label, coalesce(l.from_lane_name, '') as lane_name,
       l.label_terms, l.namespace_terms
from emem.edge_labels as l
order by l.label, lane_name;
insert into emem.edge_label_ends (label, record_id, edges)
select l.label, ends.record_id, pg_catalog.count(*)
from emem.edge_labels as l
cross join lateral (values (l.from_record_id), (l.to_record_id)) as ends (record_id)
group by l.label, ends.record_id;

-- ---- 0.2.1's code, as a fresh install creates it, follows ----------------------------------
