"""Errors of segment builds. `DataLoss` is a `BuildError`, so callers that only care whether a
build failed catch one class; callers that can accept losing rows catch `DataLoss` first."""

from __future__ import annotations

__all__ = ["BuildError", "DataLoss"]


class BuildError(Exception):
    """A segment could not be built; the message says why in one sentence."""


class DataLoss(BuildError):
    """The stream no longer holds (all of) the offset range to re-ingest.

    `first_available_offset` is the earliest offset the stream partition still held;
    `missing` is how many offsets of the requested range were not found.
    """

    def __init__(self, message: str, first_available_offset: int, missing: int) -> None:
        super().__init__(message)
        self.first_available_offset = first_available_offset
        self.missing = missing
