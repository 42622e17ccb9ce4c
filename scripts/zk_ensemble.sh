#!/usr/bin/env bash
# A 3-member ZooKeeper ensemble on loopback ports, for trying the stack against a quorum and for the
# ensemble test (tests/e2e/ensemble_stack.py drives this script).
#
#   scripts/zk_ensemble.sh start  [1|2|3 ...]   start the members that are not running; waits until
#                                               every running member serves (Mode: leader/follower)
#   scripts/zk_ensemble.sh stop   [1|2|3 ...]   stop members this script started (by pid file)
#   scripts/zk_ensemble.sh status               each member's mode, port and pid; the connect string
#   scripts/zk_ensemble.sh hosts                the connect string, e.g. for ZK_HOSTS=...
#   scripts/zk_ensemble.sh leader               the leader's member number (exit 1 when none)
#
# Settings (environment):
#   ZK_ENSEMBLE_DIR    state folder (default var/zk-ensemble): member N lives in zkN/ (conf, data with
#                      myid, log, zk.pid); `ports` records the ports the ensemble was started with.
#   ZK_ENSEMBLE_PORTS  "client:peer:election" for members 1,2,3, comma-separated (default
#                      21821:21831:21841,21822:21832:21842,21823:21833:21843); when unset, the ports
#                      recorded in ZK_ENSEMBLE_DIR/ports are used.
#   ZK_JVMFLAGS        extra JVM flags for every member.
#
# Contract, as scripts/services.sh: it only signals processes whose pid it recorded, and refuses to
# start a member on a client port something else listens on.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${ZK_ENSEMBLE_DIR:-$ROOT/var/zk-ensemble}"
DEFAULT_PORTS="21821:21831:21841,21822:21832:21842,21823:21833:21843"
if [ -n "${ZK_ENSEMBLE_PORTS:-}" ]; then
  PORTS="$ZK_ENSEMBLE_PORTS"
elif [ -s "$DIR/ports" ]; then
  PORTS="$(cat "$DIR/ports")"
else
  PORTS="$DEFAULT_PORTS"
