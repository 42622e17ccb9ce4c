#!/usr/bin/env bash
# Idempotent setup on a fresh Debian 12 machine: the Debian packages the stack needs and a venv with
# the pinned Python dependencies. A re-run when nothing changed costs well under a second.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
REQ="$ROOT/requirements.txt"
# postgresql: make test's second run (scripts/services.sh starts a private instance under var/test).
APT_PKGS=(openjdk-17-jre-headless zookeeper redis-server chromium prometheus prometheus-alertmanager postgresql)

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # No recommends: Chromium's pull in avahi, udev, cups and a systemd upgrade (+500 MB).
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
  echo "bootstrap: warning: $("$PYTHON" --version) is not 3.11, the version the pins were made on" >&2
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
stamp="$VENV/.requirements.sha256"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: installing Python packages (pyspark builds a wheel on a fresh machine: about a minute)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" 2> >(grep -v 'is ignored: it is neither' >&2)
  echo "$want" >"$stamp"
fi
echo "bootstrap: ok ($("$VENV/bin/python" --version), venv $VENV)"
