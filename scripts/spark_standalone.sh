#!/usr/bin/env bash
# A Spark standalone cluster on this machine, from the pyspark distribution in the venv: one master
# and one worker (`bin/spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`),
# bound to $SPARK_LOCAL_IP (127.0.0.1), state and logs under $SPARK_STANDALONE_DIR
# (var/spark-standalone). Point the project at it with SPARK_MASTER=spark://127.0.0.1:7077.
#
#   scripts/spark_standalone.sh start    start what is not running; returns once the master is ALIVE
#                                        and the worker has registered with it (idempotent)
#   scripts/spark_standalone.sh stop     stop the worker (and its executors), then the master
#   scripts/spark_standalone.sh status
#
# Spark's own variables set the rest: SPARK_MASTER_PORT (7077), SPARK_MASTER_WEBUI_PORT (8080),
# SPARK_WORKER_WEBUI_PORT (8081; 0 picks a free port), SPARK_WORKER_CORES (1), SPARK_WORKER_MEMORY
# (1g: at least spark.executor.memory, which Spark defaults to 1g and never accepts below 450m),
# SPARK_DAEMON_MEMORY (256m, the heap of the master and worker themselves), SPARK_HOME (the venv's
# pyspark). The master's REST submission server is off. The worker's port is a free one.
#
# Contract: it only signals the processes whose pids it recorded, refuses to start a master on a
# port something else listens on, and waits at most SPARK_STANDALONE_START_TIMEOUT (120) s.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
DIR="${SPARK_STANDALONE_DIR:-$ROOT/var/spark-standalone}"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
export SPARK_DAEMON_MEMORY="${SPARK_DAEMON_MEMORY:-256m}"
export SPARK_MASTER_OPTS="${SPARK_MASTER_OPTS:-} -Dspark.master.rest.enabled=false"
MASTER_PORT="${SPARK_MASTER_PORT:-7077}"
MASTER_URL="spark://$SPARK_LOCAL_IP:$MASTER_PORT"
TIMEOUT="${SPARK_STANDALONE_START_TIMEOUT:-120}"

# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
spark_home() {
  [ -n "${SPARK_HOME:-}" ] || SPARK_HOME="$("$VENV/bin/python" -c \
    'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
  export SPARK_HOME
}

# launch NAME CLASS ARGS...: one daemon in the background, its pid in $DIR/NAME.pid.
launch() {
  local name="$1" class="$2"
  shift 2
  nohup "$SPARK_HOME/bin/spark-class" "$class" "$@" >"$DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/$name.pid"
}

# wait_for NAME TEXT: until TEXT is in NAME's log; fails when the process dies or time runs out.
wait_for() {
  local name="$1" text="$2"
  for _ in $(seq $((TIMEOUT * 10))); do
    grep -q "$text" "$DIR/$name.log" && { log "spark $name: up (pid $(cat "$DIR/$name.pid"))"; return; }
    if ! alive "$DIR/$name.pid"; then
      log "spark $name: exited; the end of $DIR/$name.log:" >&2
      tail -20 "$DIR/$name.log" >&2
      return 1
    fi
    sleep 0.1
  done
  log "spark $name: not ready after $TIMEOUT s (see $DIR/$name.log)" >&2
  return 1
}

start_master() {
  if alive "$DIR/master.pid"; then log "spark master: already running (pid $(cat "$DIR/master.pid"))"; return; fi
  if port_busy "$MASTER_PORT" "$SPARK_LOCAL_IP"; then
    log "spark master: port $MASTER_PORT is in use by a process this script did not start; set SPARK_MASTER_PORT" >&2
    return 1
  fi
  launch master org.apache.spark.deploy.master.Master --host "$SPARK_LOCAL_IP" \
    --port "$MASTER_PORT" --webui-port "${SPARK_MASTER_WEBUI_PORT:-8080}"
  wait_for master "New state: ALIVE"
}

start_worker() {
  if alive "$DIR/worker.pid"; then log "spark worker: already running (pid $(cat "$DIR/worker.pid"))"; return; fi
  mkdir -p "$DIR/work"
  launch worker org.apache.spark.deploy.worker.Worker --host "$SPARK_LOCAL_IP" --port 0 \
    --webui-port "${SPARK_WORKER_WEBUI_PORT:-8081}" --cores "${SPARK_WORKER_CORES:-1}" \
    --memory "${SPARK_WORKER_MEMORY:-1g}" --work-dir "$DIR/work" "$MASTER_URL"
  wait_for worker "Successfully registered with master"
}

stop_one() {
  local name="$1" pid
  if alive "$DIR/$name.pid"; then
    pid="$(cat "$DIR/$name.pid")"
    kill "$pid" 2>/dev/null || true
    wait_gone "$pid"
    log "spark $name: stopped (pid $pid)"
  else
    log "spark $name: not running"
  fi
  rm -f "$DIR/$name.pid"
}

case "${1:-}" in
  start)
    mkdir -p "$DIR"
    spark_home
    start_master
    start_worker
    log "spark standalone: $MASTER_URL"
    ;;
  stop)
    stop_one worker
    stop_one master
    ;;
  status)
    for name in master worker; do
      if alive "$DIR/$name.pid"; then log "spark $name: running (pid $(cat "$DIR/$name.pid"))"; else log "spark $name: down"; fi
    done
    ;;
  *)
    log "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
