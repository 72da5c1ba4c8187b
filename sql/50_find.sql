-- e_gather_find: four lookups (tags and edge properties, full text, record vectors, window
-- vectors) interleaved 40:35:20:5 into one ranked list; pages are cut from it before the
-- records of lanes the caller cannot read are removed.
--
-- The lookups must see every lane (the page rule counts all of them), so the public functions
-- run as the extension's owner (SECURITY DEFINER) and act for the session's role
-- (emem._acting_role()): its agent profile, never a claim, decides which rows it gets.

-- Without JIT: the lookups' statements are prepared once per backend, and a generic plan whose
-- estimate passes jit_above_cost compiled its expressions on every call (about 40 ms at 1M records
-- for a statement that read nothing), more than any of them runs.
create function emem._gather(
    question text, question_vector public.vector, page integer, page_size integer, explain boolean,
    model_name text, model_fingerprint text
) returns jsonb
language plpython3u volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
from @MODULE@.entry import backend
from @MODULE@.find import Declaration, Gather, envelope_json
gather = Gather(backend(GD, plpy, "@EXTVERSION@"))
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
from @MODULE@.entry import backend
from @MODULE@.registry import LOOKUPS
backend(GD, plpy, "@EXTVERSION@")
return [(lookup.name, lookup.label, lookup.default_weight, order, lookup.needs_vector, lookup.in_seed_profile,
         lookup.description) for order, lookup in enumerate(LOOKUPS, start=1)]
$$;
comment on function emem.lookup_registry() is
  'The lookups emem.pipeline_profile may name, in the merge''s tie order: name, the label clients show, default weight, whether it needs a question vector, whether the seed''s profile runs it, and what it matches.';

-- An HNSW scan with the pgvector settings it needs, for the lookups: `query` (a statement of the
-- lookups, with the question vector as $1 and the count as $2, selecting record_id, distance and
-- windows) runs with hnsw.ef_search at least `ef_search_at_least` (unless `settings` names it) and
-- the other `settings`, which are put back afterwards. The settings are SET LOCAL statements in the scan's own (sub)transaction,
-- with citus.propagate_set_commands = 'local': on a Citus cluster that is what reaches every shard
-- (set_config() and a function's SET clause reach only the coordinator; on one node the placeholder
-- setting does nothing).
create function emem._scan(
    query text, question_vector public.vector, count integer, ef_search_at_least integer, settings jsonb
) returns table (record_id bigint, distance double precision, windows bigint[])
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
    wanted jsonb := pg_catalog.jsonb_build_object('hnsw.ef_search', greatest(
        ef_search_at_least, pg_catalog.current_setting('hnsw.ef_search')::integer)::text) || settings;
    saved jsonb := '{}';
    setting record;
begin
    perform pg_catalog.set_config('citus.propagate_set_commands', 'local', true);
    for setting in select s.key, s.value from pg_catalog.jsonb_each_text(wanted) as s loop
        saved := saved || pg_catalog.jsonb_build_object(setting.key, pg_catalog.current_setting(setting.key));
        execute pg_catalog.format('set local %s = %L', setting.key, setting.value);
    end loop;
    return query execute query using question_vector, count;
    for setting in select s.key, s.value from pg_catalog.jsonb_each_text(saved) as s loop
        execute pg_catalog.format('set local %s = %L', setting.key, setting.value);
    end loop;
end
$$;
comment on function emem._scan(text, public.vector, integer, integer, jsonb) is
  'Runs one of the lookups'' HNSW scans with its pgvector settings (hnsw.ef_search at least the given value, and the others given), SET LOCAL so that a Citus cluster''s shards get them too, and puts them back.';
