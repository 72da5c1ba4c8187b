-- Checks behind docs/scale-out.md: emem's lookups on hash-partitioned tables standing in for
-- Citus shards. Citus is not installed here; PostgreSQL's own hash partitioning places rows the
-- way a distribution column does (one partition = one shard, co-partitioned tables = co-located
-- tables), so the per-shard plans, the per-shard top-k + merge and the per-shard counts can be
-- checked on one server.
--
--   psql -d <a database with CREATE EXTENSION emem CASCADE> -f docs/scale-out-check.sql
--
-- Everything lives in schema scaleout_check, made afresh at the start and dropped at the end
-- (psql -v keep=1 keeps it for a look). About 40 s on 2 cores, most of it HNSW builds. The data
-- is deterministic (setseed); the HNSW graphs are not (pgvector draws their levels at random), so
-- recall moves a little between runs. The figures observed are in docs/scale-out.md.

\set ON_ERROR_STOP on
\pset footer off
set client_min_messages = warning;
drop schema if exists scaleout_check cascade;
create schema scaleout_check;
set search_path = scaleout_check, public, pg_catalog;
set max_parallel_workers_per_gather = 0;      -- one backend, so that timings are comparable
set max_parallel_maintenance_workers = 0;
set maintenance_work_mem = '256MB';
set work_mem = '64MB';
set jit = off;

-- ---- 1. A synthetic corpus --------------------------------------------------------------------
-- 30,000 records in 12 lanes of very different sizes (40%, 20%, 9 lanes of 4%, 0.5%), 384-d
-- vectors clustered around 60 centres (cosine to the own centre about 0.8), a broad tag
-- `meeting` (12%), a rare tag (0.5%), a topic tag per cluster (60% of its records), a broad term
-- `q3` (10%), a rare name `kowalski` (0.3%), a code per record; 30% conversation turns in
-- threads of 6 with windows of 3 turns (stride 2), each window the mean of its turns' vectors.
\echo '== 1. corpus'
do $$ begin perform setseed(0.16); end $$;

create table centres as
select c, array_agg(random() - 0.5 order by g)::float4[] as centre
from generate_series(1, 60) as c, generate_series(1, 384) as g
group by c;

create table corpus as
select r as record_id,
       case when u < 0.40 then 'lane-00' when u < 0.60 then 'lane-01' when u < 0.995
            then 'lane-' || pg_catalog.lpad((2 + ((u - 0.60) / 0.0439)::int % 9)::text, 2, '0')
            else 'lane-11' end as lane_name,
       c as cluster,
       random() < 0.12 as meeting,
       random() < 0.005 as rare,
       random() < 0.60 as topical,
       random() < 0.10 as q3,
       random() < 0.003 as kowalski
from generate_series(1, 30000) as r,
     lateral (select random() as u, 1 + floor(random() * 60)::int as c where r > 0) as draw;

create table corpus_vectors as
select k.record_id,
       l2_normalize((select array_agg(ce.centre[g] + 0.8 * (random() - 0.5) order by g)
                     from generate_series(1, 384) as g where k.record_id > 0)::vector) as embedding
from corpus as k join centres as ce on ce.c = k.cluster;

-- Conversation turns: 30% of the records, in threads of 6 consecutive ids.
create table corpus_threads as
select record_id, 'conv-' || (record_id - 1) / 6 as thread_id, (record_id - 1) % 6 as thread_position
from corpus where ((record_id - 1) / 6) % 10 < 3;

-- A thread's turns share its first turn's lane, as put_window requires of a window.
update corpus as k set lane_name = first_turn.lane_name
from corpus_threads as t, corpus as first_turn
where t.record_id = k.record_id and first_turn.record_id = k.record_id - t.thread_position;

create table corpus_windows as
select row_number() over (order by t.thread_id, w.first) as window_id, t.thread_id,
       min(k.lane_name) as lane_name,
       array_agg(t.record_id order by t.record_id) as member_record_ids,
       l2_normalize(avg(v.embedding)) as embedding
from corpus_threads as t
join (values (0), (2)) as w (first) on t.thread_position between w.first and w.first + 2
join corpus as k on k.record_id = t.record_id
join corpus_vectors as v on v.record_id = t.record_id
group by t.thread_id, w.first;

-- Edges: one from every 25th record to a record 7 ids further on (relation `audited`), so that
-- the two ends usually lie in different partitions and often in different lanes.
create table corpus_edges as
select row_number() over (order by k.record_id) as edge_id, k.record_id as from_record_id,
       k.record_id + 7 as to_record_id, 'audited' as label
from corpus as k where k.record_id % 25 = 0 and k.record_id + 7 <= 30000;

create table questions as
select q, l2_normalize((select array_agg(ce.centre[g] + 0.8 * (random() - 0.5) order by g)
                        from generate_series(1, 384) as g where q > 0)::vector) as embedding
