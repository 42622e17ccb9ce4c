"""The realtime control plane: domain, ZooKeeper access, streams, segments, servers, controller."""
