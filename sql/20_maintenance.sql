-- Triggers that keep derived rows and per-space indexes in step with what users write.

-- An edge is matched through its relation name (words split at underscores) and every scalar
-- value of its properties, however deeply nested.
create function emem.refresh_edge_labels() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    delete from emem.edge_labels where edge_id = new.edge_id;
    insert into emem.edge_labels (edge_id, label)
    select new.edge_id, label
    from (
        select pg_catalog.replace(new.relation, '_', ' ') as label
        union
        select value #>> '{}'
        from pg_catalog.jsonb_path_query(new.properties, 'strict $.**') as value
        where pg_catalog.jsonb_typeof(value) in ('string', 'number')
    ) as labels
    where pg_catalog.btrim(label) <> '';
    return null;
end
$$;
create trigger edges_refresh_labels
    after insert or update of relation, properties on emem.edges
    for each row execute function emem.refresh_edge_labels();

-- pgvector indexes need a fixed dimension: each space gets partial expression indexes for
-- its record and window vectors. Also fires when pg_restore reloads the spaces.
create function emem.create_space_indexes() returns trigger
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
    for each row execute function emem.create_space_indexes();

-- The tag vocabulary follows record_tags statement by statement (a bulk load touches each of
-- its tags once). Rows are taken in tag order so concurrent writers lock them in one order.
-- Definer: agents write tags but must not read the vocabulary, which spans every lane.
create function emem.count_tags() returns trigger
language plpgsql
security definer  -- the vocabulary is not readable or writable by agents
set search_path = pg_catalog, pg_temp
as $$
begin
    if tg_op in ('DELETE', 'UPDATE') then
        update emem.tag_vocabulary as v set record_count = v.record_count - removed.records
        from (select r.tag, pg_catalog.count(*) as records from removed_tags as r group by r.tag order by r.tag) as removed
        where v.tag = removed.tag;
    end if;
    if tg_op in ('INSERT', 'UPDATE') then
        -- Only a tag seen for the first time needs its words worked out.
        insert into emem.tag_vocabulary as v (tag, tag_terms, record_count)
        select added.tag, case when known.tag is null then emem.label_terms(added.tag) else known.tag_terms end,
               added.records
        from (select a.tag, pg_catalog.count(*) as records from added_tags as a group by a.tag) as added
        left join emem.tag_vocabulary as known on known.tag = added.tag
        order by added.tag
        on conflict (tag) do update set record_count = v.record_count + excluded.record_count;
    end if;
    return null;
end
$$;
create trigger record_tags_count_added after insert on emem.record_tags
    referencing new table as added_tags for each statement execute function emem.count_tags();
create trigger record_tags_count_removed after delete on emem.record_tags
    referencing old table as removed_tags for each statement execute function emem.count_tags();
create trigger record_tags_count_changed after update on emem.record_tags
    referencing old table as removed_tags new table as added_tags
    for each statement execute function emem.count_tags();

create function emem.forget_tag_counts() returns trigger
language plpgsql
security definer  -- as emem.count_tags
set search_path = pg_catalog, pg_temp
as $$
begin
    update emem.tag_vocabulary set record_count = 0;
    return null;
end
$$;
create trigger record_tags_truncated after truncate on emem.record_tags
    for each statement execute function emem.forget_tag_counts();
