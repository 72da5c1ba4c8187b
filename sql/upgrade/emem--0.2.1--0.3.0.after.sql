-- emem 0.2.1 -> 0.3.0, after the code: the label rows of every edge, written by 0.3.0's own
-- function (the same rows link_records writes).

select emem._write_edge_labels(array(select e.edge_id from emem.edges as e order by e.edge_id));

-- Strict profiles' lanes read their vectors from indexes of their own (emem._sync_lane_indexes).
select emem._sync_lane_indexes();
