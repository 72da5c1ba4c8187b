-- emem @EXTVERSION@: built by the Makefile from the numbered files in sql/.
\echo Use "CREATE EXTENSION emem CASCADE" to load this file. \quit

-- Every name below is qualified: nothing in the caller's search_path can stand in for it.
set local search_path = pg_catalog, pg_temp;

-- Function bodies pin search_path to pg_catalog and name pgvector's objects with its schema.
do $$
begin
    if (select e.extnamespace::pg_catalog.regnamespace::pg_catalog.text from pg_catalog.pg_extension as e where e.extname = 'vector')
       is distinct from 'public' then
        raise exception 'emem needs pgvector installed in schema public'
            using hint = 'CREATE EXTENSION vector SCHEMA public; then CREATE EXTENSION emem.';
    end if;
end
$$;

