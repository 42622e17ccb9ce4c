"""The console's server-rendered pages (read the mirror only; never ZooKeeper)."""
