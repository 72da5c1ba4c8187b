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
