#!/usr/bin/env bash
# Local ZooKeeper and Redis for the demo and the tests, and PostgreSQL when asked for by name:
# private loopback ports, state under $VAR_DIR.
#
#   scripts/services.sh start [zookeeper|redis|postgres ...]   start what is not running (idempotent;
#                                                              no names: zookeeper and redis)
#   scripts/services.sh stop  [zookeeper|redis|postgres ...]   stop what this script started (by pid file)
#   scripts/services.sh status
#
# PostgreSQL (Debian's `postgresql` package, the newest /usr/lib/postgresql/*/bin or $PG_BIN): a
# cluster initialised once under $VAR_DIR/postgres/data, listening on 127.0.0.1:$PG_PORT (socket in
# $VAR_DIR/postgres), superuser `postgres` with trust authentication: a throwaway instance for tests
# and local runs, never a production database. PostgreSQL refuses to run as root, so as root it runs
# as the `postgres` system user (which must be able to reach $VAR_DIR). PG_FSYNC=off trades
# durability for speed (make test).
#
# Contract: it only ever signals processes whose pid it recorded itself, and it refuses to start on a
# port that something else already listens on, so it never touches a ZooKeeper or Redis it did not
# start. With STARTED_FILE set, `start` appends the names of the services it really started, so that
# a caller (make test, make demo) can stop exactly those and leave alone what was already running.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VAR="${VAR_DIR:-$ROOT/var}"
ZK_PORT="${ZK_PORT:-21810}"
REDIS_PORT="${REDIS_PORT:-16379}"
PG_PORT="${PG_PORT:-15432}"
ZK="$VAR/zookeeper"
RD="$VAR/redis"
PG="$VAR/postgres"

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
zk_cmd() {
  exec 3<>"/dev/tcp/127.0.0.1/$ZK_PORT" || return 1
  printf '%s' "$1" >&3
  timeout 2 cat <&3 || true
  exec 3<&-
}
record_started() { [ -z "${STARTED_FILE:-}" ] || echo "$1" >>"$STARTED_FILE"; }

start_zookeeper() {
  if alive "$ZK/zk.pid"; then log "zookeeper: already running on 127.0.0.1:$ZK_PORT (pid $(cat "$ZK/zk.pid"))"; return; fi
  if port_busy "$ZK_PORT"; then
    log "zookeeper: port $ZK_PORT is in use by a process this script did not start; set ZK_PORT" >&2
    return 1
  fi
  mkdir -p "$ZK/conf" "$ZK/data" "$ZK/log"
  cat >"$ZK/conf/zoo.cfg" <<CFG
tickTime=2000
dataDir=$ZK/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf
preAllocSize=4096
snapCount=10000
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
CFG
  cat >"$ZK/conf/log4j.properties" <<'CFG'
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
CFG
  local cp=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar:$ZK/conf
  # setsid: a Ctrl-C in the caller's terminal must not reach ZooKeeper; `stop` ends it.
  setsid nohup java -Xms64m -Xmx256m ${ZK_JVMFLAGS:-} -Dzookeeper.log.dir="$ZK/log" \
    -Dlog4j.configuration="file:$ZK/conf/log4j.properties" \
    -cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$ZK/conf/zoo.cfg" \
    >"$ZK/log/zookeeper.out" 2>&1 </dev/null &
  echo $! >"$ZK/zk.pid"
  # `ruok` answers before the server serves; readiness is `srvr` reporting standalone mode.
  for _ in $(seq 300); do
    if zk_cmd srvr 2>/dev/null | grep -q 'Mode: standalone'; then
      log "zookeeper: up on 127.0.0.1:$ZK_PORT (pid $(cat "$ZK/zk.pid"))"
      record_started zookeeper
      return
    fi
    alive "$ZK/zk.pid" || { tail -20 "$ZK/log/zookeeper.out" >&2; log "zookeeper: exited during start" >&2; return 1; }
    sleep 0.1
  done
  log "zookeeper: not serving after 30 s (log: $ZK/log/zookeeper.out)" >&2
  return 1
}

start_redis() {
  if alive "$RD/redis.pid"; then log "redis: already running on 127.0.0.1:$REDIS_PORT (pid $(cat "$RD/redis.pid"))"; return; fi
  if port_busy "$REDIS_PORT"; then
    log "redis: port $REDIS_PORT is in use by a process this script did not start; set REDIS_PORT" >&2
    return 1
  fi
  mkdir -p "$RD"
  rm -f "$RD/redis.pid"
  # The embedded stream lives here, so Redis keeps it on disk: an append-only file under $RD
  # (appendonlydir/), fsynced before each write is acknowledged (REDIS_APPENDFSYNC, default
  # `always`), so a Redis killed with SIGKILL and started again on the same $VAR_DIR loses no
  # write a client was told had succeeded. No RDB snapshots: the AOF is the one copy.
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly yes \
    --appendfsync "${REDIS_APPENDFSYNC:-always}" --dir "$RD" \
    --databases 64 --daemonize yes --pidfile "$RD/redis.pid" --logfile "$RD/redis.log"
  # PING answers LOADING, not PONG, while Redis reads its append-only file back.
  for _ in $(seq 1200); do
    if [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] && [ -s "$RD/redis.pid" ]; then
      log "redis: up on 127.0.0.1:$REDIS_PORT (pid $(cat "$RD/redis.pid"))"
      record_started redis
      return
    fi
    if [ -s "$RD/redis.pid" ] && ! alive "$RD/redis.pid"; then
      tail -20 "$RD/redis.log" >&2
      log "redis: exited during start (log: $RD/redis.log)" >&2
      return 1
    fi
    sleep 0.05
  done
  log "redis: not answering after 60 s (log: $RD/redis.log)" >&2
  return 1
}