from generate_series(1, 20) as q join centres as ce on ce.c = 1 + (q * 7) % 60;

select count(*) as records, count(distinct lane_name) as lanes,
       round(avg(meeting::int), 3) as meeting_share, round(avg(q3::int), 3) as q3_share,
       sum(kowalski::int) as kowalski_records,
       (select count(*) from corpus_windows) as windows,
       (select count(*) from corpus_edges) as edges
from corpus;
select lane_name, count(*) as records from corpus group by lane_name order by lane_name;

-- ---- 2. The same rows three ways ---------------------------------------------------------------
-- single_*: plain tables, today's single node.
-- shard_*:  records, record_tags and record_vectors PARTITION BY HASH (record_id), windows and
--           window_members PARTITION BY HASH (thread_id), 8 partitions each: the distribution
--           the note proposes (partition i of every record table holds the same records, as
--           co-located shards do).
-- lane_*:   record_vectors PARTITION BY HASH (lane_name): the alternative placement by lane.
-- Column names and the HNSW index expression are emem's (sql/10_schema.sql, sql/20_maintenance.sql);
-- lane_name is carried on every child table, as the note proposes.
\echo '== 2. tables and indexes (HNSW builds take most of the time)'
do $$
declare
    variant text;
    by_record text;
    by_thread text;
begin
    foreach variant in array array['single', 'shard'] loop
        by_record := case when variant = 'shard' then ' partition by hash (record_id)' else '' end;
        by_thread := case when variant = 'shard' then ' partition by hash (thread_id)' else '' end;
        execute format($f$
            create table %1$s_records (
                record_id bigint not null, lane_name text not null, content text not null,
                content_search tsvector generated always as (to_tsvector('emem.exact'::regconfig, content)) stored,
                primary key (record_id))%2$s;
            create table %1$s_record_tags (
                record_id bigint not null, lane_name text not null, tag text not null,
                primary key (record_id, tag))%2$s;
            create table %1$s_record_vectors (
                space_id integer not null, record_id bigint not null, lane_name text not null,
                embedding vector not null, primary key (space_id, record_id))%2$s;
            create table %1$s_windows (
                window_id bigint not null, space_id integer not null, thread_id text not null,
                lane_name text not null, member_record_ids bigint[] not null, embedding vector not null,
                primary key (thread_id, window_id))%3$s;
            create table %1$s_edge_labels (
                record_id bigint not null, edge_id bigint not null, label text not null,
                label_terms text[] not null, other_record_id bigint not null,
                lane_name text not null, other_lane_name text not null,
                primary key (record_id, edge_id, label))%2$s;
            create table %1$s_window_members (
                window_id bigint not null, thread_id text not null, record_id bigint not null,
                primary key (thread_id, window_id, record_id))%3$s;
            $f$, variant, by_record, by_thread);
        if variant = 'shard' then
            for i in 0..7 loop
                execute format($f$
                    create table shard_records_p%1$s partition of shard_records for values with (modulus 8, remainder %1$s);
                    create table shard_record_tags_p%1$s partition of shard_record_tags for values with (modulus 8, remainder %1$s);
                    create table shard_record_vectors_p%1$s partition of shard_record_vectors for values with (modulus 8, remainder %1$s);
                    create table shard_edge_labels_p%1$s partition of shard_edge_labels for values with (modulus 8, remainder %1$s);
                    create table shard_windows_p%1$s partition of shard_windows for values with (modulus 8, remainder %1$s);
                    create table shard_window_members_p%1$s partition of shard_window_members for values with (modulus 8, remainder %1$s);
                    $f$, i);
            end loop;
        end if;
        execute format($f$
            insert into %1$s_records (record_id, lane_name, content)
            select record_id, lane_name,
                   'note ' || record_id || ' on topic-' || cluster || ' INV-' || (100000 + record_id)
                   || case when q3 then ' closed in Q3' else '' end
                   || case when kowalski then ' billed by Kowalski' else '' end
            from corpus;
            insert into %1$s_record_tags
            select record_id, lane_name, tag from corpus,
                   lateral (select 'meeting' where meeting union all select 'rare-topic' where rare
                            union all select 'topic-' || cluster where topical) as t (tag);
            insert into %1$s_record_vectors
            select 1, v.record_id, k.lane_name, v.embedding from corpus_vectors as v join corpus as k using (record_id);
            -- one row per end of an edge, in the end's own partition, with both ends' lanes
            insert into %1$s_edge_labels
            select e.from_record_id, e.edge_id, e.label, array[e.label], e.to_record_id, f.lane_name, t.lane_name
            from corpus_edges as e join corpus as f on f.record_id = e.from_record_id
                 join corpus as t on t.record_id = e.to_record_id
            union all
            select e.to_record_id, e.edge_id, e.label, array[e.label], e.from_record_id, t.lane_name, f.lane_name
            from corpus_edges as e join corpus as f on f.record_id = e.from_record_id
                 join corpus as t on t.record_id = e.to_record_id;
            create index on %1$s_edge_labels using gin (label_terms);
            insert into %1$s_windows select window_id, 1, thread_id, lane_name, member_record_ids, embedding from corpus_windows;
            insert into %1$s_window_members select window_id, thread_id, unnest(member_record_ids) from corpus_windows;
            create index on %1$s_records using gin (content_search);
            create index on %1$s_record_tags (tag, record_id);
            create index on %1$s_record_vectors (lane_name);
            create index on %1$s_record_vectors
                using hnsw ((embedding::vector(384)) vector_cosine_ops) where space_id = 1;
            create index on %1$s_windows
                using hnsw ((embedding::vector(384)) vector_cosine_ops) where space_id = 1;
            $f$, variant);
    end loop;

    create table lane_record_vectors (
        space_id integer not null, record_id bigint not null, lane_name text not null,
        embedding vector not null, primary key (space_id, lane_name, record_id)) partition by hash (lane_name);
    for i in 0..7 loop
        execute format('create table lane_record_vectors_p%1$s partition of lane_record_vectors'
                       ' for values with (modulus 8, remainder %1$s)', i);
    end loop;
    insert into lane_record_vectors select * from single_record_vectors;
    create index on lane_record_vectors using hnsw ((embedding::vector(384)) vector_cosine_ops) where space_id = 1;
