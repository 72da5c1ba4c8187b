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
from emem_db.find import Gather, envelope_json
state = backend(GD, plpy, "@EXTVERSION@")
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
from emem_db.find import Gather, envelope_json
state = backend(GD, plpy, "@EXTVERSION@")
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

create function emem.lookup_registry() returns table (
    name text, label text, default_weight double precision, tie_order integer, needs_vector boolean,
    in_seed_profile boolean, description text
)
language plpython3u immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
from emem_db.registry import LOOKUPS
backend(GD, plpy, "@EXTVERSION@")
return [(lookup.name, lookup.label, lookup.default_weight, order, lookup.needs_vector, lookup.in_seed_profile,
         lookup.description) for order, lookup in enumerate(LOOKUPS, start=1)]
$$;
comment on function emem.lookup_registry() is
  'The lookups emem.pipeline_profile may name, in the merge''s tie order: name, the label clients show, default weight, whether it needs a question vector, whether the seed''s profile runs it, and what it matches.';
