-- Lanes, agent profiles, role bindings, and who acts: every API function acts for the role the
-- session acts as (its current role, so a pool that does SET ROLE agent_x works), reads the
-- lanes of that role's agent profile and writes its write lanes. The extension's owner, its
-- members and roles with BYPASSRLS read and write everything; a role bound to no profile reads
-- nothing. Row-level security keeps direct reads of the tables inside the same lanes.

-- This cluster's identity, as bindings remember it (a restore into another cluster gives roles new OIDs).
create function emem._cluster_id() returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$ select c.system_identifier::text from pg_catalog.pg_control_system() as c $$;
comment on function emem._cluster_id() is 'The system identifier of this cluster (pg_control_system), as text.';

-- A role by its exact name (role names are not parsed: 'Agent' is not 'agent'); NULL if none.
create function emem._role_named(role_name name) returns regrole
language sql stable
set search_path = pg_catalog, pg_temp
as $$ select r.oid::pg_catalog.regrole from pg_catalog.pg_roles as r where r.rolname = role_name $$;
comment on function emem._role_named(name) is 'The role with exactly this name, or NULL.';

-- The role the session acts as. Inside the API's SECURITY DEFINER functions current_user is the
-- owner; the session's current role is what SET ROLE set (the `role` setting), else the login.
create function emem._acting_role() returns regrole
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select emem._role_named(case when pg_catalog.current_setting('role') = 'none' then session_user
                                 else pg_catalog.current_setting('role')::name end)
$$;
comment on function emem._acting_role() is 'The role the session acts as (SET ROLE, else the login role).';

create function emem._reads_everything(role regrole) returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select r.rolsuper or r.rolbypassrls or pg_catalog.pg_has_role(r.oid, c.relowner, 'USAGE')
    from pg_catalog.pg_roles as r, pg_catalog.pg_class as c
    where r.oid = role and c.oid = 'emem.records'::pg_catalog.regclass
$$;
comment on function emem._reads_everything(regrole) is
  'Whether the role reads and writes every lane: a superuser, a role with BYPASSRLS, the extension''s owner or its member.';

-- The agent profile a role is bound to: by its name, while the binding's OID still names it (a role
-- dropped and created again under the same name is another role), or in a cluster the binding was
-- restored into (where every role has a new OID). NULL: bound to none.
create function emem._bound_profile(role regrole) returns text
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    return (select rp.profile_name
    from emem.role_profiles as rp join pg_catalog.pg_roles as r on r.rolname = rp.role_name
    where r.oid = role and (rp.role_id = r.oid or rp.bound_in_cluster <> emem._cluster_id()));
end
$$;
comment on function emem._bound_profile(regrole) is
  'The agent profile the role is bound to (by name and identity, see emem.role_profiles), or NULL.';

-- The lanes a role reads (writing => false) or writes; NULL: every lane.
create function emem._lanes_of(role regrole, writing boolean) returns text[]
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    return (select case when emem._reads_everything(role) then null else array(
        select pl.lane_name
        from emem.profile_lanes as pl
        where pl.profile_name = emem._bound_profile(role) and case when writing then pl.can_write else pl.can_read end
        order by pl.lane_name) end);
end
$$;
comment on function emem._lanes_of(regrole, boolean) is
  'The lanes a role reads (writing => false) or writes, from its agent profile; NULL when it reads and writes every lane.';

-- Fail closed: a read path refuses a role bound to no agent profile outright (no rows, no totals).
create function emem._readable_lanes_or_refuse() returns text[]
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    role regrole := emem._acting_role();
begin
    if not emem._reads_everything(role) and emem._bound_profile(role) is null then
        raise exception 'role % is bound to no agent profile: it reads nothing', role
            using errcode = '42501',
                  hint = 'The extension''s owner binds it: SELECT emem.bind_role(''<role>'', ''<agent profile>'').';
    end if;
    return emem._lanes_of(role, false);
end
$$;
comment on function emem._readable_lanes_or_refuse() is
  'The lanes the acting role reads (NULL: every lane); SQLSTATE 42501 for a role bound to no agent profile.';

