"""Settings come from the environment, with safe defaults and clear errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from console import settings as module


def test_booleans_parse_strictly(monkeypatch):
    monkeypatch.setenv("X_FLAG", "yes")
    assert module.env_bool("X_FLAG", False) is True
    monkeypatch.setenv("X_FLAG", "off")
    assert module.env_bool("X_FLAG", True) is False
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG='maybe' is not a boolean"):
        module.env_bool("X_FLAG", False)


def test_lists_and_numbers(monkeypatch):
    monkeypatch.setenv("X_LIST", " a.example, b.example ,")
    assert module.env_list("X_LIST", []) == ["a.example", "b.example"]
    monkeypatch.setenv("X_NUM", "abc")
    with pytest.raises(ImproperlyConfigured, match="X_NUM='abc' is not a number"):
        module.env_float("X_NUM", 1.0)


def test_a_secret_can_come_from_a_file(monkeypatch, tmp_path):
    secret = tmp_path / "key"
    secret.write_text("from-file\n")
    monkeypatch.delenv("X_SECRET", raising=False)
    monkeypatch.setenv("X_SECRET_FILE", str(secret))
    assert module.env_secret("X_SECRET") == "from-file"


def _import_settings(env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    return subprocess.run(
        [sys.executable, "-c", "import console.settings as s; print(s.DEBUG, s.ALLOWED_HOSTS)"],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_secret_key_is_required_when_debug_is_off():
    done = _import_settings({})
    assert done.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in done.stderr


def test_defaults_are_the_safe_ones():
    done = _import_settings({"SECRET_KEY": "x" * 50, "ALLOWED_HOSTS": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False ['127.0.0.1', 'localhost']"


def test_passwords_are_hashed_as_django_does_unless_set():
    from django.conf import global_settings

    script = "import console.settings as s; print(','.join(s.PASSWORD_HASHERS))"
    base = {k: v for k, v in os.environ.items() if k != "PASSWORD_HASHERS"}
    for env, wanted in (
        ({}, list(global_settings.PASSWORD_HASHERS)),
        (
            {"PASSWORD_HASHERS": "django.contrib.auth.hashers.ScryptPasswordHasher"},
            ["django.contrib.auth.hashers.ScryptPasswordHasher"],
        ),
    ):
        done = subprocess.run(
            [sys.executable, "-c", script],
            env={**base, "SECRET_KEY": "x" * 50, **env},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().split(",") == wanted