end
$$;
analyze;

select 'shard_record_vectors' as table_name, tableoid::regclass as partition, count(*) as rows,
       count(distinct lane_name) as lanes
from shard_record_vectors group by tableoid
union all
select 'lane_record_vectors', tableoid::regclass, count(*), count(distinct lane_name)
from lane_record_vectors group by tableoid
order by 1, 2;

-- ---- helpers ----------------------------------------------------------------------------------
-- What Citus does with ORDER BY ... LIMIT k over a hash-distributed table: the same query with
-- LIMIT k on every shard, then the coordinator sorts the shards' rows and keeps k. Here each
-- partition plays a shard; `sql` is the shard query with %1$s for the partition's suffix
-- (record tables and their co-located partitions share it) and $1 for the question vector.
-- Returns the merged top k (distance, then record id) and the slowest and summed shard times.
create function per_shard_top(sql text, question vector, k integer,
                              out record_ids bigint[], out slowest_ms float8, out total_ms float8)
language plpgsql as $$
declare
    started timestamptz;
    elapsed float8;
    part integer;
    rows_of_shard record;
begin
    create temporary table if not exists shard_rows (record_id bigint, distance float8) on commit drop;
    truncate shard_rows;
    slowest_ms := 0;
    total_ms := 0;
    for part in 0..7 loop
        started := clock_timestamp();
        execute format('insert into shard_rows ' || sql || ' limit %2$s', '_p' || part, k) using question;
        elapsed := extract(epoch from clock_timestamp() - started) * 1000;
        slowest_ms := greatest(slowest_ms, elapsed);
        total_ms := total_ms + elapsed;
    end loop;
    record_ids := array(select s.record_id from shard_rows as s order by s.distance, s.record_id limit k);
end
$$;

-- The same query on one table (no %1$s suffix: the single-node table, or the partitioned parent).
create function one_table_top(sql text, question vector, k integer, out record_ids bigint[], out ms float8)
language plpgsql as $$
declare
    started timestamptz := clock_timestamp();
begin
    execute format('select array(select record_id from (' || sql || ' limit %2$s) as t)', '', k)
        into record_ids using question;
    ms := extract(epoch from clock_timestamp() - started) * 1000;
end
$$;

-- Share of `expected` found in `got` (recall), and whether both are the same list in the same order.
create function recall(got bigint[], expected bigint[]) returns float8
language sql immutable as $$
    select case when cardinality(expected) = 0 then 1.0
                else (select count(*) from unnest(got) as g where g = any (expected))::float8 / cardinality(expected) end
$$;

-- ---- 3. Plans ---------------------------------------------------------------------------------
\echo '== 3. plans (generic: $1 is the question vector)'
set plan_cache_mode = force_generic_plan;
set hnsw.ef_search = 100;

\echo '-- 3a. record vectors, top 100: one index vs. one index per partition (shard)'
prepare record_vectors_single(vector) as
    select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance
    from single_record_vectors where space_id = 1 order by distance limit 100;
prepare record_vectors_shard(vector) as
    select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance
    from shard_record_vectors where space_id = 1 order by distance limit 100;
explain (costs off) execute record_vectors_single(null);
explain (costs off) execute record_vectors_shard(null);

