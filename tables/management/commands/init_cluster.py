"""Create the cluster skeleton in ZooKeeper (idempotent; never overwrites what exists)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from tables.cluster import context
from tables.domain.leadership import DEFAULT_NUM_PARTITIONS
from tables.zk.cluster import init_cluster


class Command(BaseCommand):
    help = "Create the Helix/Pinot cluster skeleton in ZooKeeper (safe to run again)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--lead-controller-partitions",
            type=int,
            default=DEFAULT_NUM_PARTITIONS,
            help="partitions of leadControllerResource for a new cluster (Pinot: 24)",
        )

    def handle(self, *args: object, **options: object) -> None:
        ctx = context.current()
        created = init_cluster(ctx.client, ctx.paths, int(options["lead_controller_partitions"]))
        if created:
            self.stdout.write(f"cluster {ctx.paths.cluster}: created {len(created)} znodes")
        else:
            self.stdout.write(f"cluster {ctx.paths.cluster}: already initialised")
