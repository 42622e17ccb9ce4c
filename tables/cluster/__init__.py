"""The cluster layer: what the server and the controller both read (ARCHITECTURE.md §3).

Contract: `context` (the process's ZooKeeper store, cluster paths, clock and settings), `errors`
(the service errors, one HTTP status each), `reads` (table configs, schemas, IdealStates and
segment metadata as the services see them) and `leadership` (which controller leads a table).
Everything here only reads the cluster; writes belong to the roles standing on it
(`tables.controller`, `tables.server`). This package imports neither of them.
"""
