-- emem @EXTVERSION@: built by the Makefile from the numbered files in sql/.
\echo Use "CREATE EXTENSION emem CASCADE" to load this file. \quit

-- Function bodies pin search_path to pg_catalog and name pgvector's objects with its schema.
do $$
begin
    if (select e.extnamespace::regnamespace::text from pg_catalog.pg_extension as e where e.extname = 'vector')
       is distinct from 'public' then
        raise exception 'emem needs pgvector installed in schema public'
            using hint = 'CREATE EXTENSION vector SCHEMA public; then CREATE EXTENSION emem.';
    end if;
end
$$;

