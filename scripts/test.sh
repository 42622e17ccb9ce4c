#!/usr/bin/env bash
# `make test`: lint, format and import-contract checks, then pytest against a private ZooKeeper and
# Redis (own ports, state under var/test, so a running demo is never touched). Stops exactly the
# services it started.
# Arguments go to pytest (one session); with none, the suite runs as the sessions described below.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-$ROOT/.venv}"

"$VENV/bin/ruff" check . || exit 1
"$VENV/bin/ruff" format --check . || exit 1
# The layering (pyproject.toml [tool.importlinter]): a broken contract is named and fails the run.
"$VENV/bin/lint-imports" --no-cache >"${TMPDIR:-/tmp}/lint-imports.$$" 2>&1 || {
  sed -n '/Broken contracts/,$p' "${TMPDIR:-/tmp}/lint-imports.$$"
  rm -f "${TMPDIR:-/tmp}/lint-imports.$$"
  exit 1
}
grep -E '(KEPT|BROKEN)$' "${TMPDIR:-/tmp}/lint-imports.$$"
rm -f "${TMPDIR:-/tmp}/lint-imports.$$"

export VAR_DIR="$ROOT/var/test"
export ZK_PORT="${TEST_ZK_PORT:-21811}" REDIS_PORT="${TEST_REDIS_PORT:-16380}"
export TEST_ZK_PORT="$ZK_PORT" TEST_REDIS_PORT="$REDIS_PORT"
mkdir -p "$VAR_DIR"
export STARTED_FILE="$VAR_DIR/started.$$"
: >"$STARTED_FILE"
cleanup() {
  local started
  started="$(tr '\n' ' ' <"$STARTED_FILE")"
  [ -z "${started// /}" ] || scripts/services.sh stop $started
  rm -f "$STARTED_FILE"
}
trap cleanup EXIT
scripts/services.sh start || exit 1

