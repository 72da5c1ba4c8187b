-- The names and kinds every table and function shares, each defined once.

create domain emem.object_name as text
    constraint object_name_format check (value ~ '^[a-z0-9][a-z0-9_.:-]{0,62}$');
comment on domain emem.object_name is
  'A lane or agent profile name: 1 to 63 characters, lower-case letters, digits and _ . : -, starting with a letter or digit.';

create type emem.record_kind as enum ('note', 'conversation', 'file', 'entity');
comment on type emem.record_kind is
  'What a record is: a note, one turn of a conversation, one chunk of a file, or an entity.';

-- Conversation turns and file chunks belong to a thread (the conversation or file) at a position.
-- Neither a SET clause nor STRICT, so that it is inlined into the records' check (run for every
-- row written): PostgreSQL inlines no strict function whose body compares with = ANY, and a NULL
-- kind gives NULL either way. Every name in it is qualified.
create function emem._has_thread(kind emem.record_kind) returns boolean
language sql immutable parallel safe
as $$ select kind operator(pg_catalog.=) any (array['conversation', 'file']::emem.record_kind[]) $$;
comment on function emem._has_thread(emem.record_kind) is
  'Whether records of this kind belong to a thread (conversation, file).';

-- Text in Unicode's composed form (NFC), as tags and the records' search terms are kept. Most text
-- is NFC already: the quick check answers that without rebuilding the text, as normalize() does
-- (about 5 us a record of the benchmark's corpus against 1.4). Neither a SET clause nor STRICT, so
-- that it is inlined (a strict function whose body holds a CASE is not); every name is qualified.
create function emem._nfc(value text) returns text
language sql immutable parallel safe
as $$
    select case when pg_catalog.is_normalized(value, 'NFC') then value else pg_catalog.normalize(value, 'NFC') end
$$;
comment on function emem._nfc(text) is 'The text in Unicode''s composed form (NFC).';

-- A run of thread positions in a lane: what a window is made from, and what the embedding queue
-- holds for a window.
create type emem._window_run as (
    lane_name text, thread_kind emem.record_kind, thread_id text, first_position integer, last_position integer);
comment on type emem._window_run is 'A run of consecutive positions of one thread (conversation or file) in a lane.';

-- One item of put_records as read from its JSON (emem._read_items): its number, what is wrong with
-- it (NULL when nothing is), and its values before any cast. Not its vector (4 kB of text): the
-- vectors are parsed from the JSON apart, where every statement that reads the items would pass
-- them too (2 ms a statement for 1,000 items).
create type emem._record_item as (
    item_number integer, problem text, kind text, content text, lane text, tags jsonb, authority text,
    occurred_at text, thread_id text, thread_position text, metadata jsonb, source_key text);
comment on type emem._record_item is 'One item of emem.put_records as read from its JSON, before any cast (its vector apart).';
