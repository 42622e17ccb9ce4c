"""Create or update the local admin account and print its credentials (used by `make demo`).

The username comes from DEMO_ADMIN_USER (default `admin`). The password is, first found:
`--password`, DEMO_ADMIN_PASSWORD (or DEMO_ADMIN_PASSWORD_FILE), the password kept in
`<VAR_DIR>/demo_admin_password` by an earlier run, or a new random one, which is then kept in that
file (created with mode 0600, never overwritten) so that it stays the same across demo restarts.
The account is set to that password and the credentials are printed on every run.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

PASSWORD_FILE_NAME = "demo_admin_password"


def password_file() -> Path:
    return Path(settings.VAR_DIR) / PASSWORD_FILE_NAME


def kept_password(path: Path) -> str | None:
    """The password an earlier run kept in `path`, or None when there is none."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return text or None


def keep_new_password(path: Path) -> str:
    """A new random password, written to `path` (mode 0600; an existing file is an error)."""
    password = secrets.token_urlsafe(12)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(password + "\n")
    return password


class Command(BaseCommand):
    help = "Create or update the local admin account and print its credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default=None)
        parser.add_argument("--password", default=None)

    def handle(self, *args: object, **options: object) -> None:
        username = options["username"] or settings.DEMO_ADMIN_USER
        password = options["password"] or settings.DEMO_ADMIN_PASSWORD
        source = "given"
        if not password:
            path = password_file()
            password = kept_password(path)
            source = f"kept in {path}"
            if password is None:
                try:
                    password = keep_new_password(path)
                except FileExistsError:  # written meanwhile by another run: use that one
                    password = kept_password(path)
                except OSError as exc:
                    raise CommandError(f"cannot keep the admin password in {path}: {exc}") from exc
                if password is None:
                    raise CommandError(f"{path} is empty: delete it to have a password generated")
                source = f"generated, kept in {path}"
        user, created = get_user_model().objects.get_or_create(username=username)
        user.is_staff = user.is_superuser = user.is_active = True
        user.set_password(password)
        user.save()
        verb = "created" if created else "updated"
        self.stdout.write(
            f"Admin account {verb}: username {username!r}, password {password!r} ({source})"
        )
