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
    insert into emem.edge_labels (edge_id, label, label_terms, from_lane_name, to_lane_name, lane_terms,
                                  from_record_id, to_record_id)
    select new.edge_id, label, terms, new.from_lane_name, new.to_lane_name,
           emem._lane_qualified(array[new.from_lane_name, new.to_lane_name], terms),
           new.from_record_id, new.to_record_id
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
-- The end ids are listed too: UPDATE OF fires on the columns an UPDATE names, not on the lanes
-- edges_lanes sets from them.
create trigger edges_refresh_labels
    after insert or update of relation, properties, from_record_id, to_record_id, from_lane_name, to_lane_name
    on emem.edges
    for each row execute function emem._refresh_edge_labels();

-- Each label written gets its vocabulary row in its lane (once: a label seen stays, its ends say
-- whether an edge still has it; deleting it could race a concurrent first use) and its ends
-- counted, per statement. Rows are written in key order, so that concurrent writers lock them alike.
create function emem._count_label_ends() returns trigger
language plpgsql
security definer  -- edge_label_vocabulary and edge_label_ends are derived: only the owner writes them
set search_path = pg_catalog, pg_temp
as $$
begin
    if tg_op in ('DELETE', 'UPDATE') then
        insert into emem.edge_label_ends as x (label, record_id, edges)
        select r.label, ends.record_id, -pg_catalog.count(*)
        from removed_labels as r
        cross join lateral (values (r.from_record_id), (r.to_record_id)) as ends (record_id)
        where ends.record_id is not null
        group by r.label, ends.record_id
        order by r.label, ends.record_id
        on conflict (label, record_id) do update set edges = x.edges + excluded.edges;
        delete from emem.edge_label_ends as x
        using (select distinct r.label from removed_labels as r) as removed
        where x.label = removed.label and x.edges <= 0;
    end if;
    if tg_op in ('INSERT', 'UPDATE') then
        insert into emem.edge_label_vocabulary (label, lane_name, label_terms, namespace_terms)
        select distinct on (a.label, lane_name) a.label, coalesce(a.from_lane_name, '') as lane_name,
               a.label_terms, a.namespace_terms
        from added_labels as a
        order by a.label, lane_name
        on conflict (label, lane_name) do nothing;
        insert into emem.edge_label_ends as x (label, record_id, edges)
        select a.label, ends.record_id, pg_catalog.count(*)
        from added_labels as a
        cross join lateral (values (a.from_record_id), (a.to_record_id)) as ends (record_id)
        where ends.record_id is not null
        group by a.label, ends.record_id
        order by a.label, ends.record_id
        on conflict (label, record_id) do update set edges = x.edges + excluded.edges;
    end if;
    return null;
end
$$;
create trigger edge_labels_count_added after insert on emem.edge_labels
    referencing new table as added_labels for each statement execute function emem._count_label_ends();
create trigger edge_labels_count_removed after delete on emem.edge_labels
    referencing old table as removed_labels for each statement execute function emem._count_label_ends();
create trigger edge_labels_count_changed after update on emem.edge_labels
    referencing old table as removed_labels new table as added_labels
    for each statement execute function emem._count_label_ends();

create function emem._forget_label_ends() returns trigger
language plpgsql
security definer  -- as emem._count_label_ends
set search_path = pg_catalog, pg_temp
as $$
begin
    truncate emem.edge_label_ends;
    return null;
end
$$;
create trigger edge_labels_truncated after truncate on emem.edge_labels
    for each statement execute function emem._forget_label_ends();

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