\echo '-- 3b. window vectors, top 20 with their members, windows placed by thread (375 windows a partition: read whole)'
prepare window_vectors_shard(vector) as
    select w.window_id, (w.embedding::vector(384) <=> $1::vector(384)) as distance,
           array(select m.record_id from shard_window_members as m
                 where m.thread_id = w.thread_id and m.window_id = w.window_id order by m.record_id) as members
    from shard_windows as w where w.space_id = 1 order by distance limit 20;
explain (costs off) execute window_vectors_shard(null);

\echo '-- 3c. full text (narrow) with distances: a join of co-located tables, partition by partition'
set enable_partitionwise_join = on;
set enable_partitionwise_aggregate = on;
prepare fulltext_narrow(vector) as
    select r.record_id, rv.embedding <=> $1 as distance
    from shard_records as r
    left join shard_record_vectors as rv on rv.record_id = r.record_id and rv.space_id = 1
    where r.content_search @@ 'kowalski'::tsquery
    order by distance nulls last, r.record_id;
explain (costs off) execute fulltext_narrow(null);

\echo '-- 3d. strict isolation, readable lanes lane-07 and lane-11: placed by lane, the other partitions are pruned'
prepare strict_by_lane(vector) as
    select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance
    from lane_record_vectors where space_id = 1 and lane_name = any (array['lane-07', 'lane-11'])
    order by distance limit 100;
explain (costs off) execute strict_by_lane(null);
\echo '-- 3e. strict isolation, placed by record: every partition runs, each filtered by lane'
prepare strict_by_record(vector) as
    select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance
    from shard_record_vectors where space_id = 1 and lane_name = any (array['lane-07', 'lane-11'])
    order by distance limit 100;
explain (costs off) execute strict_by_record(null);
\echo '-- 3f. the plan of a shard too large to read a lane whole (forced here: seq scans, bitmap scans and sorts off)'
set enable_seqscan = off;
set enable_bitmapscan = off;
set enable_sort = off;
prepare strict_large_lane(vector) as
    select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance
    from shard_record_vectors where space_id = 1 and lane_name = 'lane-00'
    order by distance limit 100;
explain (costs off) execute strict_large_lane(null);
reset enable_seqscan;
reset enable_bitmapscan;
reset enable_sort;
reset plan_cache_mode;

-- ---- 4. Per-shard top k + merge against one table ---------------------------------------------
-- For each of 20 questions: the exact answer (no index: ORDER BY the uncast expression, which no
-- index serves), the one-index HNSW answer, and the per-shard answers merged as Citus merges them.
-- At ef_search 100 the planner reads partitions this small (3,700 rows) exactly, which is the
-- right plan for them; the HNSW figures are taken with enable_seqscan and enable_sort off so that
-- they measure the per-shard indexes a large shard would use.
\echo '== 4. per-shard top k + merge (20 questions; ef_search 100)'
set hnsw.ef_search = 100;

\echo '-- 4a. record vectors, top 100'
create temporary table record_vectors_exact as
select q.q, exact.record_ids as exact, exact.ms as exact_ms,
       shards.record_ids as exact_shards, shards.slowest_ms as exact_slowest_shard_ms
