"""Roles (`console.roles`), the `console_user` command, and the audited 403 of `OperatorAction`.

The refusal is checked on a tiny test-only view (this module is its own urlconf), so it does not
depend on any real operator endpoint.
"""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import AnonymousUser, Group
from django.core.management import CommandError, call_command
from django.urls import path
from rest_framework.authtoken.models import Token
from rest_framework.response import Response
from rest_framework.test import APIClient
from rest_framework.views import APIView

from console import roles
from console.api.cluster_auth import ClusterService
from console.audit import OperatorAction
from tables.models import AuditEntry
from tests.accounts import grant

pytestmark = pytest.mark.django_db


class PauseForTest(APIView):
    """A stand-in operator endpoint: pausing `table`."""

    permission_classes = [OperatorAction]
    audit_action = "pause"

    def post(self, request, table: str) -> Response:
        return Response({"paused": table})


urlpatterns = [
    path("test/<str:table>/pause", login_not_required(PauseForTest.as_view())),
]


def make_user(username: str, role: str | None = None, **flags):
    user = get_user_model().objects.create_user(username, password="a-long-test-password", **flags)
    if role:
        grant(user, role)
    return user


def run(*args: str, stdin: str | None = None, monkeypatch=None) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    call_command("console_user", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def group_names(username: str) -> list[str]:
    user = get_user_model().objects.get(username=username)
    return sorted(user.groups.values_list("name", flat=True))


# --- role_of / can ------------------------------------------------------------------------------


def test_role_groups_exist():
    assert set(Group.objects.values_list("name", flat=True)) >= set(roles.ROLES)


def test_role_of_each_kind_of_account():
    assert roles.role_of(None) is None
    assert roles.role_of(AnonymousUser()) is None
    assert roles.role_of(make_user("nogroup")) == roles.VIEWER
    assert roles.role_of(make_user("v", roles.VIEWER)) == roles.VIEWER
    assert roles.role_of(make_user("o", roles.OPERATOR)) == roles.OPERATOR
    assert roles.role_of(make_user("a", roles.ADMIN)) == roles.ADMIN
    both = make_user("both", roles.OPERATOR)
    grant(both, roles.ADMIN)
    assert roles.role_of(both) == roles.ADMIN
    assert roles.role_of(make_user("root", is_superuser=True)) == roles.ADMIN
    assert roles.role_of(ClusterService()) == "cluster"


def test_can_by_role():
    viewer, operator = make_user("v", roles.VIEWER), make_user("o", roles.OPERATOR)
    admin = make_user("a", roles.ADMIN)
    for action in roles.OPERATOR_ACTIONS:
        assert not roles.can(viewer, action)
        assert roles.can(operator, action)
        assert roles.can(admin, action)
        assert not roles.can(ClusterService(), action)
        assert not roles.can(AnonymousUser(), action)
    assert not roles.can(operator, "manage_users")
    assert roles.can(admin, "manage_users")
    with pytest.raises(ValueError, match="unknown action"):
        roles.can(admin, "drop_everything")


# --- console_user -------------------------------------------------------------------------------


def test_console_user_creates_with_password_from_stdin(monkeypatch):
    out, err = run(
        "alice",
        "--role",
        "operator",
        "--password-stdin",
        stdin="s3cret-pass-alice\n",
        monkeypatch=monkeypatch,
    )
    assert out == ""
    assert "created" in err
    alice = get_user_model().objects.get(username="alice")
    assert alice.check_password("s3cret-pass-alice")
    assert group_names("alice") == ["operator"]
    assert not alice.is_staff
    entry = AuditEntry.objects.get(action="manage_users", target="alice")
    assert entry.source == "cli"
    assert entry.result == "OK"
    assert entry.detail["created"] is True
    assert entry.detail["role"] == "operator"


def test_console_user_password_file(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("file-based-password-1\n")
    run("bob", "--role", "viewer", "--password-file", str(secret))
    assert get_user_model().objects.get(username="bob").check_password("file-based-password-1")


def test_console_user_sets_exactly_one_role_and_staff_for_admin():
    run("carol", "--role", "viewer")
    carol = get_user_model().objects.get(username="carol")
    assert not carol.has_usable_password()
    run("carol", "--role", "admin")
    carol.refresh_from_db()
    assert group_names("carol") == ["admin"]
    assert carol.is_staff
    assert roles.role_of(carol) == roles.ADMIN
    run("carol", "--role", "operator")
    carol.refresh_from_db()
    assert group_names("carol") == ["operator"]
    assert not carol.is_staff
    results = AuditEntry.objects.filter(action="manage_users", target="carol")
    assert sorted(e.detail.get("role") for e in results) == ["admin", "operator", "viewer"]


def test_console_user_keeps_superuser():
    make_user("root", is_superuser=True, is_staff=True)
    run("root", "--role", "viewer")
    root = get_user_model().objects.get(username="root")
    assert root.is_superuser
    assert root.is_staff
    assert group_names("root") == ["viewer"]


def test_console_user_token_is_printed_and_stable():
    out, _ = run("ci-bot", "--role", "viewer", "--token")
    key = out.strip()
    assert key == Token.objects.get(user__username="ci-bot").key
    again, _ = run("ci-bot", "--token")
    assert again.strip() == key
    assert group_names("ci-bot") == ["viewer"]


def test_console_user_refuses_bad_input(tmp_path):
    with pytest.raises(CommandError, match="unknown role 'superhero'"):
        run("dave", "--role", "superhero")
    with pytest.raises(CommandError, match="does not exist: give its --role"):
        run("dave")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(CommandError, match="password is empty"):
        run("dave", "--role", "viewer", "--password-file", str(empty))
    with pytest.raises(CommandError, match="cannot read the password file"):
        run("dave", "--role", "viewer", "--password-file", str(tmp_path / "missing"))
    with pytest.raises(CommandError, match="password refused"):
        run("dave", "--role", "viewer", "--password-file", str(_write(tmp_path, "short")))
    assert not get_user_model().objects.filter(username="dave").exists()
    assert not AuditEntry.objects.filter(target="dave").exists()


def _write(tmp_path, text: str):
    target = tmp_path / "pw"
    target.write_text(text)
    return target


def test_console_user_delete():
    run("erin", "--role", "operator", "--token")
    run("erin", "--delete")
    assert not get_user_model().objects.filter(username="erin").exists()
    assert not Token.objects.filter(user__username="erin").exists()
    assert AuditEntry.objects.filter(target="erin", detail__deleted=True).count() == 1
    with pytest.raises(CommandError, match="does not exist"):
        run("erin", "--delete")
    with pytest.raises(CommandError, match="--delete takes no other option"):
        run("erin", "--delete", "--role", "viewer")


# --- OperatorAction: 403 and a DENIED audit row -------------------------------------------------


@pytest.mark.urls("tests.console.test_roles")
def test_viewer_is_refused_and_audited():
    client = APIClient()
    client.force_authenticate(make_user("vic", roles.VIEWER))
    response = client.post("/test/t1/pause?comment=maintenance")
    assert response.status_code == 403
    assert response.json() == {"code": 403, "error": "role 'viewer' may not perform 'pause'"}
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.role, entry.action) == ("vic", "viewer", "pause")
    assert (entry.target, entry.reason, entry.result) == ("t1", "maintenance", "DENIED")
    assert entry.status_code == 403
    assert entry.source == "api"


@pytest.mark.urls("tests.console.test_roles")
def test_operator_is_allowed_and_anonymous_is_not_audited():
    client = APIClient()
    client.force_authenticate(make_user("olga", roles.OPERATOR))
    assert client.post("/test/t1/pause").json() == {"paused": "t1"}
    anonymous = APIClient().post("/test/t1/pause")
    assert anonymous.status_code in (401, 403)
    assert not AuditEntry.objects.exists()


@pytest.mark.urls("tests.console.test_roles")
def test_page_calls_are_audited_as_page():
    client = APIClient()
    client.force_authenticate(make_user("vic", roles.VIEWER))
    client.post("/test/t2/pause", HTTP_X_CONSOLE_PAGE="1")
    assert AuditEntry.objects.get().source == "page"
