"""Server-side paging: one COUNT and one LIMIT/OFFSET query per list, whatever its size."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from django.core.paginator import Paginator
from django.db.models import QuerySet

__all__ = ["DEFAULT_PER_PAGE", "MAX_PER_PAGE", "Page", "paginate", "parse_int"]

T = TypeVar("T")
U = TypeVar("U")
DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 500


def parse_int(raw: Any, default: int, low: int, high: int) -> int:
    """`raw` as an int clamped to [low, high]; `default` when it is not a number."""
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return default
    return min(high, max(low, value))


@dataclass(frozen=True)
class Page(Generic[T]):
    items: Sequence[T]
    number: int
    num_pages: int
    total: int
    per_page: int

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.num_pages

    @property
    def previous_number(self) -> int:
        return max(1, self.number - 1)

    @property
    def next_number(self) -> int:
        return min(self.num_pages, self.number + 1)

    @property
    def start_index(self) -> int:
        return 0 if self.total == 0 else (self.number - 1) * self.per_page + 1

    @property
    def end_index(self) -> int:
        return min(self.total, self.number * self.per_page)

    def map(self, shape: Callable[[list[T]], list[U]]) -> Page[U]:
        """The same page with its items shaped by `shape` (called once, on the whole list)."""
        return replace(self, items=shape(list(self.items)))  # type: ignore[arg-type,return-value]


def paginate(queryset: QuerySet[Any], page: Any, per_page: Any = None) -> Page[Any]:
    """Page `page` (1-based, clamped into range) of `queryset`."""
    size = parse_int(per_page, DEFAULT_PER_PAGE, 1, MAX_PER_PAGE)
    paginator = Paginator(queryset, size, allow_empty_first_page=True)
    current = paginator.get_page(parse_int(page, 1, 1, 10**9))
    return Page(
        items=list(current.object_list),
        number=current.number,
        num_pages=paginator.num_pages,
        total=paginator.count,
        per_page=size,
    )
