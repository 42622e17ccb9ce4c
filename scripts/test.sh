#!/usr/bin/env bash
# `make test`: lint, format and import-contract checks, then pytest against a private ZooKeeper and
# Redis (own ports, state under var/test, so a running demo is never touched). Stops exactly the
# services it started.
# Arguments go to pytest.
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

"$VENV/bin/python" -m pytest "$@"
rc=$?
[ "$rc" -ne 5 ] || echo "pytest collected no tests (exit 5): that is a failure here" >&2
exit "$rc"