fi
IFS=, read -r -a SPEC <<<"$PORTS"
[ ${#SPEC[@]} -eq 3 ] || { echo "ZK_ENSEMBLE_PORTS: want 3 members, got '$PORTS'" >&2; exit 2; }
MEMBERS=(1 2 3)

log() { printf '%s\n' "$*"; }
client_port() { local s=${SPEC[$(($1 - 1))]}; echo "${s%%:*}"; }
running() {
  local state
  state="$(sed -n 's/^.*) \([A-Za-z]\).*$/\1/p' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
pidfile() { echo "$DIR/zk$1/zk.pid"; }
alive() { [ -f "$(pidfile "$1")" ] && running "$(cat "$(pidfile "$1")")"; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
zk_cmd() { # zk_cmd PORT WORD
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf '%s' "$2" >&3
  timeout 2 cat <&3 || true
  exec 3<&-
}
mode() { zk_cmd "$(client_port "$1")" srvr 2>/dev/null | sed -n 's/^Mode: //p'; }
hosts() {
  local out="" m
  for m in "${MEMBERS[@]}"; do out+="${out:+,}127.0.0.1:$(client_port "$m")"; done
  echo "$out"
}

write_config() {
  local m=$1 z="$DIR/zk$1" n spec
  mkdir -p "$z/conf" "$z/data" "$z/log"
  echo "$m" >"$z/data/myid"
  {
    cat <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$z/data
clientPort=$(client_port "$m")
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,cons
preAllocSize=4096
snapCount=10000
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
CFG
    for n in "${MEMBERS[@]}"; do
      IFS=: read -r _ peer election <<<"${SPEC[$((n - 1))]}"
      echo "server.$n=127.0.0.1:$peer:$election"
    done
  } >"$z/conf/zoo.cfg"
  cat >"$z/conf/log4j.properties" <<'CFG'
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
CFG
}

launch() {
  local m=$1 z="$DIR/zk$1"
  if alive "$m"; then log "zk$m: already running (pid $(cat "$(pidfile "$m")"))"; return; fi
  if port_busy "$(client_port "$m")"; then
    log "zk$m: port $(client_port "$m") is in use by a process this script did not start" >&2
    return 1
  fi
  write_config "$m"
  local cp=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar:$z/conf
  # setsid: a Ctrl-C in the caller's terminal must not reach the members; `stop` ends them.
  setsid nohup java -Xms64m -Xmx256m ${ZK_JVMFLAGS:-} -Dzookeeper.log.dir="$z/log" \
    -Dlog4j.configuration="file:$z/conf/log4j.properties" \
    -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$z/conf/zoo.cfg" \
    >"$z/log/zookeeper.out" 2>&1 </dev/null &
  echo $! >"$(pidfile "$m")"
}

# Members serve only once a quorum has elected a leader: `ruok` answers before that, so readiness
# is `srvr` reporting leader or follower on every member that runs.
wait_serving() {
  local m pending
  for _ in $(seq 600); do
    pending=0
    for m in "${MEMBERS[@]}"; do
      alive "$m" || continue
      case "$(mode "$m")" in leader | follower) ;; *) pending=1 ;; esac
    done
    [ "$pending" -eq 1 ] || return 0
    sleep 0.1
  done
  log "zk ensemble: not serving after 60 s (logs: $DIR/zk*/log/zookeeper.out)" >&2
  return 1
}

start() {
  mkdir -p "$DIR"
  echo "$PORTS" >"$DIR/ports"
  local m
  for m in "$@"; do launch "$m"; done
  wait_serving
  status
}

stop() {
  local m pid pids=()
  for m in "$@"; do
    if alive "$m"; then
      pid="$(cat "$(pidfile "$m")")"
      kill "$pid"
      pids+=("$m:$pid")
    else
      log "zk$m: not running"
      rm -f "$(pidfile "$m")"
    fi
  done
  for entry in ${pids[@]+"${pids[@]}"}; do # all SIGTERMed at once: each takes about 2 s
    m=${entry%%:*} pid=${entry#*:}
    for _ in $(seq 150); do running "$pid" || break; sleep 0.1; done
    running "$pid" && { log "zk$m: pid $pid still alive after 15 s: SIGKILL"; kill -9 "$pid" 2>/dev/null || true; }
    rm -f "$(pidfile "$m")"
    log "zk$m: stopped (pid $pid)"
  done
}

status() {
  local m
  for m in "${MEMBERS[@]}"; do
    if alive "$m"; then
      log "zk$m: $(mode "$m" || true) (127.0.0.1:$(client_port "$m"), pid $(cat "$(pidfile "$m")"))"
    else
      log "zk$m: down (127.0.0.1:$(client_port "$m"))"
    fi
  done
  log "ZK_HOSTS=$(hosts)"
}

leader() {
  local m
  for m in "${MEMBERS[@]}"; do
    alive "$m" && [ "$(mode "$m")" = leader ] && { echo "$m"; return 0; }
  done
  log "zk ensemble: no leader" >&2
  return 1
}

cmd="${1:-}"
shift || true
members=("$@")
[ ${#members[@]} -gt 0 ] || members=("${MEMBERS[@]}")
for m in "${members[@]}"; do
  case "$m" in 1 | 2 | 3) ;; *) log "unknown member: $m (1, 2 or 3)" >&2; exit 2 ;; esac
done
case "$cmd" in
  start) start "${members[@]}" ;;
  stop) stop "${members[@]}" ;;
  status) status ;;
  hosts) hosts ;;
  leader) leader ;;
  *) log "usage: $0 start|stop [1|2|3 ...] | status | hosts | leader" >&2; exit 2 ;;
esac
