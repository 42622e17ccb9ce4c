"""Test accounts with a console role.

The role groups come from the data migration `tables.0003_role_groups`; a transactional test
(`django_db(transaction=True)`) flushes the database afterwards, groups included, so every later
test must not count on them: `grant` creates the group when it is missing.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group


def grant(user: Any, role: str) -> Any:
    """Add `user` to the group of `role` (viewer, operator, admin); returns the user."""
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user
