"""The ingestion server: reconcile loop, partition consumers, completion client, admin HTTP."""