# With no selection, `make test` is four pytest sessions on different TEST_SLOTs (each its own
# Redis database, var/test/slot-N, Celery and Spark workers), so that the end-to-end tests' waiting
# overlaps the rest:
# - "e2e" (slot $E2E_TEST_SLOT, default 14), in the background from the start: tests/e2e but the
#   files of E2E2_TESTS, and the demo supervisor test (real process stacks);
# - the main session, in the foreground: everything else, on SQLite;
# - once the main session is done, two more in the background: "postgres" (slot $PG_TEST_SLOT,
#   default 15), the mirror, console and API tests (PG_TESTS) on PostgreSQL (scripts/services.sh's
#   `postgres`, 127.0.0.1:$TEST_PG_PORT, data under var/test/postgres), in the main run's order
#   (some tests queue Celery tasks that the session's workers, once started, run and record; in
#   this order the workers are already up); and "e2e2" (slot $E2E2_TEST_SLOT, default 13), the
#   end-to-end files of E2E2_TESTS (started late: the main session keeps both cores busy).
# The end-to-end sessions print their 25 slowest tests (--durations), to rebalance E2E2_TESTS; main
# and postgres their 15 slowest. The postgres session leaves out the browser tests (-m "not
# browser"): Chromium walks the same pages on either database, and main runs them.
# The background sessions log to var/test/pytest-<name>.log, summed up at the end (in full when
# one failed); the run fails when any session fails. A selection (arguments) runs one session
# with those arguments; PG_PYTEST_ARGS, if set, runs that on PostgreSQL after it. TEST_POSTGRES=0
# skips PostgreSQL, TEST_SPLIT=0 runs tests/e2e in the main session.
PG_TESTS="${PG_TESTS:-tests/console tests/monitoring tests/tables/mirror}"
# Chromium walks the same pages on either database: the browser tests run once, in main.
PG_MARKS=()
[ $# -gt 0 ] || PG_MARKS=(-m "not browser")
E2E_TESTS="tests/e2e tests/test_demo_supervisor.py"
E2E2_TESTS="${E2E2_TESTS-tests/e2e/test_healing.py tests/e2e/test_pauseless.py tests/e2e/test_pauseless_recovery.py tests/e2e/test_pauseless_peer.py tests/e2e/test_alerting.py}"
E2E_IGNORES=()
for path in $E2E2_TESTS; do E2E_IGNORES+=("--ignore=$path"); done
if [ -z "${PG_PYTEST_ARGS+set}" ]; then
  PG_PYTEST_ARGS=""
  [ $# -gt 0 ] || PG_PYTEST_ARGS="$PG_TESTS"
fi
[ "${TEST_POSTGRES:-1}" != 0 ] || PG_PYTEST_ARGS=""
if [ -n "$PG_PYTEST_ARGS" ]; then
  PG_PORT="${TEST_PG_PORT:-15433}" PG_FSYNC=off scripts/services.sh start postgres || exit 1
fi

declare -A bg_pid=() bg_args=()
# start_session NAME SLOT ENV... -- PYTEST_ARGS...: a pytest session in the background, logged.
# SIGINT back to its default (a background job of a script ignores it), so that Python turns it
# into KeyboardInterrupt and the session's fixtures stop the processes they started.
start_session() {
  local name="$1" slot="$2"
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env TEST_SLOT="$slot" "${envs[@]}" "$VENV/bin/python" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])' \
    -p no:cacheprovider "$@" >"$VAR_DIR/pytest-$name.log" 2>&1 &
  bg_pid[$name]=$!
  bg_args[$name]="$*"
  echo "pytest session $name: $* (slot $slot, pid $!, log var/test/pytest-$name.log)"
}
stop_sessions() {
  local name pid
  for name in "${!bg_pid[@]}"; do
    pid="${bg_pid[$name]}"
    kill -INT "$pid" 2>/dev/null || continue
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
}
trap 'stop_sessions; cleanup' EXIT
# finish_session NAME: wait for it, sum it up; its exit status.
finish_session() {
  local name="$1" log="$VAR_DIR/pytest-$1.log" status
  wait "${bg_pid[$name]}"
  status=$?
  unset "bg_pid[$name]"
  if [ "$status" -ne 0 ]; then
    echo "=== pytest session $name failed (exit $status): $log ===" >&2
    cat "$log" >&2
  fi
  echo "pytest session $name (${bg_args[$name]}): $(grep -E '(passed|failed|error|no tests ran)' "$log" | tail -1)"
  return "$status"
}

main_args=("$@")
if [ $# -eq 0 ] && [ "${TEST_SPLIT:-1}" != 0 ]; then
  # shellcheck disable=SC2086  # E2E_TESTS is a list of words
  start_session e2e "${E2E_TEST_SLOT:-14}" -- $E2E_TESTS "${E2E_IGNORES[@]}" --durations=25
  main_args=(--ignore=tests/e2e --ignore=tests/test_demo_supervisor.py)
fi

[ $# -gt 0 ] || main_args+=(--durations=15)
"$VENV/bin/python" -m pytest "${main_args[@]}"
rc=$?
[ "$rc" -ne 5 ] || echo "pytest collected no tests (exit 5): that is a failure here" >&2
if [ -n "${bg_pid[e2e]:-}" ] && [ -n "$E2E2_TESTS" ]; then
  # shellcheck disable=SC2086  # E2E2_TESTS is a list of words
  start_session e2e2 "${E2E2_TEST_SLOT:-13}" -- $E2E2_TESTS --durations=25
fi
if [ -n "$PG_PYTEST_ARGS" ]; then
  # shellcheck disable=SC2086  # PG_PYTEST_ARGS is a list of words
  start_session postgres "${PG_TEST_SLOT:-15}" \
    TEST_DATABASE_URL="postgres://postgres@127.0.0.1:${TEST_PG_PORT:-15433}/postgres" \
    -- $PG_PYTEST_ARGS "${PG_MARKS[@]}" --durations=15
  finish_session postgres || [ "$rc" -ne 0 ] || rc=1
fi
for name in e2e2 e2e; do
  if [ -n "${bg_pid[$name]:-}" ]; then
    finish_session "$name" || [ "$rc" -ne 0 ] || rc=1
  fi
done
exit "$rc"
