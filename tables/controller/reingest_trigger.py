"""The healer's re-ingestion trigger (round 2 §C.1): Pinot's `triggerReingestion` /
`pickServerToReingest`, with a live server.

Contract of `ReingestTrigger.trigger(table, repair, ideal_instances, report)` for a REINGEST
repair (`tables.domain.error_repairs`, a COMMITTING segment with every replica in ERROR):
- The server is picked at random among the segment's IdealState instances that are live (a
  LIVEINSTANCES znode; Pinot does not check liveness) and whose admin endpoint is known:
  `http://<HELIX_HOST>:<adminPort>` from the instance config, HELIX_PORT when there is no adminPort
  (`consuming.server_admin_url`). None: a `report.waiting` note, nothing sent.
- `POST <admin>/reingestSegment/<segment>` (name URL-encoded), JSON body `""` as Pinot sends it,
  `Authorization: Bearer <cluster token>`, within `timeout_s` (10 s).
- 200 (`{"jobId", "segmentName", "startTimeMs"}`): a `HealingAction` `reingestTriggered` naming
  the server and the job id. 409: a `report.waiting` note "re-ingestion already running on
  <server>". Any other status (with the body's first 300 characters), a connection error or a
  timeout: a `report.waiting` note. It never raises: a failed trigger never fails the run.
- The controller does not track the job (Pinot neither): the next run triggers again if the
  segment is still COMMITTING with every replica in ERROR (the server answers 409 meanwhile), and
  the server's `POST /segments/reingested` on the lead controller completes it.
"""

from __future__ import annotations

import json
import logging
import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence

from tables.cluster.context import ClusterContext
from tables.domain.error_repairs import ErrorRepair
from tables.security import cluster_token

from .consuming import admin_urls
from .healing_report import HealingAction, HealingReport

__all__ = ["REINGEST_PATH", "REINGEST_TRIGGERED", "TIMEOUT_S", "ReingestTrigger"]

log = logging.getLogger(__name__)

REINGEST_TRIGGERED = "reingestTriggered"
REINGEST_PATH = "/reingestSegment/"
TIMEOUT_S = 10.0
BODY_CHARS = 300


class ReingestTrigger:
    def __init__(
        self,
        ctx: ClusterContext,
        *,
        token: Callable[[], str] = cluster_token,
        timeout_s: float = TIMEOUT_S,
        choose: Callable[[Sequence[str]], str] = random.choice,
    ) -> None:
        self.ctx, self.zk, self.paths = ctx, ctx.client, ctx.paths
        self.token, self.timeout_s, self.choose = token, timeout_s, choose

    def trigger(
        self,
        table: str,
        repair: ErrorRepair,
        ideal_instances: Iterable[str],
        report: HealingReport,
    ) -> None:
        """Ask one live server of the segment to re-ingest it (module docstring)."""
        segment = repair.segment
        try:
            candidates = self._candidates(sorted(ideal_instances))
            if not candidates:
                report.waiting.append(
                    f"{repair.reason}; re-ingestion not started: no live server of the segment "
                    "with a known admin endpoint; the next run tries again"
                )
                return
            server = self.choose(sorted(candidates))
            self._post(table, repair, server, candidates[server], report)
        except Exception as exc:  # never fail the run
            log.exception("healing %s: re-ingestion trigger of %s failed", table, segment)
            report.waiting.append(f"{segment}: re-ingestion not started: {exc}")

    def _candidates(self, instances: list[str]) -> dict[str, str]:
        """Live instances among `instances` -> their admin base URL."""
        live = [i for i in instances if self.zk.exists(self.paths.liveinstance(i)) is not None]
        return {i: url for i, url in admin_urls(self.ctx, live).items() if url}

    def _post(
        self, table: str, repair: ErrorRepair, server: str, base: str, report: HealingReport
    ) -> None:
        segment = repair.segment
        url = f"{base}{REINGEST_PATH}{urllib.parse.quote(segment, safe='')}"
        request = urllib.request.Request(
            url,
            data=b'""',
            method="POST",
            headers={
                "Authorization": f"Bearer {self.token()}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                status, body = answer.status, answer.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as refused:
            status, body = refused.code, refused.read().decode("utf-8", "replace")
        except (OSError, ValueError) as exc:  # URLError, timeouts and refused connections
            report.waiting.append(
                f"{segment}: re-ingestion not started: {server} ({url}) cannot be reached: {exc}"
            )
            return
        if status == 200:
            job = _job_id(body)
            report.actions.append(
                HealingAction(
                    REINGEST_TRIGGERED,
                    f"{repair.reason}: re-ingestion job {job} started on {server}",
                    None,
                    segment,
                    None,
                    (server,),
                )
            )
        elif status == 409:
            report.waiting.append(f"{segment}: re-ingestion already running on {server}")
        else:
            report.waiting.append(
                f"{segment}: re-ingestion not started: {server} answered HTTP {status}: "
                f"{body[:BODY_CHARS]}"
            )


def _job_id(body: str) -> str:
    try:
        found = json.loads(body)
    except ValueError:
        return "?"
    return str(found.get("jobId") or "?") if isinstance(found, dict) else "?"
