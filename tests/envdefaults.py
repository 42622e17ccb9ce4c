"""Loaded by pytest as a plugin (`-p tests.envdefaults`), before Django reads its settings.

Points every connectivity setting at the test services (`scripts/test.sh` starts them on their own
ports, state under var/test), so a test run never touches the demo's ZooKeeper or Redis even when a
developer's shell exports ZK_HOSTS or REDIS_URL. Celery worker processes started by the fixtures
inherit this environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR_DIR = ROOT / "var" / "test"
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

os.environ.update(
    {
        "VAR_DIR": str(VAR_DIR),
        "ZK_HOSTS": f"127.0.0.1:{ZK_PORT}",
        "REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/0",
        "DATABASE_URL": f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
        # A file, so that the Celery workers the fixtures start see the test data.
        "DATABASE_TEST_NAME": str(VAR_DIR / "test_db.sqlite3"),
        "DEEP_STORE_URI": (VAR_DIR / "deepstore").as_uri(),
        "SPARK_MASTER": "local[1]",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        # Playwright's sync API runs an event loop in the test thread; Django's ORM refuses that.
        "DJANGO_ALLOW_ASYNC_UNSAFE": "true",
        "BEAT_HEARTBEAT_SECONDS": "1",
    }
)
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
(VAR_DIR / "static").mkdir(parents=True, exist_ok=True)  # STATIC_ROOT, served by whitenoise
