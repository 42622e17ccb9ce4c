"""The one settings module. Every value comes from the environment, with a safe default.

Security-sensitive values default to the safe choice (DEBUG off, loopback-only ALLOWED_HOSTS, no
default SECRET_KEY unless DEBUG is on). Connectivity values default to the private loopback ports
that `scripts/services.sh` uses. `.env.example` lists every variable with its meaning.
No other module reads os.environ.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured

from tables.domain.periods import parse_period
from tables.schedules import DelayedSchedule

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false)")


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_period(name: str, default: str) -> int:
    """Whole seconds of a Pinot period string ("30s", "5m", "1h", "1d", "1h30m"; a bare number is
    seconds); empty, zero or negative: 0 (off)."""
    raw = os.environ.get(name, default)
    try:
        seconds = parse_period(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None
    return max(0, seconds or 0)


def env_secret(name: str) -> str | None:
    """`NAME`, or the contents of the file named by `NAME_FILE` (for container secrets)."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return None


VAR_DIR = Path(env_str("VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_secret("SECRET_KEY") or ""
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is required when DEBUG is off (set SECRET_KEY or SECRET_KEY_FILE)"
        )
    SECRET_KEY = "insecure-debug-only-key"  # only ever used with DEBUG on

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# --- the cluster ---------------------------------------------------------------------------------
# ZK_HOSTS may carry a chroot, as ZooKeeper's connect strings do: "zk1:2181,zk2:2181/pinot".
ZK_HOSTS = env_str("ZK_HOSTS", "127.0.0.1:21810")
CLUSTER_NAME = env_str("CLUSTER_NAME", "PinotCluster")
ZK_TIMEOUT_SECONDS = env_float("ZK_TIMEOUT_SECONDS", 5.0)
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:16379/0")
DEEP_STORE_URI = env_str("DEEP_STORE_URI", (VAR_DIR / "deepstore").as_uri())
# For an S3-compatible store other than AWS (MinIO, Ceph...); credentials come from the standard
# AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY variables, read by botocore itself.
DEEP_STORE_ENDPOINT_URL = env_str("DEEP_STORE_ENDPOINT_URL", "")
# Every SparkSession of the project (builds, re-ingestions, the health probe) runs on SPARK_MASTER:
# local[N] inside the spark worker, or a cluster (spark://host:7077). Spark's own SPARK_LOCAL_IP
# (the driver's address, default 127.0.0.1), PYSPARK_PYTHON and SPARK_CONF_DIR apply: see
# tables/segments/spark.py and the README's "Spark on a cluster".
SPARK_MASTER = env_str("SPARK_MASTER", "local[2]")
SPARK_DRIVER_MEMORY = env_str("SPARK_DRIVER_MEMORY", "1g")
# How much a worker on the spark queue lowers its CPU priority (nice), its Spark JVM with it: builds
# yield the CPU to the consumers and the completion protocol on a shared host. 0 leaves it as is.
SPARK_WORKER_NICENESS = int(env_float("SPARK_WORKER_NICENESS", 10))

# --- the controller ------------------------------------------------------------------------------
# This controller's participant id, and the URL servers and download links use to reach it.
# Empty outside `run_controller` (which sets both): a web process never runs completion FSMs, it
# answers NOT_LEADER, because the FSMs must live in the one process that leads the table.
CONTROLLER_INSTANCE_ID = env_str("CONTROLLER_INSTANCE_ID", "")
CONTROLLER_VIP_URL = env_str("CONTROLLER_VIP_URL", "http://127.0.0.1:9000")
# Pinot's controller.resource.rebalance.delay_ms: how long the leadControllerResource partitions of
# a controller that went away (not a graceful shutdown) wait for it; 0 moves them at once.
LEAD_CONTROLLER_REBALANCE_DELAY_MS = int(env_float("LEAD_CONTROLLER_REBALANCE_DELAY_MS", 300_000))
# How long a stopping controller waits for in-flight segment commits before handing its
# partitions over (Pinot's MAX_LLC_SEGMENT_METADATA_COMMIT_TIME_MILLIS, 30 s).
CONTROLLER_STOP_COMMIT_WAIT_SECONDS = env_float("CONTROLLER_STOP_COMMIT_WAIT_SECONDS", 30.0)

# --- servers -------------------------------------------------------------------------------------
# Where `run_server` keeps its local segment copies and build scratch (one folder per instance).
SERVER_DATA_DIR = Path(env_str("SERVER_DATA_DIR", str(VAR_DIR / "servers")))
# The token cluster processes (servers) present to the controller's API, e.g. to download
# committed segments. Empty: derived from SECRET_KEY, which every process of a cluster shares.
CLUSTER_TOKEN = env_secret("CLUSTER_TOKEN") or ""

# --- alerting (Alertmanager) -------------------------------------------------------------------
# Alertmanager's address (http://127.0.0.1:9093): the console creates silences through its API v2.
# Empty: no Alertmanager, the console refuses silences (409) and says why.
ALERTMANAGER_URL = env_str("ALERTMANAGER_URL", "").strip().rstrip("/")
ALERTMANAGER_TIMEOUT_SECONDS = env_float("ALERTMANAGER_TIMEOUT_SECONDS", 5.0)
# The Bearer token Alertmanager's webhook presents to POST /api/v1/alerts/webhook
# (ALERT_WEBHOOK_TOKEN or the file named by ALERT_WEBHOOK_TOKEN_FILE). Empty: it refuses all (403).
ALERT_WEBHOOK_TOKEN = env_secret("ALERT_WEBHOOK_TOKEN") or ""

# --- the ZooKeeper mirror and live consumption state --------------------------------------------
# Beat runs `tables.sync_mirror` this often; pages show how old the mirror is.
MIRROR_SYNC_SECONDS = env_float("MIRROR_SYNC_SECONDS", 5.0)
MIRROR_SYNC_ON_BEAT = env_bool("MIRROR_SYNC_ON_BEAT", True)
# One ConsumptionSample per partition at most this often, kept this long (charts: last hour).
MIRROR_SAMPLE_SECONDS = env_float("MIRROR_SAMPLE_SECONDS", 15.0)
MIRROR_SAMPLE_RETENTION_SECONDS = env_float("MIRROR_SAMPLE_RETENTION_SECONDS", 7200.0)
# Servers publish what they consume to Redis this often; a key not refreshed within the TTL
# expires, and the server reads as "not reporting".
LIVE_PUBLISH_SECONDS = env_float("LIVE_PUBLISH_SECONDS", 2.0)
LIVE_STATE_TTL_SECONDS = env_float("LIVE_STATE_TTL_SECONDS", 15.0)
# A committed build that failed for a reason waiting cannot cure (the config, a row the transform
# rejects) waits this long before the next try, doubling up to the maximum (tables.build_backoffs).
BUILD_FAILURE_BACKOFF_SECONDS = env_float("BUILD_FAILURE_BACKOFF_SECONDS", 60.0)
BUILD_FAILURE_BACKOFF_MAX_SECONDS = env_float("BUILD_FAILURE_BACKOFF_MAX_SECONDS", 3600.0)
# A partition whose offsets have not moved for this long while it lags is "stalled".
STALLED_AFTER_SECONDS = env_float("STALLED_AFTER_SECONDS", 60.0)
# Triage: a partition LAGGING past these; NO_UPSTREAM_DATA after this long without a new row.
TRIAGE_LAGGING_RECORDS = int(env_float("TRIAGE_LAGGING_RECORDS", 10_000))
TRIAGE_LAGGING_TIME_MS = int(env_float("TRIAGE_LAGGING_TIME_MS", 60_000))
TRIAGE_IDLE_AFTER_SECONDS = env_float("TRIAGE_IDLE_AFTER_SECONDS", STALLED_AFTER_SECONDS)
# A CONSUMING segment younger than this whose replicas have not published yet reads as STARTING
# (a commit or resume just made it), not as NOT_REPORTING.
TRIAGE_REPORT_GRACE_SECONDS = env_float("TRIAGE_REPORT_GRACE_SECONDS", 30.0)
# Per-server timeout of the controller's consumingSegmentsInfo fan-out.
SERVER_ADMIN_TIMEOUT_SECONDS = env_float("SERVER_ADMIN_TIMEOUT_SECONDS", 5.0)
# A server's /health/readiness: Pinot's pinot.server.starter.realtimeConsumptionCatchupWaitMs (the
# longest it waits for its consuming segments to catch up; 0: not at all) and
# ...enableRealtimeOffsetBasedConsumptionStatusChecker (ready as soon as they have caught up).
REALTIME_CONSUMPTION_CATCHUP_WAIT_MS = max(
    0, int(env_float("REALTIME_CONSUMPTION_CATCHUP_WAIT_MS", 600_000))
)
ENABLE_REALTIME_OFFSET_BASED_CONSUMPTION_STATUS_CHECKER = env_bool(
    "ENABLE_REALTIME_OFFSET_BASED_CONSUMPTION_STATUS_CHECKER", True
)
# A mirror sync that sees a repair due now (tables.mirror.diagnose) requests a healing run of that
# table (tables.healing_triggers), at most one per table per debounce window.
HEALING_TRIGGER_FROM_MIRROR = env_bool("HEALING_TRIGGER_FROM_MIRROR", True)
# A controller that becomes the lead controller of tables asks for one healing run of each at once.
HEALING_TRIGGER_ON_LEADERSHIP = env_bool("HEALING_TRIGGER_ON_LEADERSHIP", True)
HEALING_TRIGGER_DEBOUNCE_SECONDS = env_float("HEALING_TRIGGER_DEBOUNCE_SECONDS", 20.0)

# --- fault injection (tests only; tables/faults.py) ----------------------------------------------
# A directory: a file `<dir>/<point>` makes that point fail once (the file is deleted). Empty: off.
FAULT_INJECTION_DIR = env_str("FAULT_INJECTION_DIR", "")

# --- the controller's periodic tasks (README: "Healing and status checks", Pinot's keys) --------
# The healing manager (Pinot's RealtimeSegmentValidationManager) on beat: every period (Pinot's
# default is 1h; empty or <= 0: not scheduled), the first run this long after beat starts.
REALTIME_SEGMENT_VALIDATION_FREQUENCY_SECONDS = env_period(
    "REALTIME_SEGMENT_VALIDATION_FREQUENCY_PERIOD", "5m"
)
REALTIME_SEGMENT_VALIDATION_INITIAL_DELAY_SECONDS = max(
    0.0, env_float("REALTIME_SEGMENT_VALIDATION_INITIAL_DELAY_SECONDS", 60.0)
)
SEGMENT_ERROR_AUTO_RESET = env_bool("SEGMENT_ERROR_AUTO_RESET", True)
PARTIAL_OFFLINE_REPLICA_REPAIR_ENABLED = env_bool("PARTIAL_OFFLINE_REPLICA_REPAIR_ENABLED", False)
TMP_FILE_RETENTION_SECONDS = max(0, int(env_float("TMP_FILE_RETENTION_SECONDS", 3600)))
# Pinot's SegmentStatusChecker over the mirror: every period (empty or <= 0: not scheduled);
# segments changed more recently than the wait are not judged yet (servers are loading them).
STATUS_CHECKER_FREQUENCY_SECONDS = env_period("STATUS_CHECKER_FREQUENCY_PERIOD", "1m")
STATUS_CHECKER_WAIT_FOR_PUSH_SECONDS = env_period("STATUS_CHECKER_WAIT_FOR_PUSH_TIME_PERIOD", "10m")

# --- health checks -------------------------------------------------------------------------------
HEALTH_TIMEOUT_SECONDS = env_float("HEALTH_TIMEOUT_SECONDS", 5.0)
# A cold Spark session costs about 5 s of JVM start plus 2-3 s for the first job.
HEALTH_SPARK_TIMEOUT_SECONDS = env_float("HEALTH_SPARK_TIMEOUT_SECONDS", 60.0)
BEAT_HEARTBEAT_SECONDS = env_float("BEAT_HEARTBEAT_SECONDS", 10.0)
# Anonymous /healthz answers up/down from the last probe results, cached this long (per process).
HEALTH_CACHE_SECONDS = env_float("HEALTH_CACHE_SECONDS", 5.0)

# --- the demo's local admin account (make demo) --------------------------------------------------
DEMO_ADMIN_USER = env_str("DEMO_ADMIN_USER", "admin")
DEMO_ADMIN_PASSWORD = env_secret("DEMO_ADMIN_PASSWORD")

# --- Django --------------------------------------------------------------------------------------
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "console",
    "tables",
    "monitoring",
]