-- For row-level security: the lanes the querying role (current_user where the policy is read) may
-- read, every lane for a role that reads everything. Policies call it as a function (no subquery in
-- a policy: Citus refuses them); it runs as the owner, because the bindings are not the querying
-- role's to read, and it answers only for the session's own role (or one it acts as a member of):
-- nobody learns another role's lanes from it.
create function emem.policy_lanes(querying name) returns text[]
language plpgsql stable
security definer  -- reads the bindings and profiles, which row-level security hides from agents
set search_path = pg_catalog, pg_temp
-- On a Citus cluster row-level security calls it on the shards, where reading the bindings (reference
-- tables) is a nested distributed query; a placeholder setting elsewhere.
set citus.allow_nested_distributed_execution = on
as $$
#variable_conflict use_column
begin
    return (select case when pg_catalog.pg_has_role(emem._acting_role(), r.oid, 'USAGE')
                then coalesce(emem._lanes_of(r.oid::pg_catalog.regrole, false),
                              array(select l.lane_name::text from emem.lanes as l order by 1))
                else '{}' end
    from pg_catalog.pg_roles as r where r.rolname = querying);
end
$$;
comment on function emem.policy_lanes(name) is
  'The lanes the querying role may read directly (row-level security); empty for a role the session does not act as.';

create function emem.policy_profile(querying name) returns text
language plpgsql stable
security definer  -- as emem.policy_lanes
set search_path = pg_catalog, pg_temp
-- On a Citus cluster row-level security calls it on the shards, where reading the bindings (reference
-- tables) is a nested distributed query; a placeholder setting elsewhere.
set citus.allow_nested_distributed_execution = on
as $$
#variable_conflict use_column
begin
    return (select case when pg_catalog.pg_has_role(emem._acting_role(), r.oid, 'USAGE')
                then emem._bound_profile(r.oid::pg_catalog.regrole) end
    from pg_catalog.pg_roles as r where r.rolname = querying);
end
$$;
comment on function emem.policy_profile(name) is
  'The agent profile the querying role is bound to (row-level security); NULL for a role the session does not act as.';

create function emem.readable_lanes() returns setof text
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    return query
    select pg_catalog.unnest(emem.policy_lanes(current_user));
end
$$;
comment on function emem.readable_lanes() is
  'The lanes the current role may read: those of the agent profile it is bound to (every lane for the extension''s owner).';

-- Lane and profile names: the domain's rule, with a clear error.
create function emem._check_name(what text, name text) returns void
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
    perform name::emem.object_name;
    if name is null then
        raise exception using errcode = '23514';
    end if;
exception when check_violation then
    raise exception 'invalid % name %', what, coalesce(pg_catalog.quote_literal(pg_catalog.left(name, 100)), 'NULL')
        using errcode = '22023',
              hint = pg_catalog.format('A %s name is 1 to 63 characters: lower-case letters, digits and _ . : -,'
                                       ' starting with a letter or digit.', what);
end
$$;
comment on function emem._check_name(text, text) is 'Refuses a lane or profile name the emem.object_name domain would not accept.';

create function emem.create_lane(lane_name text) returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform emem._check_name('lane', lane_name);
    insert into emem.lanes (lane_name) values (create_lane.lane_name) on conflict do nothing;
    return lane_name;
end
$$;
comment on function emem.create_lane(text) is 'Creates a lane (no-op when it exists); returns its name.';

create function emem._check_lanes(what text, profile_name text, lanes text[]) returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    unknown text[];
begin
    if lanes is null or pg_catalog.array_position(lanes, null) is not null or pg_catalog.cardinality(lanes) > 1000 then
        raise exception 'the %lanes of agent profile % must be an array of at most 1000 lane names without NULLs',
            what, profile_name using errcode = '22023';
    end if;
    select pg_catalog.array_agg(l order by l) into unknown
    from pg_catalog.unnest(lanes) as l
    where not exists (select 1 from emem.lanes as known where known.lane_name operator(pg_catalog.=) l);
    if unknown is not null then
        raise exception 'unknown %lane(s) % for agent profile %', what, unknown, profile_name
            using errcode = '22023', hint = 'Create them first with emem.create_lane(name).';
    end if;
end
$$;
comment on function emem._check_lanes(text, text, text[]) is
  'Refuses (write) lanes of an agent profile that are not an array of existing lanes; what:  or ''write ''.';

