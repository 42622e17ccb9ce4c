"""Wait until the console's /healthz is all green and every controller answers, then print the URLs
(used by `make demo`).

Usage: python scripts/wait_ready.py BASE_URL [DEADLINE_SECONDS] [--controller URL ...]

Ready means: BASE_URL/healthz?format=json says `"status": "ok"`, and each `--controller` URL
answers Pinot's `GET /health` with 200 (its ZooKeeper session connected). With READY_NOTE set
(make demo: the admin account's credentials), it is printed with the URLs. Exit status 0 when
ready, 1 when the deadline (default 180 s) passed first, saying what was still down.
"""

from __future__ import annotations

import argparse
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


def controller_problem(url: str) -> str | None:
    """None when the controller at `url` answers GET /health with 200, else why not."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=10) as resp:
            return None if resp.status == 200 else f"HTTP {resp.status}"
    except urllib.error.HTTPError as err:  # 503: its ZooKeeper session is not connected
        return f"HTTP {err.code}: {err.read(200).decode(errors='replace').strip()}"
    except OSError as err:
        return f"no answer ({getattr(err, 'reason', err)})"


def down(base: str, controllers: list[str]) -> dict[str, str]:
    """What is not ready yet: check or controller URL -> why; {} when all is ready."""
    body = poll(base)
    if body is None:
        problems = {"console": "no answer"}
    elif body.get("status") == "ok":
        problems = {}
    else:
        checks = body.get("checks", {})
        problems = {n: c["detail"] for n, c in checks.items() if not c["ok"]}
        problems = problems or {"console": f"status {body.get('status')}"}
    for url in controllers:
        problem = controller_problem(url)
        if problem is not None:
            problems[f"controller {url}"] = problem
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Wait until the demo is ready, then print its URLs."
    )
    parser.add_argument("base")
    parser.add_argument("deadline", nargs="?", type=float, default=180.0)
    parser.add_argument("--controller", action="append", default=[], metavar="URL")
    args = parser.parse_args(argv)
    base = args.base.rstrip("/")
    controllers = [url.rstrip("/") for url in args.controller]
    deadline = time.monotonic() + args.deadline
    problems: dict[str, str] = {}
    while time.monotonic() < deadline:
        problems = down(base, controllers)
        if not problems:
            note = os.environ.get("READY_NOTE", "")
            print(f"\n  Console ready:  {base}/\n  Health:         {base}/healthz", flush=True)
            if controllers:
                print(f"  Controllers:    {'  '.join(f'{u}/' for u in controllers)}", flush=True)
            print(f"  {note}\n" if note else "", flush=True)
            return 0
        time.sleep(1)
    print(f"\n  Not ready after the deadline: {problems or 'no answer'}\n", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