MIDDLEWARE = [
    # The completion protocol's calls skip the rest (console/api/protocol_route.py).
    "console.api.protocol_route.ProtocolRouteMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "console.middleware.StoreUnavailableMiddleware",
    "console.api.http_errors.JsonMethodNotAllowedMiddleware",  # Django's 405s as Pinot's JSON
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context_processors.cluster",
                "console.context_processors.role",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"), conn_max_age=60
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, workers and beat share the file: wait for a lock instead of failing, and let readers
    # run beside a writer (WAL).
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL;",
        "transaction_mode": "IMMEDIATE",
    }
# The test runner's database; a file (not memory) so that worker processes in tests can share it.
if env_str("DATABASE_TEST_NAME", ""):
    DATABASES["default"]["TEST"] = {"NAME": env_str("DATABASE_TEST_NAME", "")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's list unless set; the first one hashes new passwords, any one listed verifies.
PASSWORD_HASHERS = env_list("PASSWORD_HASHERS", list(global_settings.PASSWORD_HASHERS))
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # collectstatic (make demo) writes a .gz next to each file; whitenoise serves it to clients
    # that accept gzip. (The 4.8 MB Plotly bundle comes from its package, gzipped by its view.)
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve from STATIC_ROOT once collectstatic filled it (compressed variants included); before
# that, and in tests, straight from the app folders.
WHITENOISE_USE_FINDERS = not (STATIC_ROOT / "console" / "console.css").exists()
WHITENOISE_AUTOREFRESH = DEBUG

# Request bodies (console.api.parsers): a JSON body over MAX_REQUEST_BODY_BYTES gets 413, JSON
# nested deeper than MAX_JSON_DEPTH gets 400. The size stays under ZooKeeper's 1 MB znode limit (a
# schema or table config is stored whole); it also bounds form posts (DATA_UPLOAD_MAX_MEMORY_SIZE).
MAX_REQUEST_BODY_BYTES = max(1024, int(env_float("MAX_REQUEST_BODY_BYTES", 512 * 1024)))
MAX_JSON_DEPTH = max(8, int(env_float("MAX_JSON_DEPTH", 64)))
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BODY_BYTES

REST_FRAMEWORK = {
    "DEFAULT_PARSER_CLASSES": [
        "console.api.parsers.LimitedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # curl -u user:password, like a Pinot controller with basic auth; first, so that an
        # unauthenticated call gets 401 with a WWW-Authenticate challenge.
        "rest_framework.authentication.BasicAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "console.api.cluster_auth.ClusterTokenAuthentication",
        # Scripts: `Authorization: Token <key>` (python manage.py console_user --token).
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "console.api.errors.handle",
}

# --- Celery (read by console/celery.py through the CELERY_ namespace) ---------------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", REDIS_URL)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_EXPIRES = 600
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Above the longest task (a Spark build), or an unacknowledged task is delivered twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_DEFAULT_QUEUE = "celery"
# Spark work goes to its own queue, consumed by a worker with one process (one JVM).
CELERY_TASK_ROUTES = {"tables.spark_*": {"queue": "spark"}}
CELERY_BEAT_SCHEDULE = {
    "beat-heartbeat": {
        "task": "console.beat_heartbeat",
        "schedule": BEAT_HEARTBEAT_SECONDS,
        "options": {"expires": BEAT_HEARTBEAT_SECONDS},
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Pinot realtime control plane API",
    "DESCRIPTION": "Pinot's controller paths (tables, segments, completion protocol, realtime "
    "operations) and the console's own JSON under /api/v1/.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Adds the segment completion endpoints (plain Django views) to the schema.
    "DEFAULT_GENERATOR_CLASS": "console.api.schema_generator.PinotSchemaGenerator",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# MIRROR_SYNC_ON_BEAT=false takes the mirror off beat's schedule (run `manage.py sync_zk --every`).
if MIRROR_SYNC_ON_BEAT:
    CELERY_BEAT_SCHEDULE["sync-mirror"] = {
        "task": "tables.sync_mirror",
        "schedule": MIRROR_SYNC_SECONDS,
        "options": {"expires": MIRROR_SYNC_SECONDS},
    }

# The controller's periodic tasks; each run expires when the next one is due.
if REALTIME_SEGMENT_VALIDATION_FREQUENCY_SECONDS > 0:
    CELERY_BEAT_SCHEDULE["realtime-segment-validation"] = {
        "task": "tables.realtime_segment_validation",
        "schedule": DelayedSchedule(
            REALTIME_SEGMENT_VALIDATION_FREQUENCY_SECONDS,
            REALTIME_SEGMENT_VALIDATION_INITIAL_DELAY_SECONDS,
        ),
        "kwargs": {"trigger": "schedule"},
        "options": {"expires": REALTIME_SEGMENT_VALIDATION_FREQUENCY_SECONDS},
    }
if STATUS_CHECKER_FREQUENCY_SECONDS > 0:
    CELERY_BEAT_SCHEDULE["segment-status-checker"] = {
        "task": "tables.segment_status_checker",
        "schedule": STATUS_CHECKER_FREQUENCY_SECONDS,
        "options": {"expires": STATUS_CHECKER_FREQUENCY_SECONDS},
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "django.server": {  # Django's own access-log format
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        },
    },
    # The access log leaves out the completion protocol's successful calls (console.access_log).
    "filters": {"quiet_protocol": {"()": "console.access_log.QuietProtocolCalls"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "django.server": {"class": "logging.StreamHandler", "formatter": "django.server"},
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "kazoo": {"level": "WARNING"},
        "py4j": {"level": "WARNING"},
        "django.server": {
            "handlers": ["django.server"],
            "level": "INFO",
            "propagate": False,
            "filters": ["quiet_protocol"],
        },
    },
}
