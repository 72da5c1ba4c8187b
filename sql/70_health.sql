-- Health: does the embedding gateway's declared model match the active space and its vectors,
-- and does every record and window have a current vector there? Degraded is not an outage:
-- e_gather_find answers from the exact lookups meanwhile.
--
-- Agents call it too: the coverage it reports counts the lanes the caller reads (the extension's
-- owner: every lane), so that an agent learns nothing of other lanes' sizes.

create function emem.e_health(
    model_name text, dimension integer, fingerprint text default null
) returns jsonb
language plpgsql stable
security definer  -- counts the coverage of the acting role's readable lanes only
set search_path = pg_catalog, pg_temp
as $$
declare
    space emem.embedding_spaces;
    reasons text[] := '{}';
    stored_dimensions integer[];
    lanes text[] := emem._lanes_of(emem._acting_role(), false);
    coverage jsonb;
    threshold double precision := emem._vector_coverage_threshold();
begin
    if pg_catalog.length(model_name) > 200 or pg_catalog.length(fingerprint) > 200 then
        raise exception 'model_name and fingerprint must be at most 200 characters' using errcode = '22023';
    end if;
    select * into space from emem.embedding_spaces as s where s.is_active;
    if not found then
        reasons := pg_catalog.array_append(reasons, 'no_active_space');
    end if;
    if model_name is null or dimension is null then
        reasons := pg_catalog.array_append(reasons, 'declaration_unreadable');
    elsif space.space_id is not null then
        if model_name <> space.model_name then
            reasons := pg_catalog.array_append(reasons, 'model_mismatch');
        end if;
        if dimension <> space.dimension then
            reasons := pg_catalog.array_append(reasons, 'dimension_mismatch');
        end if;
        if fingerprint is not null and space.fingerprint is not null and fingerprint <> space.fingerprint then
            reasons := pg_catalog.array_append(reasons, 'fingerprint_mismatch');
        end if;
    end if;
    if space.space_id is not null and emem._missing_space_indexes(space.space_id) > 0 then
        reasons := pg_catalog.array_append(reasons, 'vector_indexes_missing');
    end if;
    if space.space_id is not null then
        -- Writes check dimensions; a sample still catches rows written around the API.
        -- The sample's dimensions are worked out where the vectors are stored (on a Citus
        -- cluster no vector travels to the coordinator).
        select pg_catalog.array_agg(distinct sample.dimensions) into stored_dimensions
        from (select public.vector_dims(rv.embedding) as dimensions from emem.record_vectors as rv
              where rv.space_id = space.space_id and (lanes is null or rv.lane_name = any (lanes))
              limit 1000) as sample;
        if stored_dimensions is not null and stored_dimensions <> array[space.dimension] then
            reasons := pg_catalog.array_append(reasons, 'stored_vectors_mismatch');
        end if;
        coverage := emem._vector_coverage(space.space_id, lanes) || pg_catalog.jsonb_build_object(
            'lanes', case when lanes is null then 'all' else 'readable' end, 'threshold', threshold);
        if (coverage->>'share')::float8 < threshold then
            reasons := pg_catalog.array_append(reasons, 'vectors_incomplete');
        end if;
    end if;
    return pg_catalog.jsonb_build_object(
        'status', case when pg_catalog.cardinality(reasons) = 0 then 'ok' else 'degraded' end,
        'reasons', pg_catalog.to_jsonb(reasons),
        'declared', pg_catalog.jsonb_build_object('model_name', model_name, 'dimension', dimension,
                                                  'fingerprint', fingerprint),
        'active_space', case when space.space_id is null then null else pg_catalog.jsonb_build_object(
            'space_id', space.space_id, 'model_name', space.model_name, 'dimension', space.dimension,
            'fingerprint', space.fingerprint) end,
        'stored_vector_dimensions', pg_catalog.to_jsonb(stored_dimensions),
        'coverage', coverage);
end
$$;
comment on function emem.e_health(text, integer, text) is
  'ok or degraded, with reasons (declaration_unreadable, no_active_space, model_mismatch, dimension_mismatch, fingerprint_mismatch, stored_vectors_mismatch, vectors_incomplete, vector_indexes_missing: after a restore, until emem.rebuild_derived()), for the model the embedding gateway declares (NULLs: it could not be read); coverage: the active space''s records and windows with a current vector, in the lanes the caller reads, degraded below emem.vector_coverage_threshold.';
