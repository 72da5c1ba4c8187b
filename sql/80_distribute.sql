-- Scaling out on Citus (docs/scale-out.md). emem.distribute() runs once, on the coordinator, after
-- CREATE EXTENSION: everything that belongs to a record is distributed by its lane, in one
-- co-location group with the records; the rest are reference tables. The same schema runs on one
-- node; only this step differs.

create function emem.distribute(shard_count integer default null) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    distributed constant text[] := array[
        'records:lane_name', 'record_tags:lane_name', 'tag_vocabulary:lane_name', 'record_vectors:lane_name',
        'edges:from_lane_name', 'edge_labels:lane_name', 'edge_label_vocabulary:lane_name', 'windows:lane_name',
        'window_members:lane_name', 'embedding_queue:lane_name'];
    reference constant text[] := array['lanes', 'agent_profiles', 'profile_lanes', 'role_profiles', 'embedding_spaces'];
    each_table text;
    done jsonb := '{}';
begin
    if not exists (select 1 from pg_catalog.pg_extension as e where e.extname = 'citus') then
        raise exception 'emem.distribute() needs the citus extension in this database'
            using errcode = '55000', hint = 'CREATE EXTENSION citus (Citus first in shared_preload_libraries), add the workers, then call it.';
    end if;
    if shard_count is not null and shard_count not between 1 and 1024 then
        raise exception 'shard_count % is out of range', shard_count using errcode = '22023', hint = 'Accepted: 1 to 1024, or NULL: citus.shard_count.';
    end if;
    foreach each_table in array reference loop
        execute pg_catalog.format('select create_reference_table(%L)', 'emem.' || each_table);
        done := done || pg_catalog.jsonb_build_object(each_table, 'reference');
    end loop;
    foreach each_table in array distributed loop
        execute pg_catalog.format(
            'select create_distributed_table(%L, %L, colocate_with => %L%s)',
            'emem.' || pg_catalog.split_part(each_table, ':', 1), pg_catalog.split_part(each_table, ':', 2),
            case when each_table like 'records:%' then 'default' else 'emem.records' end,
            case when shard_count is not null and each_table like 'records:%'
                 then pg_catalog.format(', shard_count => %s', shard_count) else '' end);
        done := done || pg_catalog.jsonb_build_object(pg_catalog.split_part(each_table, ':', 1),
                                                      'distributed by ' || pg_catalog.split_part(each_table, ':', 2));
    end loop;
    return done;
end
$$;
comment on function emem.distribute(integer) is
  'Distributes emem''s tables over a Citus cluster (run once on the coordinator, after CREATE EXTENSION): records and everything of theirs by lane, in one co-location group; lanes, profiles, bindings and spaces as reference tables. Returns what it did.';
