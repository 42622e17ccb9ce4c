# Shell helpers shared by scripts/services.sh and scripts/spark_standalone.sh (sourced, not run).

log() { printf '%s\n' "$*"; }
# A running process: a zombie (killed, not yet reaped by its parent) is not running any more.
running() {
  local state
  state="$(sed -n 's/^.*) \([A-Za-z]\).*$/\1/p' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
# The process named by a pid file is running.
alive() { [ -f "$1" ] && running "$(cat "$1")"; }
# Something listens on port $1 of host $2 (default 127.0.0.1).
port_busy() { (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null; }
# Wait up to 15 s for pid $1 to end, then SIGKILL it.
wait_gone() {
  local pid=$1
  for _ in $(seq 150); do running "$pid" || return 0; sleep 0.1; done
  log "  pid $pid still alive after 15 s: SIGKILL"
  kill -9 "$pid" 2>/dev/null || true
}
