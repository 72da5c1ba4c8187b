-- Who may do what. Agents (any role) call the API below; it acts for them within their lanes.
-- They read the tables directly under row-level security, and write nothing directly (no
-- chosen record ids, no rows around the API's checks). Setting up lanes, profiles, bindings
-- and embedding spaces is for the extension's owner. Everything else is private.

revoke all on all tables in schema emem from public;
revoke all on all sequences in schema emem from public;
revoke all on all functions in schema emem from public;
grant usage on schema emem to public;
grant select on all tables in schema emem to public;
revoke select on emem.tag_vocabulary, emem.edge_label_vocabulary from public;

grant execute on function
    emem.e_gather_find(text, public.vector, integer, integer, text, text),
    emem.e_gather_find_envelope(text, public.vector, integer, integer, text, text),
    emem.e_gather_explain(text, public.vector, integer, integer, text, text),
    emem.e_timeline(timestamptz, timestamptz, integer, integer, text[], text[]),
    emem.records_with_all_tags(text[]),
    emem.e_health(text, integer, text),
    emem.analyse_question(text),
    emem.lookup_registry(),
    emem.readable_lanes(),
    -- Row-level security calls them as the querying role: they tell it only its own lanes and profile.
    emem.policy_lanes(name),
    emem.policy_profile(name),
    emem.put_records(jsonb, integer),
    emem.put_record(text, text, text, text[], real, timestamptz, text, integer, jsonb, text),
    emem.tag_record(bigint, text[]),
    emem.untag_record(bigint, text[]),
    emem.link_records(bigint, bigint, text, jsonb),
    emem.put_edges(jsonb),
    emem.put_record_vector(bigint, public.vector, integer),
    emem.put_window(bigint[], public.vector, integer),
    emem.update_record(bigint, text, jsonb, real, timestamptz),
    emem.delete_records(bigint[]),
    emem.move_records(bigint[], text),
    emem.unlink_records(bigint),
    emem.embedding_coverage(integer),
    emem.queue_missing_embeddings(integer),
    emem.claim_embeddings(integer, integer),
    emem.store_embeddings(bigint[], public.vector[]),
    emem.defer_embeddings(bigint[], text, double precision)
to public;
