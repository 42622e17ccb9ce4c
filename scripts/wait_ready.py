"""Wait until the console's /healthz is all green, then print the URLs (used by `make demo`).

Usage: python scripts/wait_ready.py BASE_URL [DEADLINE_SECONDS]

With READY_NOTE set (make demo: the admin account's credentials), it is printed with the URLs.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request


def poll(base: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{base}/healthz?format=json", timeout=70) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as err:  # 503: some check is down; the body says which
        return json.load(err)
    except (OSError, ValueError):
        return None


def main() -> int:
    base = sys.argv[1].rstrip("/")
    deadline = time.monotonic() + (float(sys.argv[2]) if len(sys.argv) > 2 else 180.0)
    body = None
    while time.monotonic() < deadline:
        body = poll(base)
        if body and body.get("status") == "ok":
            note = os.environ.get("READY_NOTE", "")
            print(f"\n  Console ready:  {base}/\n  Health:         {base}/healthz", flush=True)
            print(f"  {note}\n" if note else "", flush=True)
            return 0
        time.sleep(1)
    down = {n: c["detail"] for n, c in (body or {}).get("checks", {}).items() if not c["ok"]}
    print(f"\n  Console not all green after the deadline: {down or 'no answer'}\n", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