pg_bin() {
  if [ -n "${PG_BIN:-}" ]; then echo "$PG_BIN"; return; fi
  local found
  found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  [ -n "$found" ] || { log "postgres: no /usr/lib/postgresql/*/bin (apt-get install postgresql, or set PG_BIN)" >&2; return 1; }
  echo "$found"
}
# Run a PostgreSQL tool as the owner of the cluster: `postgres` when we are root.
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pg_ready() { as_pg "$1/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres; }

start_postgres() {
  if alive "$PG/postgres.pid"; then log "postgres: already running on 127.0.0.1:$PG_PORT (pid $(cat "$PG/postgres.pid"))"; return; fi
  if port_busy "$PG_PORT"; then
    log "postgres: port $PG_PORT is in use by a process this script did not start; set PG_PORT" >&2
    return 1
  fi
  local bin
  bin="$(pg_bin)" || return 1
  mkdir -p "$PG"
  rm -f "$PG/postgres.pid"
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$PG"
    as_pg test -w "$PG" || {
      log "postgres: the postgres user cannot write $PG (a parent folder is closed to it); set VAR_DIR" >&2
      return 1
    }
  fi
  if [ ! -s "$PG/data/PG_VERSION" ]; then
    rm -rf "$PG/data"
    as_pg "$bin/initdb" -D "$PG/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
      >"$PG/initdb.log" 2>&1 || { tail -20 "$PG/initdb.log" >&2; log "postgres: initdb failed" >&2; return 1; }
  fi
  # pg_ctl detaches the server into a session of its own (a Ctrl-C in the caller's terminal does
  # not reach it); `stop` ends it by the pid recorded below.
  as_pg "$bin/pg_ctl" -D "$PG/data" -l "$PG/postgres.log" -w -t 60 -s start -o \
    "-p $PG_PORT -k $PG -c listen_addresses=127.0.0.1 -c max_connections=${PG_MAX_CONNECTIONS:-200} -c fsync=${PG_FSYNC:-on} -c synchronous_commit=${PG_FSYNC:-on} -c full_page_writes=${PG_FSYNC:-on}" ||
    { tail -20 "$PG/postgres.log" >&2; log "postgres: failed to start (log: $PG/postgres.log)" >&2; return 1; }
  head -1 "$PG/data/postmaster.pid" >"$PG/postgres.pid"
  for _ in $(seq 300); do
    if pg_ready "$bin"; then
      log "postgres: up on 127.0.0.1:$PG_PORT (pid $(cat "$PG/postgres.pid"))"
      record_started postgres
      return
    fi
    alive "$PG/postgres.pid" || { tail -20 "$PG/postgres.log" >&2; log "postgres: exited during start" >&2; return 1; }
    sleep 0.1
  done
  log "postgres: not answering after 30 s (log: $PG/postgres.log)" >&2
  return 1
}

stop_one() {
  local name=$1 pidfile=$2
  if alive "$pidfile"; then
    local pid
    pid="$(cat "$pidfile")"
    # PostgreSQL: SIGINT is its fast shutdown (SIGTERM would wait for every client to leave).
    kill "-${3:-TERM}" "$pid"
    wait_gone "$pid"
    log "$name: stopped (pid $pid)"
  else
    log "$name: not running"
  fi
  rm -f "$pidfile"
}

status() {
  if alive "$ZK/zk.pid"; then
    log "zookeeper: $(zk_cmd srvr 2>/dev/null | grep Mode || echo 'not serving') (127.0.0.1:$ZK_PORT, pid $(cat "$ZK/zk.pid"))"
  else
    log "zookeeper: down"
  fi
  if alive "$RD/redis.pid"; then
    log "redis: $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null || echo 'not answering') (127.0.0.1:$REDIS_PORT, pid $(cat "$RD/redis.pid"))"
  else
    log "redis: down"
  fi
  if alive "$PG/postgres.pid"; then
    local bin state=not answering
    bin="$(pg_bin 2>/dev/null)" && pg_ready "$bin" && state="accepting connections"
    log "postgres: $state (127.0.0.1:$PG_PORT, pid $(cat "$PG/postgres.pid"))"
  else
    log "postgres: down"
  fi
}

cmd="${1:-}"
shift || true
names=("$@")
# No names: start ZooKeeper and Redis; stop all three (only what has a pid file of ours).
if [ ${#names[@]} -eq 0 ]; then
  names=(zookeeper redis)
  [ "$cmd" != stop ] || names+=(postgres)
fi
case "$cmd" in
  start)
    for n in "${names[@]}"; do
      case "$n" in
        zookeeper) start_zookeeper ;;
        redis) start_redis ;;
        postgres) start_postgres ;;
        *) log "unknown service: $n" >&2; exit 2 ;;
      esac
    done
    ;;
  stop)
    # Redis first: it is the broker, and stopping it fast lets Celery clients give up early.
    for n in postgres redis zookeeper; do
      [[ " ${names[*]} " == *" $n "* ]] || continue
      case "$n" in
        zookeeper) stop_one zookeeper "$ZK/zk.pid" ;;
        redis) stop_one redis "$RD/redis.pid" ;;
        postgres) stop_one postgres "$PG/postgres.pid" INT ;;
      esac
    done
    ;;
  status) status ;;
  *) log "usage: $0 start|stop|status [zookeeper|redis|postgres ...]" >&2; exit 2 ;;
esac
