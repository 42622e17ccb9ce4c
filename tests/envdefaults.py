"""Loaded by pytest as a plugin (`-p tests.envdefaults`), before Django reads its settings.

Points every connectivity setting at the test services (`scripts/test.sh` starts them on their own
ports, state under var/test), so a test run never touches the demo's ZooKeeper or Redis even when a
developer's shell exports ZK_HOSTS or REDIS_URL. Celery worker processes started by the fixtures
inherit this environment.

`TEST_SLOT=N` (1..15) lets several pytest sessions run at once against the same services: slot N
gets its own Redis database (so its Celery queues), its own test database file and its own
state folder `var/test/slot-N`. Slot 0 (the default) is what `make test` uses.

`TEST_DATABASE_URL=postgres://user@host:port/db` runs the session on PostgreSQL instead of SQLite:
Django's test runner creates (and drops after) the database `test_console_slot<N>` on that server,
connecting through `db` (usually `postgres`). `scripts/test.sh` starts such a server
(`scripts/services.sh start postgres`) for its second pytest process. Either way
`DATABASE_TEST_URL` is the test database's own URL, for the processes the fixtures start.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
SLOT = int(os.environ.get("TEST_SLOT", "0"))
if not 0 <= SLOT <= 15:
    raise SystemExit(f"TEST_SLOT={SLOT}: use 0..15 (one Redis database per slot)")
VAR_DIR = ROOT / "var" / "test"
if SLOT:
    VAR_DIR = VAR_DIR / f"slot-{SLOT}"
# Pinot's own configs, schemas and rows: ../shared/fixtures/pinot beside the checkout, as CI has it.
PINOT_FIXTURES = Path(
    os.environ.get("PINOT_FIXTURES", ROOT.parent / "shared" / "fixtures" / "pinot")
).resolve()
if not (PINOT_FIXTURES / "githubEvents_schema.json").is_file():
    raise SystemExit(
        f"Pinot fixtures not found at {PINOT_FIXTURES}: tests need ../shared/fixtures/pinot beside "
        "the checkout, or PINOT_FIXTURES pointing at a copy"
    )
ZK_PORT = int(os.environ.get("TEST_ZK_PORT", "21811"))
REDIS_PORT = int(os.environ.get("TEST_REDIS_PORT", "16380"))
TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "")


def _database_env() -> dict[str, str]:
    """DATABASE_URL (what the runner connects through), DATABASE_TEST_NAME (the database it
    creates), DATABASE_TEST_URL (that database's URL)."""
    if not TEST_DATABASE_URL:
        # A file, so that the Celery workers the fixtures start see the test data.
        test_db = str(VAR_DIR / "test_db.sqlite3")
        return {
            "DATABASE_URL": f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
            "DATABASE_TEST_NAME": test_db,
            "DATABASE_TEST_URL": f"sqlite:///{test_db}",
        }
    parts = urlsplit(TEST_DATABASE_URL)
    if parts.scheme not in ("postgres", "postgresql", "pgsql"):
        raise SystemExit(f"TEST_DATABASE_URL={TEST_DATABASE_URL}: only postgres:// is supported")
    # One database per slot: several sessions may share the server.
    test_db = f"test_console_slot{SLOT}"
    return {
        "DATABASE_URL": TEST_DATABASE_URL,
        "DATABASE_TEST_NAME": test_db,
        "DATABASE_TEST_URL": urlunsplit(parts._replace(path=f"/{test_db}")),
    }


os.environ.update(
    {
        "VAR_DIR": str(VAR_DIR),
        "ZK_HOSTS": f"127.0.0.1:{ZK_PORT}",
        "REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/{SLOT}",
        **_database_env(),
        "DEEP_STORE_URI": (VAR_DIR / "deepstore").as_uri(),
        "SPARK_MASTER": "local[1]",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        # Playwright's sync API runs an event loop in the test thread; Django's ORM refuses that.
        "DJANGO_ALLOW_ASYNC_UNSAFE": "true",
        "BEAT_HEARTBEAT_SECONDS": "1",
        # The session-wide beat must not sync the mirror under tests that write mirror rows
        # themselves; tests of the live mirror run `manage.py sync_zk --every` in their stack.
        "MIRROR_SYNC_ON_BEAT": "false",
        # Nor heal or check tables on its schedule: tests set up broken states on purpose and run
        # the tasks themselves (or start processes of their own with these set).
        "REALTIME_SEGMENT_VALIDATION_FREQUENCY_PERIOD": "",
        "STATUS_CHECKER_FREQUENCY_PERIOD": "",
        # Nor on what a mirror sync sees (tests of that turn it on in their settings).
        "HEALING_TRIGGER_FROM_MIRROR": "false",
        # Nor when a controller gains partitions (controllers start and stop in many tests).
        "HEALING_TRIGGER_ON_LEADERSHIP": "false",
    }
)
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
# Users made by tests (a superuser in many) are hashed with MD5: Django's PBKDF2 takes ~0.26 s per
# password here. PBKDF2 stays listed, so a password hashed the product's way still verifies.
os.environ.setdefault(
    "PASSWORD_HASHERS",
    "django.contrib.auth.hashers.MD5PasswordHasher,django.contrib.auth.hashers.PBKDF2PasswordHasher",
)
# The suite's tests wait for builds, so the stacks' spark workers keep their CPU priority (the
# setting has tests of its own; the benches measure the product's default, see theirs).
os.environ.setdefault("SPARK_WORKER_NICENESS", "0")
(VAR_DIR / "static").mkdir(parents=True, exist_ok=True)  # STATIC_ROOT, served by whitenoise
