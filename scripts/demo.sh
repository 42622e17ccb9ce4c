#!/usr/bin/env bash
# `make demo`: the whole stack on embedded defaults, in the foreground, until Ctrl-C (or SIGTERM).
# Starts ZooKeeper and Redis (unless already running), migrates, ensures an admin account, then runs
# supervisord on deploy/supervisor/supervisord.conf.template (expanded into
# $VAR_DIR/supervisord.conf): two controllers, web, Celery workers and beat, three ingestion
# servers, and a producer that first creates the demo tables (`create_demo_table --wait`:
# githubEvents and its pauseless twin githubEventsPauseless, both reading the one topic it writes).
# Where both are installed (and DEMO_ALERTING is not false), Prometheus and Alertmanager run too,
# on PROMETHEUS_PORT and ALERTMANAGER_PORT, their configurations generated from the shipped ones
# (scripts/alerting_config.py), alerts posted to the console's webhook with a token kept in
# $VAR_DIR/alert_webhook_token (deploy/supervisor/alerting.conf.template).
# supervisord restarts a program that dies, with back-off, while the others keep running; logs go
# to $VAR_DIR/log/. Ready (printed with the URLs): /healthz all green and both controllers answer.
# On exit supervisord stops its programs and this script stops exactly the services it started.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-$ROOT/.venv}"
export PATH="$VENV/bin:$PATH"
# Settings from .env (DEMO_ENV_FILE names another file; empty: none, as the tests run it).
ENV_FILE="${DEMO_ENV_FILE-.env}"
if [ -n "$ENV_FILE" ] && [ -f "$ENV_FILE" ]; then set -a; . "$ENV_FILE"; set +a; fi

export VAR_DIR="${VAR_DIR:-$ROOT/var}"
export ZK_PORT="${ZK_PORT:-21810}" REDIS_PORT="${REDIS_PORT:-16379}" WEB_PORT="${WEB_PORT:-8000}"
# The two controllers (instance Controller_127.0.0.1_<port>, API on that port), three ingestion
# servers (instance Server_127.0.0.1_<port>, admin HTTP on that port) and the producer's rate
# (rows/s over the demo topic's 4 partitions).
export CONTROLLER_PORT="${CONTROLLER_PORT:-9000}" CONTROLLER2_PORT="${CONTROLLER2_PORT:-9001}" \
  SERVER1_PORT="${SERVER1_PORT:-8098}" SERVER2_PORT="${SERVER2_PORT:-8099}" \
  SERVER3_PORT="${SERVER3_PORT:-8100}" DEMO_PRODUCE_RATE="${DEMO_PRODUCE_RATE:-100}"
# How long supervisord lets a stopping controller finish its in-flight commits (up to
# CONTROLLER_STOP_COMMIT_WAIT_SECONDS, 30 s by default) and hand its partitions over before SIGKILL.
STOP_WAIT='import math, os
print(math.ceil(float(os.environ.get("CONTROLLER_STOP_COMMIT_WAIT_SECONDS") or 30)) + 15)'
export CONTROLLER_STOPWAITSECS="${CONTROLLER_STOPWAITSECS:-$(python -c "$STOP_WAIT")}"
export ZK_HOSTS="${ZK_HOSTS:-127.0.0.1:$ZK_PORT}" REDIS_URL="${REDIS_URL:-redis://127.0.0.1:$REDIS_PORT/0}"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}" PYSPARK_PYTHON="${PYSPARK_PYTHON:-$VENV/bin/python}" PYTHONUNBUFFERED=1
mkdir -p "$VAR_DIR"
if [ -z "${SECRET_KEY:-}${SECRET_KEY_FILE:-}" ]; then
  # A key of this machine's own, kept across runs so that sessions survive a restart.
  [ -s "$VAR_DIR/secret_key" ] || python -c 'import secrets; print(secrets.token_urlsafe(50))' >"$VAR_DIR/secret_key"
  export SECRET_KEY_FILE="$VAR_DIR/secret_key"
fi

export LOG_DIR="$VAR_DIR/log" ROOT VENV PYTHON="$VENV/bin/python" DEMO_USER="$(id -un)"
mkdir -p "$LOG_DIR"
CONF="$VAR_DIR/supervisord.conf"
if [ -S "$VAR_DIR/supervisor.sock" ] && supervisorctl -c "$CONF" pid >/dev/null 2>&1; then
  echo "a demo is already running on $VAR_DIR (supervisorctl -c $CONF status)" >&2
  exit 1
fi

