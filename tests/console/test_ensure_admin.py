"""`manage.py ensure_admin`: the demo's admin password is generated once, kept in VAR_DIR (0600) and
printed on every run; DEMO_ADMIN_PASSWORD wins over it."""

from __future__ import annotations

import stat
from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    settings.DEMO_ADMIN_USER = "admin"
    settings.DEMO_ADMIN_PASSWORD = None
    return settings.VAR_DIR


def ensure_admin(*args: str) -> str:
    out = StringIO()
    call_command("ensure_admin", *args, stdout=out)
    return out.getvalue()


def test_a_generated_password_is_kept_and_printed_on_every_run(var_dir):
    first = ensure_admin()

    kept = var_dir / "demo_admin_password"
    password = kept.read_text().strip()
    assert len(password) >= 16
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert f"Admin account created: username 'admin', password {password!r}" in first
    assert f"generated, kept in {kept}" in first

    second = ensure_admin()

    assert f"Admin account updated: username 'admin', password {password!r}" in second
    assert f"(kept in {kept})" in second
    assert kept.read_text().strip() == password
    assert authenticate(username="admin", password=password) is not None


def test_demo_admin_password_wins_and_leaves_the_kept_one_alone(var_dir, settings):
    ensure_admin()
    kept = (var_dir / "demo_admin_password").read_text()
    settings.DEMO_ADMIN_PASSWORD = "chosen-by-the-operator"

    output = ensure_admin()

    assert "password 'chosen-by-the-operator' (given)" in output
    assert (var_dir / "demo_admin_password").read_text() == kept
    assert authenticate(username="admin", password="chosen-by-the-operator") is not None
    user = get_user_model().objects.get(username="admin")
    assert user.is_superuser and user.is_staff


def test_an_empty_kept_file_is_refused(var_dir):
    var_dir.mkdir(parents=True)
    (var_dir / "demo_admin_password").write_text("\n")

    with pytest.raises(CommandError, match="is empty: delete it"):
        ensure_admin()