create function emem.create_agent_profile(profile_name text, lanes text[], write_lanes text[] default null)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    perform emem._check_name('agent profile', profile_name);
    perform emem._check_lanes('', profile_name, lanes);
    write_lanes := coalesce(write_lanes, lanes);
    perform emem._check_lanes('write ', profile_name, write_lanes);
    insert into emem.agent_profiles (profile_name) values (create_agent_profile.profile_name)
        on conflict do nothing;
    delete from emem.profile_lanes as pl where pl.profile_name = create_agent_profile.profile_name;
    insert into emem.profile_lanes (profile_name, lane_name, can_read, can_write)
        select create_agent_profile.profile_name, l, l = any (lanes), l = any (write_lanes)
        from (select pg_catalog.unnest(lanes) union select pg_catalog.unnest(write_lanes)) as each_lane (l);
    perform emem._sync_lane_indexes();
    return profile_name;
end
$$;
comment on function emem.create_agent_profile(text, text[], text[]) is
  'Creates an agent profile, or replaces its lanes when it exists: the lanes it reads, and those it writes (by default the same); returns its name.';

create function emem.drop_lane(lane_name text) returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if exists (select 1 from emem.records as r where r.lane_name operator(pg_catalog.=) drop_lane.lane_name) then
        raise exception 'lane % holds records: a lane that holds records cannot be dropped', pg_catalog.quote_literal(lane_name)
            using errcode = '23503', hint = 'Delete them first (emem.delete_records) or move them (emem.move_records).';
    end if;
    delete from emem.profile_lanes as pl where pl.lane_name operator(pg_catalog.=) drop_lane.lane_name;
    perform emem._sync_lane_indexes();
    delete from emem.lanes as l where l.lane_name operator(pg_catalog.=) drop_lane.lane_name;
    return found;
end
$$;
comment on function emem.drop_lane(text) is 'Drops an empty lane (and its place in agent profiles); returns whether it existed.';

create function emem.drop_agent_profile(profile_name text) returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    delete from emem.role_profiles as rp where rp.profile_name operator(pg_catalog.=) drop_agent_profile.profile_name;
    delete from emem.profile_lanes as pl where pl.profile_name operator(pg_catalog.=) drop_agent_profile.profile_name;
    perform emem._sync_lane_indexes();
    delete from emem.agent_profiles as p where p.profile_name operator(pg_catalog.=) drop_agent_profile.profile_name;
    return found;
end
$$;
comment on function emem.drop_agent_profile(text) is 'Drops an agent profile with its lanes and the bindings to it (those roles then read nothing); returns whether it existed.';

create function emem.bind_role(role_name name, profile_name text) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    role regrole := emem._role_named(role_name);
begin
    if role is null then
        raise exception 'unknown database role %', coalesce(pg_catalog.quote_ident(role_name), 'NULL')
            using errcode = '22023';
    end if;
    if profile_name is null or not exists (
        select 1 from emem.agent_profiles as p where p.profile_name operator(pg_catalog.=) bind_role.profile_name) then
        raise exception 'unknown agent profile %', coalesce(pg_catalog.quote_literal(profile_name), 'NULL')
            using errcode = '22023', hint = 'Create it first with emem.create_agent_profile(name, lanes).';
    end if;
    insert into emem.role_profiles as rp (role_name, role_id, bound_in_cluster, profile_name)
        values (bind_role.role_name, role::pg_catalog.oid, emem._cluster_id(), bind_role.profile_name)
        on conflict on constraint role_profiles_pkey
        do update set role_id = excluded.role_id, bound_in_cluster = excluded.bound_in_cluster,
                      profile_name = excluded.profile_name, bound_at = excluded.bound_at;
end
$$;
comment on function emem.bind_role(name, text) is
  'Binds a database role to an agent profile (replacing an earlier binding): the role then reads and writes the profile''s lanes. The binding is to the role itself: a role dropped and created again under the same name is not bound (bind it again); restored into another cluster, a binding holds for the role of its name.';

create function emem.unbind_role(role_name name) returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
    return (with gone as (delete from emem.role_profiles as rp where rp.role_name = unbind_role.role_name returning 1)
    select exists (select 1 from gone));
end
$$;
comment on function emem.unbind_role(name) is 'Removes a role''s binding (the role then reads nothing); returns whether it had one.';