# Prometheus and Alertmanager, where installed and wanted (DEMO_ALERTING=false: not) and their
# ports are free: the web gets the webhook token and the Alertmanager URL through the environment.
export PROMETHEUS_PORT="${PROMETHEUS_PORT:-19090}" ALERTMANAGER_PORT="${ALERTMANAGER_PORT:-19093}"
export PROMETHEUS_BIN="${PROMETHEUS_BIN:-/usr/bin/prometheus}" ALERTMANAGER_BIN="${ALERTMANAGER_BIN:-/usr/bin/prometheus-alertmanager}"
TEMPLATES=(deploy/supervisor/supervisord.conf.template)
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
case "${DEMO_ALERTING:-true}" in
  0 | false | no | off) echo "  Alerting: off (DEMO_ALERTING=${DEMO_ALERTING})" ;;
  *)
    if [ ! -x "$PROMETHEUS_BIN" ] || [ ! -x "$ALERTMANAGER_BIN" ]; then
      echo "  Alerting: off (install the Debian packages prometheus and prometheus-alertmanager)"
    elif port_busy "$PROMETHEUS_PORT" || port_busy "$ALERTMANAGER_PORT"; then
      echo "  Alerting: off (port $PROMETHEUS_PORT or $ALERTMANAGER_PORT is taken: set PROMETHEUS_PORT, ALERTMANAGER_PORT)" >&2
    else
      TOKEN_FILE="$VAR_DIR/alert_webhook_token"
      ( umask 077
        if [ -n "${ALERT_WEBHOOK_TOKEN:-}" ]; then printf '%s\n' "$ALERT_WEBHOOK_TOKEN" >"$TOKEN_FILE"
        elif [ ! -s "$TOKEN_FILE" ]; then python -c 'import secrets; print(secrets.token_urlsafe(32))' >"$TOKEN_FILE"; fi )
      export ALERT_WEBHOOK_TOKEN_FILE="$TOKEN_FILE" ALERTMANAGER_URL="${ALERTMANAGER_URL:-http://127.0.0.1:$ALERTMANAGER_PORT}"
      python scripts/alerting_config.py "$VAR_DIR/alerting" --web-port "$WEB_PORT" \
        --controller-ports "$CONTROLLER_PORT,$CONTROLLER2_PORT" \
        --server-ports "$SERVER1_PORT,$SERVER2_PORT,$SERVER3_PORT" \
        --alertmanager-port "$ALERTMANAGER_PORT" --token-file "$TOKEN_FILE"
      TEMPLATES+=(deploy/supervisor/alerting.conf.template)
      echo "  Prometheus: http://127.0.0.1:$PROMETHEUS_PORT   Alertmanager: http://127.0.0.1:$ALERTMANAGER_PORT"
    fi ;;
esac

export STARTED_FILE="$VAR_DIR/started.$$"
: >"$STARTED_FILE"
SUPERVISOR_PID="" READY_PID=""
cleanup() {
  local started
  trap '' INT TERM # a second Ctrl-C must not cut the shutdown short (supervisord bounds it)
  [ -z "$READY_PID" ] || kill "$READY_PID" 2>/dev/null || true
  if [ -n "$SUPERVISOR_PID" ]; then
    kill -TERM "$SUPERVISOR_PID" 2>/dev/null || true
    while kill -0 "$SUPERVISOR_PID" 2>/dev/null; do wait "$SUPERVISOR_PID" || true; done
  fi
  started="$(tr '\n' ' ' <"$STARTED_FILE")"
  [ -z "${started// /}" ] || scripts/services.sh stop $started
  rm -f "$STARTED_FILE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/services.sh start
python manage.py migrate --noinput -v 0
python manage.py collectstatic --noinput -v 0
python manage.py init_cluster
READY_NOTE="$(python manage.py ensure_admin)"
echo "$READY_NOTE"
export READY_NOTE
# The configuration (the alerting programs appended when they run), with this run's ports, folders
# and supervisorctl password (so mode 0600); supervisord starts every program at once.
SUPERVISOR_PASSWORD="$(python -c 'import secrets; print(secrets.token_urlsafe(18))')" \
  python - "${TEMPLATES[@]}" "$CONF" <<'PY'
import os, string, sys
text = "\n".join(
    string.Template(open(name, encoding="utf-8").read()).substitute(os.environ)
    for name in sys.argv[1:-1]
)
fd = os.open(sys.argv[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.fchmod(fd, 0o600)
with os.fdopen(fd, "w", encoding="utf-8") as out:
    out.write(text)
PY
python scripts/wait_ready.py "http://127.0.0.1:$WEB_PORT" \
  --controller "http://127.0.0.1:$CONTROLLER_PORT" --controller "http://127.0.0.1:$CONTROLLER2_PORT" &
READY_PID=$!
echo "  Logs: $LOG_DIR/<program>.log   Processes: supervisorctl -c $CONF status"
# In the background, so that this shell's traps run on Ctrl-C or SIGTERM: cleanup() has supervisord
# stop its programs (SIGTERM) and waits for it before stopping the services.
supervisord -n -c "$CONF" &
SUPERVISOR_PID=$!
rc=0
wait "$SUPERVISOR_PID" || rc=$?
SUPERVISOR_PID=""
exit "$rc"
