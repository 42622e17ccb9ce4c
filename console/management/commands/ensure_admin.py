"""Create or update the local admin account and print its credentials (used by `make demo`).

The username and password come from DEMO_ADMIN_USER / DEMO_ADMIN_PASSWORD when given; otherwise the
password is generated anew on each run and printed.
"""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Create or update the local admin account and print its credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default=None)
        parser.add_argument("--password", default=None)

    def handle(self, *args: object, **options: object) -> None:
        from django.conf import settings

        username = options["username"] or settings.DEMO_ADMIN_USER
        password = options["password"] or settings.DEMO_ADMIN_PASSWORD or secrets.token_urlsafe(12)
        user, created = get_user_model().objects.get_or_create(username=username)
        user.is_staff = user.is_superuser = user.is_active = True
        user.set_password(password)
        user.save()
        verb = "created" if created else "updated"
        self.stdout.write(f"Admin account {verb}: username {username!r}, password {password!r}")
