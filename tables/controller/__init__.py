"""The controller's roles: resources (schemas, tables: the writes), the LLC segment manager, the
segment completion protocol, pause/resume, force commit and the EXTERNALVIEW of the tables it
leads. What it shares with the server (context, errors, reads, leader lookup) is the cluster layer,
`tables.cluster`; ZooKeeper is reached only through `tables.zk`."""
