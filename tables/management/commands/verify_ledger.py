"""Check a realtime table's exactly-once ledger (ARCHITECTURE §4).

    manage.py verify_ledger <table> [--rows] [--key-field __key] [--lost P:FROM:TO ...]

Reads the segments' metadata from ZooKeeper and checks, per partition, that the DONE segments'
`[startOffset, endOffset)` ranges are contiguous and do not overlap (open segments must start
where the committed ones end). `--rows` also downloads every DONE segment from the deep store and
compares the offsets it holds with the messages the stream holds for the committed ranges: every
produced row in exactly one segment, inside its range, and no key produced twice. `--lost` names a
stream loss already counted (offsets FROM up to, not including, TO of partition P); it excuses a
gap of exactly that range. Repeatable.

Prints a summary line, then each problem and each note, one line each; exits non-zero (a
CommandError) on any gap, overlap, missing or duplicated row. The checks live in
`tables.domain.ledger`; `tables.ledger` gathers their inputs.
"""

from __future__ import annotations

from typing import Any

import redis
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tables.cluster import context
from tables.cluster.errors import ServiceError
from tables.domain.ledger import LostRange
from tables.ledger import verify_table
from tables.streams.base import StreamError
from tables.streams.producer import DEFAULT_KEY_FIELD


def lost_range(text: str) -> LostRange:
    """`P:FROM:TO` as a LostRange (argparse type)."""
    parts = text.split(":")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--lost {text!r}: expected PARTITION:FROM:TO (three numbers)")
    partition, start, end = (int(p) for p in parts)
    if end <= start:
        raise ValueError(f"--lost {text!r}: TO must be greater than FROM")
    return LostRange(partition, start, end)


class Command(BaseCommand):
    help = "Check that every produced row of a realtime table is in exactly one committed segment."
    requires_system_checks = []  # ZooKeeper and the stream are checked by using them

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("table", help="raw table name or <raw>_REALTIME")
        parser.add_argument(
            "--rows",
            action="store_true",
            help="also compare the rows of each DONE segment (from the deep store) with the stream",
        )
        parser.add_argument("--key-field", default=DEFAULT_KEY_FIELD)
        parser.add_argument(
            "--lost",
            action="append",
            default=[],
            metavar="P:FROM:TO",
            help="a stream loss already counted: offsets [FROM, TO) of partition P",
        )

    def handle(self, *args: object, **options: Any) -> None:
        table: str = options["table"]
        try:
            lost = [lost_range(text) for text in options["lost"]]
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        try:
            report = verify_table(
                context.current(),
                table,
                rows=options["rows"],
                key_field=options["key_field"],
                lost=lost,
            )
        except ServiceError as exc:
            raise CommandError(exc.message) from None
        except StreamError as exc:
            raise CommandError(f"the stream of table {table}: {exc}") from None
        except redis.RedisError as exc:
            raise CommandError(f"Redis failed while reading the stream of {table}: {exc}") from None
        self.stdout.write(f"ledger of {table}: {report.summary()}")
        for problem in report.problems:
            self.stdout.write(f"PROBLEM {problem}")
        for note in report.notes:
            self.stdout.write(f"note: {note}")
        if not report.ok:
            first = report.problems[0]
            raise CommandError(
                f"ledger of {table} is broken: {len(report.problems)} problem(s), first: {first}"
            )
