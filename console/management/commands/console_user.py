"""Create, update or delete a console account and set its role (`console.roles`).

    python manage.py console_user alice --role operator --password-stdin < pw.txt
    python manage.py console_user ci-bot --role viewer --token      # prints a DRF API token
    python manage.py console_user alice --delete

The account ends with exactly one role group (viewer, operator or admin). `--role admin` also
sets is_staff; is_superuser is never changed. A new account without a password gets an unusable
one (token or SSO only). `--token` prints the account's API token (`Authorization: Token <key>`),
creating it if absent. Every change is audited (action "manage_users", source "cli").
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from console import roles
from tables.models import AuditEntry

ACTION = "manage_users"


def _cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _audit(target: str, detail: dict[str, Any]) -> None:
    AuditEntry.objects.create(
        at=timezone.now(),
        username=_cli_actor()[:150],
        role="",
        action=ACTION,
        target=target,
        result=AuditEntry.Result.OK,
        detail=detail,
        source="cli",
    )


class Command(BaseCommand):
    help = "Create, update or delete a console account, set its role, print an API token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", help=f"one of: {', '.join(roles.ROLES)}")
        secret = parser.add_mutually_exclusive_group()
        secret.add_argument(
            "--password-stdin", action="store_true", help="read the password from stdin"
        )
        secret.add_argument("--password-file", help="read the password from this file")
        parser.add_argument(
            "--token", action="store_true", help="print the account's API token (create if absent)"
        )
        parser.add_argument("--delete", action="store_true", help="delete the account")

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"].strip()
        if not username:
            raise CommandError("the username must not be empty")
        role: str | None = options["role"]
        if role is not None and role not in roles.ROLES:
            raise CommandError(f"unknown role {role!r}: use one of {', '.join(roles.ROLES)}")
        if options["delete"]:
            if role or options["token"] or options["password_stdin"] or options["password_file"]:
                raise CommandError("--delete takes no other option")
            self._delete(username)
            return
        password = self._password(options)
        self._save(username, role, password, token=options["token"])

    def _password(self, options: dict[str, Any]) -> str | None:
        if options["password_stdin"]:
            text = sys.stdin.readline()
        elif options["password_file"]:
            try:
                text = Path(options["password_file"]).read_text(encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"cannot read the password file: {exc}") from None
        else:
            return None
        password = text.splitlines()[0] if text.strip() else ""
        if not password:
            raise CommandError("the password is empty")
        return password

    @transaction.atomic
    def _save(self, username: str, role: str | None, password: str | None, token: bool) -> None:
        model = get_user_model()
        user = model.objects.filter(username=username).first()
        created = user is None
        if created:
            if role is None:
                raise CommandError(f"account {username!r} does not exist: give its --role")
            user = model(username=username)
        if password is not None:
            try:
                validate_password(password, user)
            except ValidationError as exc:
                raise CommandError("password refused: " + " ".join(exc.messages)) from None
            user.set_password(password)
        elif created:
            user.set_unusable_password()
        if role is not None:
            user.is_staff = role == roles.ADMIN or user.is_superuser
        user.save()
        changes: dict[str, Any] = {"created": created, "passwordChanged": password is not None}
        if role is not None:
            groups = {g.name: g for g in Group.objects.filter(name__in=roles.ROLES)}
            if role not in groups:
                raise CommandError("the role groups are missing: run `python manage.py migrate`")
            user.groups.remove(*[g for name, g in groups.items() if name != role])
            user.groups.add(groups[role])
            changes["role"] = role
        if token:
            api_token, changes["tokenCreated"] = Token.objects.get_or_create(user=user)
        if created or role is not None or password is not None or changes.get("tokenCreated"):
            _audit(username, changes)
        verb = "created" if created else "updated"
        self._note(f"account {username!r} {verb}: role {roles.role_of(user)}")
        if token:
            self.stdout.write(api_token.key)  # alone on stdout, for scripts

    @transaction.atomic
    def _delete(self, username: str) -> None:
        deleted, _ = get_user_model().objects.filter(username=username).delete()
        if not deleted:
            raise CommandError(f"account {username!r} does not exist")
        _audit(username, {"deleted": True})
        self._note(f"account {username!r} deleted")

    def _note(self, message: str) -> None:
        """Progress goes to stderr (unstyled), so stdout holds only the token."""
        self.stderr.write(message, style_func=str)
