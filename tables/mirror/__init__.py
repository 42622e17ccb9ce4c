"""The ZooKeeper -> database mirror and its one read model.

- `sync`: `sync_cluster(ctx)` brings the mirror models of `tables.models` up to date with the
  cluster, incrementally by znode version; `tables` (MirroredTable rows), `segment_rows`
  (MirroredSegment rows), `partitions` (PartitionStatus, ConsumptionSample, table health from the
  servers' live state), `zk_reads` (pipelined ZooKeeper reads) and `bulk` (plain multi-row
  database writes) are its parts. Only the sync writes mirror rows.
- `read_model`: the queries every reader shares (the console's pages, `/api/v1/`, `/metrics`):
  the mirror's freshness and the table, segment, leader, instance and audit filters.
- `flags`: flags derived from mirror rows (under-replicated, never committed, ingestion
  problems) that pages, `/api/v1/`, `/healthz` and the sync share.
- `diagnose`: the ingestion doctor over mirror rows (pages), and the repairs due now that make
  the sync request a healing run (`tables.healing_triggers`); `streams`: the stream's partition
  count of each table, read by the sync.

Nothing here is read by the ingestion servers or the controller; readers never touch ZooKeeper.
"""
