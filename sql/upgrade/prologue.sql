-- The start of every upgrade script (the Makefile puts it first): the code of the release being
-- updated goes, found in the catalog rather than listed by hand, so that the code files recreate
-- it exactly as a fresh install does. Code is what holds no data: policies, triggers, views, and
-- the functions and aggregates that no table, index, constraint or type needs (those stay, and
-- the code files replace them).

\echo Use "ALTER EXTENSION emem UPDATE" to load this file. \quit

set local search_path = pg_catalog, pg_temp;

do $$
declare
    code record;
begin
    for code in
        select p.polname as name, c.oid::pg_catalog.regclass::pg_catalog.text as on_table
        from pg_catalog.pg_policy as p join pg_catalog.pg_class as c on c.oid = p.polrelid
        where c.relnamespace = 'emem'::pg_catalog.regnamespace
    loop
        execute pg_catalog.format('drop policy %I on %s', code.name, code.on_table);
    end loop;
    for code in
        select t.tgname as name, c.oid::pg_catalog.regclass::pg_catalog.text as on_table
        from pg_catalog.pg_trigger as t join pg_catalog.pg_class as c on c.oid = t.tgrelid
        where c.relnamespace = 'emem'::pg_catalog.regnamespace and not t.tgisinternal
    loop
        execute pg_catalog.format('drop trigger %I on %s', code.name, code.on_table);
    end loop;
    for code in
        select c.oid::pg_catalog.regclass::pg_catalog.text as name
        from pg_catalog.pg_class as c
        where c.relnamespace = 'emem'::pg_catalog.regnamespace and c.relkind in ('v', 'm')
    loop
        execute pg_catalog.format('drop view %s cascade', code.name);  -- with the functions of its rows
    end loop;
    for code in
        select p.oid::pg_catalog.regprocedure::pg_catalog.text as name,
               case p.prokind when 'a' then 'aggregate' else 'function' end as kind
        from pg_catalog.pg_proc as p
        where p.pronamespace = 'emem'::pg_catalog.regnamespace
          and not exists (select from pg_catalog.pg_depend as d
                          where d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass and d.refobjid = p.oid
                            and d.classid in ('pg_catalog.pg_class'::pg_catalog.regclass,
                                              'pg_catalog.pg_constraint'::pg_catalog.regclass,
                                              'pg_catalog.pg_attrdef'::pg_catalog.regclass,
                                              'pg_catalog.pg_type'::pg_catalog.regclass))
        order by p.prokind = 'a' desc  -- an aggregate before its support functions
    loop
        execute pg_catalog.format('drop %s %s', code.kind, code.name);
    end loop;
end
$$;
