-- Who may do what. Agents (any role) read and write through row-level security; setting up
-- lanes, profiles, bindings and embedding spaces is for the extension's owner.

grant usage on schema emem to public;
grant select on all tables in schema emem to public;
grant insert, update, delete on emem.records, emem.record_tags, emem.edges, emem.edge_labels,
    emem.record_vectors, emem.windows, emem.window_members to public;
grant usage on all sequences in schema emem to public;
revoke all on emem.lanes, emem.agent_profiles, emem.profile_lanes, emem.role_profiles,
    emem.embedding_spaces from public;
grant select on emem.lanes, emem.agent_profiles, emem.profile_lanes, emem.role_profiles,
    emem.embedding_spaces to public;
revoke execute on function emem.create_lane(text), emem.create_agent_profile(text, text[]),
    emem.bind_role(name, text), emem.create_embedding_space(text, integer, text, boolean),
    emem.activate_embedding_space(integer) from public;
revoke all on emem.tag_vocabulary from public;
