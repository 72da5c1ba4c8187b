-- emem 0.1.1 -> 0.2.0 (ALTER EXTENSION emem UPDATE). The PL/Python modules are reshaped (one
-- lookup registry, one candidate-list protocol): the functions name the new release and module.

\echo Use "ALTER EXTENSION emem UPDATE" to load this file. \quit

set local search_path = pg_catalog, pg_temp;

create or replace function emem.label_terms(label text) returns text[]
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
from emem_db.entry import backend
return backend(GD, plpy, "0.2.0").analyser.label_terms(label)
$$;

create or replace function emem.analyse_question(question text) returns jsonb
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
import json
from emem_db.entry import backend
analysis = backend(GD, plpy, "0.2.0").analyser.analyse(question)
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
from emem_db.find import Gather, envelope_json
state = backend(GD, plpy, "0.2.0")
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
from emem_db.find import Gather, envelope_json
state = backend(GD, plpy, "0.2.0")
return envelope_json(Gather(state).explain(caller, question, question_vector, page, page_size))
$$;
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
