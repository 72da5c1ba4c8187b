-- Question and label analysis, in PL/Python (plpython/emem_db): tokens that keep codes,
-- names and figures whole; case, punctuation and WordNet lemmas normalised the same way on
-- both sides. Text longer than a question may be is refused before it reaches Python.

create function emem._label_terms(label text) returns text[]
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
from @MODULE@.entry import backend
return backend(GD, plpy, "@EXTVERSION@").label_terms(label)
$$;
comment on function emem._label_terms(text) is
  'The terms of a label (tag, relation name, property value): lower-case WordNet lemmas, a key: namespace left out, compound words as their parts, codes kept whole, stop words dropped unless the label has nothing else.';

create function emem._label_namespace_terms(label text) returns text[]
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
from @MODULE@.entry import backend
return backend(GD, plpy, "@EXTVERSION@").namespace_terms(label)
$$;
comment on function emem._label_namespace_terms(text) is
  'The terms of a label''s key: namespace (empty without one): the seed''s tags lookup asks for them in the question, the opt-in components do not.';

-- Labels analysed in one call (a PL/Python call costs about 20 us): the new labels of a batch.
create function emem._analysed_labels(labels text[])
returns table (label text, label_terms text[], namespace_terms text[])
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
from @MODULE@.entry import backend
return backend(GD, plpy, "@EXTVERSION@").analysed_labels(labels)
$$;
comment on function emem._analysed_labels(text[]) is
  'Each label with its terms and namespace terms (emem._label_terms, emem._label_namespace_terms), in one call.';

create function emem.analyse_question(question text) returns jsonb
language plpython3u immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$
import json
from @MODULE@.entry import backend
analysis = backend(GD, plpy, "@EXTVERSION@").analyse(question)
return json.dumps({"terms": analysis.terms, "known_words": analysis.known_words,
                   "unknown_terms": analysis.unknown_terms, "stop_words": analysis.stop_words})
$$;
comment on function emem.analyse_question(text) is
  'How e_gather_find reads a question (at most 10000 characters): its normalised terms (matched against labels), the words WordNet knows, the terms full text searches (unknown to WordNet, or figures), and its stop words (matched only by labels made of stop words).';

-- OR of tsqueries, for the full-text lookup's terms.
create aggregate emem._tsquery_any(tsquery) (sfunc = pg_catalog.tsquery_or, stype = tsquery);
comment on aggregate emem._tsquery_any(tsquery) is 'The OR of the given text-search queries.';
