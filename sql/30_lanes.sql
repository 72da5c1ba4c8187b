-- Lanes, agent profiles, role bindings, and the row-level security that keeps every role
-- inside the lanes of its profile. The tables' owner (the extension's owner) and roles with
-- BYPASSRLS read everything; a role bound to no profile reads nothing.

create function emem.readable_lanes() returns setof text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select pl.lane_name
    from emem.role_profiles as rp
    join emem.profile_lanes as pl on pl.profile_name = rp.profile_name
    where rp.role_name = current_user
$$;
comment on function emem.readable_lanes() is
  'The lanes the current role may read and write: those of the agent profile it is bound to.';

-- Lane and profile names: the same rule as the tables' check constraints, with a clear error.
create function emem.check_name(what text, name text) returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    if name is null or name !~ '^[a-z0-9][a-z0-9_.:-]{0,62}$' then
        raise exception 'invalid % name %', what, coalesce(pg_catalog.quote_literal(name), 'NULL')
            using errcode = '22023',
                  hint = pg_catalog.format('A %s name is 1 to 63 characters: lower-case letters, digits and _ . : -,'
                                           ' starting with a letter or digit.', what);
    end if;
end
$$;
comment on function emem.check_name(text, text) is 'Refuses a lane or profile name the tables would not accept.';

create function emem.create_lane(lane_name text) returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform emem.check_name('lane', lane_name);
    insert into emem.lanes (lane_name) values (create_lane.lane_name) on conflict do nothing;
    return lane_name;
end
$$;
comment on function emem.create_lane(text) is 'Creates a lane (no-op when it exists); returns its name.';

create function emem.create_agent_profile(profile_name text, lanes text[]) returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    unknown text[];
begin
    perform emem.check_name('agent profile', profile_name);
    if lanes is null or pg_catalog.array_position(lanes, null) is not null then
        raise exception 'the lanes of agent profile % must be an array of lane names without NULLs', profile_name
            using errcode = '22023';
    end if;
    select pg_catalog.array_agg(l order by l) into unknown
    from pg_catalog.unnest(lanes) as l
    where not exists (select from emem.lanes as known where known.lane_name = l);
    if unknown is not null then
        raise exception 'unknown lane(s) % for agent profile %', unknown, profile_name
            using errcode = '22023', hint = 'Create them first with emem.create_lane(name).';
    end if;
    insert into emem.agent_profiles (profile_name) values (create_agent_profile.profile_name)
        on conflict do nothing;
    delete from emem.profile_lanes as pl where pl.profile_name = create_agent_profile.profile_name;
    insert into emem.profile_lanes (profile_name, lane_name)
        select distinct create_agent_profile.profile_name, l from pg_catalog.unnest(lanes) as l;
    return profile_name;
end
$$;
comment on function emem.create_agent_profile(text, text[]) is
  'Creates an agent profile, or replaces its lanes when it exists; returns its name.';

create function emem.bind_role(role_name name, profile_name text) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if role_name is null or not exists (select from pg_catalog.pg_roles as r where r.rolname = bind_role.role_name) then
        raise exception 'unknown database role %', coalesce(pg_catalog.quote_ident(role_name), 'NULL')
            using errcode = '22023';
    end if;
    if profile_name is null or not exists (
        select from emem.agent_profiles as p where p.profile_name = bind_role.profile_name) then
        raise exception 'unknown agent profile %', coalesce(pg_catalog.quote_literal(profile_name), 'NULL')
            using errcode = '22023', hint = 'Create it first with emem.create_agent_profile(name, lanes).';
    end if;
    insert into emem.role_profiles as rp (role_name, profile_name)
        values (bind_role.role_name, bind_role.profile_name)
        on conflict on constraint role_profiles_pkey
        do update set profile_name = excluded.profile_name, bound_at = pg_catalog.now();
end
$$;
comment on function emem.bind_role(name, text) is
  'Binds a database role to an agent profile (replacing an earlier binding): the role then reads the profile''s lanes.';

-- Row-level security: a record is visible when its lane is readable; rows that belong to
-- records (tags, vectors, window members) follow their record, an edge both its endpoints.
alter table emem.lanes enable row level security;
alter table emem.agent_profiles enable row level security;
alter table emem.profile_lanes enable row level security;
alter table emem.role_profiles enable row level security;
alter table emem.records enable row level security;
alter table emem.record_tags enable row level security;
alter table emem.edges enable row level security;
alter table emem.edge_labels enable row level security;
alter table emem.record_vectors enable row level security;
alter table emem.windows enable row level security;
alter table emem.window_members enable row level security;

create policy own_binding on emem.role_profiles for select using (role_name = current_user);
create policy own_profile on emem.agent_profiles for select
    using (profile_name in (select rp.profile_name from emem.role_profiles as rp));
create policy own_profile_lanes on emem.profile_lanes for select
    using (profile_name in (select rp.profile_name from emem.role_profiles as rp));
create policy readable_lane on emem.lanes for select
    using (lane_name in (select emem.readable_lanes()));
create policy readable_lane on emem.records
    using (lane_name in (select emem.readable_lanes()))
    with check (lane_name in (select emem.readable_lanes()));
create policy readable_record on emem.record_tags
    using (exists (select from emem.records as r where r.record_id = record_tags.record_id));
create policy readable_record on emem.record_vectors
    using (exists (select from emem.records as r where r.record_id = record_vectors.record_id));
create policy readable_endpoints on emem.edges
    using (exists (select from emem.records as r where r.record_id = edges.from_record_id)
       and exists (select from emem.records as r where r.record_id = edges.to_record_id));
create policy readable_edge on emem.edge_labels
    using (exists (select from emem.edges as e where e.edge_id = edge_labels.edge_id));
create policy readable_lane on emem.windows
    using (lane_name in (select emem.readable_lanes()))
    with check (lane_name in (select emem.readable_lanes()));
create policy readable_window on emem.window_members
    using (exists (select from emem.windows as w where w.window_id = window_members.window_id)
       and exists (select from emem.records as r where r.record_id = window_members.record_id));