-- Bindings whose role is gone (dropped, or a role of that name that is another role) hold for no
-- one; this removes them, and lists every binding with whether it holds.
create function emem.role_bindings(remove_dangling boolean default false)
returns table (role_name name, profile_name text, holds boolean, bound_at timestamptz)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if remove_dangling is null then
        raise exception 'remove_dangling must be true or false' using errcode = '22023';
    end if;
    if remove_dangling then
        delete from emem.role_profiles as rp
        where emem._bound_profile(emem._role_named(rp.role_name)) is distinct from rp.profile_name;
    end if;
    return query
        select rp.role_name, rp.profile_name,
               emem._bound_profile(emem._role_named(rp.role_name)) is not distinct from rp.profile_name, rp.bound_at
        from emem.role_profiles as rp order by rp.role_name;
end
$$;
comment on function emem.role_bindings(boolean) is
  'Every role binding and whether it holds (its role exists and is the role that was bound); remove_dangling => true removes those that do not.';

-- Row-level security: a row is visible when its lane is readable, an edge when both its ends'
-- lanes are. No subquery in a policy (Citus refuses them): the lanes come from a function.
create policy own_binding on emem.role_profiles for select
    using (role_name operator(pg_catalog.=) current_user and profile_name operator(pg_catalog.=) emem.policy_profile(current_user));
create policy own_profile on emem.agent_profiles for select
    using (profile_name operator(pg_catalog.=) emem.policy_profile(current_user));
create policy own_profile_lanes on emem.profile_lanes for select
    using (profile_name operator(pg_catalog.=) emem.policy_profile(current_user));
create policy readable_lane on emem.lanes for select
    using (lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user)));
create policy readable_lane on emem.records for select
    using (lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user)));
create policy readable_lane on emem.record_tags for select
    using (lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user)));
create policy readable_lane on emem.record_vectors for select
    using (lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user)));
create policy readable_ends on emem.edges for select
    using (from_lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user))
       and to_lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user)));
create policy readable_ends on emem.edge_labels for select
    using (lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user))
       and far_lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user)));
create policy readable_lane on emem.windows for select
    using (lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user)));
create policy readable_lane on emem.window_members for select
    using (lane_name operator(pg_catalog.=) any (emem.policy_lanes(current_user)));

-- The settings an agent profile's finds run under. Checked by the same code that reads them.
create function emem._check_setting(setting text, value text) returns void
language plpython3u immutable
set search_path = pg_catalog, pg_temp
as $$
from @MODULE@.entry import backend
from @MODULE@.settings import SettingError, check_setting
state = backend(GD, plpy, "@EXTVERSION@")
try:
    check_setting(setting, value)
except SettingError as error:
    state.fail(str(error))
$$;
comment on function emem._check_setting(text, text) is 'Refuses an emem setting or value that a find would refuse.';

create function emem.set_agent_setting(profile_name text, setting text, value text) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    state text; message text; hint text;
    now_set jsonb;
begin
    begin
        perform emem._check_setting(setting, value);
    exception when others then
        get stacked diagnostics state = returned_sqlstate, message = message_text, hint = pg_exception_hint;
        perform emem._raise_plainly(state, message, '', hint);
    end;
    select p.settings into now_set from emem.agent_profiles as p
        where p.profile_name operator(pg_catalog.=) set_agent_setting.profile_name;
    if found then
        -- Worked out first: a cluster's reference tables take no volatile expression in an UPDATE.
        now_set := case when value is null then now_set - setting
                        else now_set || pg_catalog.jsonb_build_object(setting, value) end;
        update emem.agent_profiles as p set settings = now_set
            where p.profile_name operator(pg_catalog.=) set_agent_setting.profile_name;
    end if;
    if not found then
        raise exception 'unknown agent profile %', coalesce(pg_catalog.quote_literal(profile_name), 'NULL')
            using errcode = '22023', hint = 'Create it first with emem.create_agent_profile(name, lanes).';
    end if;
    if setting = 'emem.lane_isolation' then
        perform emem._sync_lane_indexes();
    end if;
    return now_set;
end
$$;
comment on function emem.set_agent_setting(text, text, text) is
  'Sets (value NULL: removes) an emem setting for the finds of an agent profile''s roles: emem.pipeline_profile, emem.record_vector_candidates, emem.window_vector_candidates, emem.lane_isolation (page_filter, the default, or strict; seed is the old name of page_filter), emem.vector_coverage_threshold (0 to 1), emem.exact_totals_up_to (0: totals always exact). Agents cannot change them in their sessions. Returns the profile''s settings.';
