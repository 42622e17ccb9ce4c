#!/usr/bin/env bash
# `make demo`: the whole stack on embedded defaults, in the foreground, until Ctrl-C.
# Starts ZooKeeper and Redis (unless already running), migrates, ensures an admin account, then runs
# the Procfile with honcho: controller, web, Celery workers and beat, three ingestion servers, and a
# producer that first creates the demo table (`create_demo_table --wait`). On exit honcho stops its
# processes and this script stops exactly the services it started.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-$ROOT/.venv}"
export PATH="$VENV/bin:$PATH"
if [ -f .env ]; then set -a; . ./.env; set +a; fi

export VAR_DIR="${VAR_DIR:-$ROOT/var}"
export ZK_PORT="${ZK_PORT:-21810}" REDIS_PORT="${REDIS_PORT:-16379}" WEB_PORT="${WEB_PORT:-8000}"
# The Procfile's controller, three ingestion servers (instance Server_127.0.0.1_<port>, admin HTTP on
# that port) and the producer's rate (rows/s over the demo topic's 4 partitions).
export CONTROLLER_PORT="${CONTROLLER_PORT:-9000}" SERVER1_PORT="${SERVER1_PORT:-8098}" \
  SERVER2_PORT="${SERVER2_PORT:-8099}" SERVER3_PORT="${SERVER3_PORT:-8100}" \
  DEMO_PRODUCE_RATE="${DEMO_PRODUCE_RATE:-100}"
export ZK_HOSTS="${ZK_HOSTS:-127.0.0.1:$ZK_PORT}" REDIS_URL="${REDIS_URL:-redis://127.0.0.1:$REDIS_PORT/0}"
export SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$VENV/bin/python" PYTHONUNBUFFERED=1
mkdir -p "$VAR_DIR"
if [ -z "${SECRET_KEY:-}${SECRET_KEY_FILE:-}" ]; then
  # A key of this machine's own, kept across runs so that sessions survive a restart.
  [ -s "$VAR_DIR/secret_key" ] || python -c 'import secrets; print(secrets.token_urlsafe(50))' >"$VAR_DIR/secret_key"
  export SECRET_KEY_FILE="$VAR_DIR/secret_key"
fi

export STARTED_FILE="$VAR_DIR/started.$$"
: >"$STARTED_FILE"
cleanup() {
  local started
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
python manage.py ensure_admin
python scripts/wait_ready.py "http://127.0.0.1:$WEB_PORT" &
honcho -f Procfile start
