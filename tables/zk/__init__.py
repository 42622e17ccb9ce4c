"""ZooKeeper access. The only package that imports kazoo (ARCHITECTURE.md §3)."""