from questions as q
cross join lateral one_table_top(
    'select record_id, embedding <=> $1 as distance from single_record_vectors%1$s
     where space_id = 1 order by distance, record_id', q.embedding, 100) as exact
cross join lateral per_shard_top(
    'select record_id, embedding <=> $1 as distance from shard_record_vectors%1$s
     where space_id = 1 order by distance, record_id', q.embedding, 100) as shards;
set enable_seqscan = off;
set enable_sort = off;
create temporary table record_vectors_hnsw as
select q.q, single.record_ids as hnsw_single, single.ms as hnsw_single_ms,
       merge_append.record_ids as hnsw_merge_append, merge_append.ms as hnsw_merge_append_ms,
       shards.record_ids as hnsw_shards, shards.slowest_ms as hnsw_slowest_shard_ms,
       shards.total_ms as hnsw_all_shards_ms
from questions as q
cross join lateral one_table_top(
    'select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance from single_record_vectors%1$s
     where space_id = 1 order by distance', q.embedding, 100) as single
cross join lateral one_table_top(
    'select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance from shard_record_vectors%1$s
     where space_id = 1 order by distance', q.embedding, 100) as merge_append
cross join lateral per_shard_top(
    'select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance from shard_record_vectors%1$s
     where space_id = 1 order by distance', q.embedding, 100) as shards;
reset enable_seqscan;
reset enable_sort;
select count(*) filter (where exact_shards = exact) as exact_merge_identical_of_20,
       count(*) filter (where hnsw_shards = hnsw_merge_append) as shard_limits_merged_eq_merge_append_of_20,
       round(avg(recall(hnsw_single, exact))::numeric, 3) as recall_one_index,
       round(avg(recall(hnsw_shards, exact))::numeric, 3) as recall_per_shard_indexes,
       round(avg(exact_ms)::numeric, 2) as exact_ms,
       round(avg(exact_slowest_shard_ms)::numeric, 2) as exact_slowest_shard_ms,
       round(avg(hnsw_single_ms)::numeric, 2) as one_index_ms,
       round(avg(hnsw_merge_append_ms)::numeric, 2) as merge_append_ms,
       round(avg(hnsw_slowest_shard_ms)::numeric, 2) as slowest_shard_ms,
       round(avg(hnsw_all_shards_ms)::numeric, 2) as all_shards_ms
from record_vectors_exact join record_vectors_hnsw using (q);

\echo '-- 4b. a broad tag (meeting, 12%), reach 30: filtered iterative HNSW scans'
set hnsw.iterative_scan = strict_order;
create temporary table broad_tag_exact as
select q.q, exact.record_ids as exact, exact.ms as exact_ms,
       shards.record_ids as exact_shards, shards.slowest_ms as exact_slowest_shard_ms
from questions as q
cross join lateral one_table_top(
    'select rv.record_id, rv.embedding <=> $1 as distance from single_record_vectors%1$s as rv
     where rv.space_id = 1 and exists (select from single_record_tags%1$s as rt
                                       where rt.record_id = rv.record_id and rt.tag = ''meeting'')
     order by distance, rv.record_id', q.embedding, 30) as exact
cross join lateral per_shard_top(
    'select rv.record_id, rv.embedding <=> $1 as distance from shard_record_vectors%1$s as rv
     where rv.space_id = 1 and exists (select from shard_record_tags%1$s as rt
                                       where rt.record_id = rv.record_id and rt.tag = ''meeting'')
     order by distance, rv.record_id', q.embedding, 30) as shards;
set enable_seqscan = off;
set enable_sort = off;
create temporary table broad_tag_hnsw as
select q.q, single.record_ids as hnsw_single, single.ms as hnsw_single_ms,
       shards.record_ids as hnsw_shards, shards.slowest_ms, shards.total_ms
from questions as q
cross join lateral one_table_top(
    'select rv.record_id, (rv.embedding::vector(384) <=> $1::vector(384)) as distance
     from single_record_vectors%1$s as rv
     where rv.space_id = 1 and exists (select from single_record_tags%1$s as rt
                                       where rt.record_id = rv.record_id and rt.tag = ''meeting'')
     order by distance', q.embedding, 30) as single
cross join lateral per_shard_top(
    'select rv.record_id, (rv.embedding::vector(384) <=> $1::vector(384)) as distance
     from shard_record_vectors%1$s as rv
     where rv.space_id = 1 and exists (select from shard_record_tags%1$s as rt
                                       where rt.record_id = rv.record_id and rt.tag = ''meeting'')
     order by distance', q.embedding, 30) as shards;
reset enable_seqscan;
reset enable_sort;
reset hnsw.iterative_scan;
select count(*) filter (where exact_shards = exact) as exact_merge_identical_of_20,
       round(avg(recall(hnsw_single, exact))::numeric, 3) as recall_one_index,
       round(avg(recall(hnsw_shards, exact))::numeric, 3) as recall_per_shard_indexes,
       round(avg(exact_ms)::numeric, 2) as exact_ms,
       round(avg(exact_slowest_shard_ms)::numeric, 2) as exact_slowest_shard_ms,
       round(avg(hnsw_single_ms)::numeric, 2) as one_index_ms,
       round(avg(slowest_ms)::numeric, 2) as slowest_shard_ms,
       round(avg(total_ms)::numeric, 2) as all_shards_ms
from broad_tag_exact join broad_tag_hnsw using (q);

\echo '-- 4c. degraded broad tag: first 30 in record-id order, per shard then merged'
select (select array_agg(record_id order by record_id) from (
            select record_id from single_record_tags where tag = 'meeting' order by record_id limit 30) as t)
     = (select array_agg(record_id order by record_id) from (
            select record_id from (
                select record_id, row_number() over (partition by tableoid order by record_id) as n
                from shard_record_tags where tag = 'meeting') as per_shard
            where n <= 30 order by record_id limit 30) as t) as identical;

\echo '-- 4d. window vectors, top 20 windows (placed by thread), with their members'
create temporary table window_exact as
select q.q, exact.record_ids as exact, shards.record_ids as exact_shards
from questions as q
cross join lateral one_table_top(
    'select window_id as record_id, embedding <=> $1 as distance from single_windows%1$s
     where space_id = 1 order by distance, window_id', q.embedding, 20) as exact
cross join lateral per_shard_top(
    'select window_id as record_id, embedding <=> $1 as distance from shard_windows%1$s
     where space_id = 1 order by distance, window_id', q.embedding, 20) as shards;
set enable_seqscan = off;
set enable_sort = off;
create temporary table window_hnsw as
select q.q, single.record_ids as hnsw_single, shards.record_ids as hnsw_shards
from questions as q
cross join lateral one_table_top(
    'select window_id as record_id, (embedding::vector(384) <=> $1::vector(384)) as distance
     from single_windows%1$s where space_id = 1 order by distance', q.embedding, 20) as single
cross join lateral per_shard_top(
    'select window_id as record_id, (embedding::vector(384) <=> $1::vector(384)) as distance
     from shard_windows%1$s where space_id = 1 order by distance', q.embedding, 20) as shards;
reset enable_seqscan;
reset enable_sort;
select count(*) filter (where exact_shards = exact) as exact_merge_identical_of_20,
       round(avg(recall(hnsw_single, exact))::numeric, 3) as recall_one_index,
       round(avg(recall(hnsw_shards, exact))::numeric, 3) as recall_per_shard_indexes,
       -- the members a window adds, read from its own partition, are those of the one table
       bool_and((select array_agg(m.record_id order by m.window_id, m.record_id) from shard_window_members as m
                 where m.window_id = any (exact))
                = (select array_agg(m.record_id order by m.window_id, m.record_id) from single_window_members as m
                   where m.window_id = any (exact))) as same_members
from window_exact join window_hnsw using (q);

\echo '-- 4e. tags and edges (the default order, read whole): the tag rare-topic and the edges labelled audited'
-- Today's SQL joins edge_labels to edges to reach both ends; with one label row per end, kept in
-- the end's partition, each shard finds its own candidates. One table: the edges table itself.
create temporary table tags_and_edges as
select q.q,
       array(select found.record_id from (
                 select rt.record_id from single_record_tags as rt where rt.tag = 'rare-topic'
                 union
                 select ends.endpoint from corpus_edges as e
                 cross join lateral (values (e.from_record_id), (e.to_record_id)) as ends (endpoint)
                 where e.label = 'audited') as found (record_id)
             left join single_record_vectors as rv on rv.space_id = 1 and rv.record_id = found.record_id
             order by rv.embedding <=> q.embedding nulls last, found.record_id) as one_table,
       shards.record_ids as shards
from questions as q
cross join lateral per_shard_top(
    'select found.record_id, rv.embedding <=> $1 as distance from (
         select rt.record_id from shard_record_tags%1$s as rt where rt.tag = ''rare-topic''
         union
         select el.record_id from shard_edge_labels%1$s as el
         where el.label_terms && array[''audited''] and el.label_terms <@ array[''audited'']) as found (record_id)
     left join shard_record_vectors%1$s as rv on rv.space_id = 1 and rv.record_id = found.record_id
     order by distance nulls last, found.record_id', q.embedding, 100000) as shards;
select count(*) filter (where shards = one_table) as identical_of_20,
       min(cardinality(one_table)) as candidates,
       (select count(*) from corpus_edges as e
        join shard_records as f on f.record_id = e.from_record_id
        join shard_records as t on t.record_id = e.to_record_id
        where f.tableoid <> t.tableoid) as edges_across_partitions,
       (select count(*) from single_edge_labels where lane_name <> other_lane_name) / 2 as edges_across_lanes,
       (select count(*) from corpus_edges) as edges
from tags_and_edges;

-- ---- 5. The lane rule ---------------------------------------------------------------------------
-- A caller reading lane-07 and lane-11 (1,469 of 30,000 records). page_filter (the default) runs
-- every lookup over every lane and cuts the page before removing unreadable records; strict
-- isolation runs every lookup over the readable lanes only.
\echo '== 5. lanes: readable lane-07 and lane-11 (4.9% of the records), top 100'
create temporary table lane_exact as
select q.q, exact.record_ids as exact, exact.ms as exact_ms,
       by_record.record_ids as by_record, by_record.slowest_ms as by_record_slowest_ms,
       by_record.total_ms as by_record_all_ms,
       by_lane.record_ids as by_lane, by_lane.ms as by_lane_ms
from questions as q
cross join lateral one_table_top(
    'select record_id, embedding <=> $1 as distance from single_record_vectors%1$s
     where space_id = 1 and lane_name = any (array[''lane-07'', ''lane-11'']) order by distance, record_id',
    q.embedding, 100) as exact
-- the planner's own choice on each partition (it reads a small lane through its b-tree, exactly)
cross join lateral per_shard_top(
    'select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance from shard_record_vectors%1$s
     where space_id = 1 and lane_name = any (array[''lane-07'', ''lane-11'']) order by distance, record_id',
    q.embedding, 100) as by_record
cross join lateral one_table_top(
    'select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance from lane_record_vectors%1$s
     where space_id = 1 and lane_name = any (array[''lane-07'', ''lane-11'']) order by distance, record_id',
    q.embedding, 100) as by_lane;
set enable_seqscan = off;
set enable_sort = off;
set enable_bitmapscan = off;
create temporary table lane_seed as
select q.q,
       (select count(*) from single_record_vectors as rv
        where rv.record_id = any (seed.record_ids) and rv.lane_name = any (array['lane-07', 'lane-11'])) as seed_readable,
       post_filter.record_ids as post_filter
from questions as q
-- page_filter's record-vector lookup: the nearest 100 of every lane
cross join lateral one_table_top(
    'select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance from single_record_vectors%1$s
     where space_id = 1 order by distance', q.embedding, 100) as seed
-- one HNSW scan with the lanes as a filter after it (ef_search 100): other lanes use up the scan
cross join lateral one_table_top(
    'select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance from single_record_vectors%1$s
     where space_id = 1 and lane_name = any (array[''lane-07'', ''lane-11'']) order by distance',
    q.embedding, 100) as post_filter;
-- the same per shard with pgvector's iterative scan, as the broad lists read
set hnsw.iterative_scan = strict_order;
create temporary table lane_iterative as
select q.q, iterative.record_ids as iterative
from questions as q
cross join lateral per_shard_top(
    'select record_id, (embedding::vector(384) <=> $1::vector(384)) as distance from shard_record_vectors%1$s
     where space_id = 1 and lane_name = any (array[''lane-07'', ''lane-11'']) order by distance',
    q.embedding, 100) as iterative;
reset hnsw.iterative_scan;
reset enable_seqscan;
reset enable_sort;
reset enable_bitmapscan;
select round(avg(seed_readable), 1) as seed_readable_of_100,
       round(avg(cardinality(post_filter)), 1) as post_filter_rows,
       round(avg(cardinality(iterative)), 1) as iterative_rows,
       round(avg(recall(iterative, exact))::numeric, 3) as iterative_recall,
       count(*) filter (where by_record = exact) as by_record_identical_of_20,
       count(*) filter (where by_lane = exact) as by_lane_identical_of_20,
       round(avg(exact_ms)::numeric, 2) as one_table_ms,
       round(avg(by_record_slowest_ms)::numeric, 2) as by_record_slowest_shard_ms,
       round(avg(by_record_all_ms)::numeric, 2) as by_record_all_shards_ms,
       round(avg(by_lane_ms)::numeric, 2) as by_lane_pruned_ms
from lane_exact join lane_seed using (q) join lane_iterative using (q);

-- ---- 6. Totals ----------------------------------------------------------------------------------
-- A mixed question: the tags meeting and topic-8, the terms q3 and kowalski, the nearest 100
-- records and the members of the nearest 20 windows (question 1). Every candidate is a record and
-- every record lives in one partition with all its rows, so the distinct union is a sum of
-- per-partition distinct unions: nothing to deduplicate across shards. The fetched lists (vectors,
-- windows) are ids the coordinator holds; each shard counts those it owns.
\echo '== 6. totals: the distinct union as a sum over shards'
create function shard_union_count(part text, fetched bigint[], lanes text[]) returns bigint
language plpgsql as $$
declare
    n bigint;
begin
    execute format($f$
        select count(*) from (
            select rt.record_id from shard_record_tags%1$s as rt
            where rt.tag = any (array['meeting', 'topic-8']) and ($2 is null or rt.lane_name = any ($2))
            union
            select r.record_id from shard_records%1$s as r
            where r.content_search @@ 'q3 | kowalski'::tsquery and ($2 is null or r.lane_name = any ($2))
            union
            select r.record_id from shard_records%1$s as r
            where r.record_id = any ($1) and ($2 is null or r.lane_name = any ($2))) as candidates
        $f$, part) into n using fetched, lanes;
    return n;
end
$$;
with fetched as (
    select (select exact from record_vectors_exact where q = 1)
           || array(select m.record_id from single_window_members as m, window_exact as w
                    where w.q = 1 and m.window_id = any (w.exact)) as ids
), global as (
    select (select count(*) from (
                select record_id from single_record_tags where tag = any (array['meeting', 'topic-8'])
                union select record_id from single_records where content_search @@ 'q3 | kowalski'::tsquery
                union select unnest(ids)) as c) as every_lane,
           (select count(*) from (
                select record_id from single_record_tags
                where tag = any (array['meeting', 'topic-8']) and lane_name = any (array['lane-07', 'lane-11'])
                union select record_id from single_records
                where content_search @@ 'q3 | kowalski'::tsquery and lane_name = any (array['lane-07', 'lane-11'])
                union select record_id from single_records
                where record_id = any (ids) and lane_name = any (array['lane-07', 'lane-11'])) as c) as readable
    from fetched
)
select global.every_lane as one_table_distinct,
       (select sum(shard_union_count('_p' || p, fetched.ids, null)) from generate_series(0, 7) as p) as sum_of_shards,
       global.readable as one_table_readable,
       (select sum(shard_union_count('_p' || p, fetched.ids, array['lane-07', 'lane-11']))
        from generate_series(0, 7) as p) as sum_of_shards_readable,
       (select array_agg(shard_union_count('_p' || p, fetched.ids, null) order by p)
        from generate_series(0, 7) as p) as per_shard
from global, fetched;

-- ---- 7. Document frequencies and IDF ------------------------------------------------------------
\echo '== 7. document frequencies across shards'
\echo '-- 7a. counted: the sum of per-shard counts is the count; an IDF from one shard alone differs by shard'
with terms (term) as (values ('q3'), ('kowalski'), ('topic-8')),
global as (
    select t.term, count(*) filter (where r.content_search @@ to_tsquery('emem.exact', t.term)) as df
    from terms as t cross join single_records as r group by t.term
), per_shard as (
    select t.term, r.tableoid::regclass::text as shard,
           count(*) filter (where r.content_search @@ to_tsquery('emem.exact', t.term)) as df, count(*) as n
    from terms as t cross join shard_records as r group by t.term, r.tableoid
)
select g.term, g.df as df, sum(s.df) as sum_of_shard_df, array_agg(s.df order by s.shard) as per_shard_df,
       round(ln(1 + (30000 - g.df + 0.5) / (g.df + 0.5))::numeric, 3) as idf,
       round(min(ln(1 + (s.n - s.df + 0.5) / (s.df + 0.5)))::numeric, 3) as lowest_shard_idf,
       round(max(ln(1 + (s.n - s.df + 0.5) / (s.df + 0.5)))::numeric, 3) as highest_shard_idf
from global as g join per_shard as s using (term)
group by g.term, g.df order by g.df desc;

\echo '-- 7b. from statistics (ANALYZE): one table against the per-shard statistics combined (sum of share x rows)'
with elements as (
    select s.tablename, c.reltuples, e.lexeme, e.share
    from pg_stats as s
    join pg_class as c on c.relname = s.tablename and c.relnamespace = 'scaleout_check'::regnamespace
    cross join lateral unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) as e (lexeme, share)
    where s.schemaname = 'scaleout_check' and s.attname = 'content_search'
      and (s.tablename = 'single_records' or s.tablename like 'shard\_records\_p%') and e.lexeme is not null
)
select t.term,
       (select count(*) from single_records where content_search @@ to_tsquery('emem.exact', t.term)) as counted_df,
       (select round(share * reltuples) from elements where tablename = 'single_records' and lexeme = t.term)
           as one_table_estimate,
       (select round(sum(share * reltuples)) from elements where tablename <> 'single_records' and lexeme = t.term)
           as shards_estimate,
       (select count(*) from elements where tablename <> 'single_records' and lexeme = t.term) as shards_listing_it
from (values ('q3'), ('kowalski')) as t (term);

\echo '-- 7c. a list ordered by summed IDF (q3, kowalski, topic-8): first 30 with global IDF vs. shard-local IDF'
with terms (term) as (values ('q3'), ('kowalski'), ('topic-8')),
global as (
    select t.term, count(*) filter (where r.content_search @@ to_tsquery('emem.exact', t.term)) as df
    from terms as t cross join single_records as r group by t.term
), per_shard as (
    select t.term, r.tableoid as shard,
           count(*) filter (where r.content_search @@ to_tsquery('emem.exact', t.term)) as df, count(*) as n
    from terms as t cross join shard_records as r group by t.term, r.tableoid
), scored as (
    select r.record_id,
           sum(ln(1 + (30000 - g.df + 0.5) / (g.df + 0.5))) as global_score,
           sum(ln(1 + (s.n - s.df + 0.5) / (s.df + 0.5))) as shard_score
    from shard_records as r
    join terms as t on r.content_search @@ to_tsquery('emem.exact', t.term)
    join global as g on g.term = t.term
    join per_shard as s on s.term = t.term and s.shard = r.tableoid
    group by r.record_id
), global_first as (
    select array(select record_id from scored order by global_score desc, record_id limit 30) as ids
), shard_local_first as (
    select array(select record_id from scored order by shard_score desc, record_id limit 30) as ids
)
select (select count(*) from generate_series(1, 30) as i where g.ids[i] = l.ids[i]) as same_rank_of_30,
       round(recall(l.ids, g.ids)::numeric, 3) as same_records_share
from global_first as g, shard_local_first as l;

\if :{?keep}
\echo 'schema scaleout_check kept (-v keep=1)'
\else
drop schema scaleout_check cascade;
\endif
