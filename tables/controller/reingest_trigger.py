"""The healer's re-ingestion trigger (round 2 §C.1): Pinot's `triggerReingestion` /
`pickServerToReingest`, with a live server.

Contract of `ReingestTrigger.trigger(table, repair, ideal_instances, report)` for a REINGEST
repair (`tables.domain.error_repairs`, a COMMITTING segment with every replica in ERROR):
- The server is picked at random among the segment's IdealState instances that are live (a
  LIVEINSTANCES znode; Pinot does not check liveness) and whose admin endpoint is known:
  `http://<HELIX_HOST>:<adminPort>` from the instance config, HELIX_PORT when there is no adminPort
  (`consuming.server_admin_url`). None: a `report.waiting` note, nothing sent.
- Beyond Pinot, first each of those servers is asked `GET <admin>/reingestSegment/jobs` (same
  token and timeout): when one lists a job for the segment nothing is sent and the run notes
  "re-ingestion already running on <server>". A server's 409 covers only its own jobs, and runs
  come from beat, the mirror, a new lead controller and operators: without this, a run during a
  job starts a second one on another replica, which then fails at `/segments/reingested` (409:
  the segment is DONE by then) and counts a `segmentReingestionFailure`. A server that does not
  answer the GET counts as running none.
- `POST <admin>/reingestSegment/<segment>` (name URL-encoded), JSON body `""` as Pinot sends it,
  `Authorization: Bearer <cluster token>`, within `timeout_s` (10 s).
- 200 (`{"jobId", "segmentName", "startTimeMs"}`): a `HealingAction` `reingestTriggered` naming
  the server and the job id. 409: a `report.waiting` note "re-ingestion already running on
  <server>". Any other status (with the body's first 300 characters), a connection error or a
  timeout: a `report.waiting` note. It never raises: a failed trigger never fails the run.
- The controller does not track the job (Pinot neither): the next run triggers again if the
  segment is still COMMITTING with every replica in ERROR (the server answers 409 meanwhile), and
  the server's `POST /segments/reingested` on the lead controller completes it.

`ReingestTrigger.request(segment, ideal_instances)` is that same choice and call without the
report, for the console's Re-ingest button (`console.api.reingest`): None when no live server of
the segment has a known admin endpoint, else the `ServerReply` (the server, the URL, its HTTP
status and body, or why it could not be reached). It raises only for ZooKeeper trouble.
"""

from __future__ import annotations

import json
import logging
import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tables.cluster.context import ClusterContext
from tables.domain.error_repairs import ErrorRepair
from tables.security import cluster_token

from .consuming import admin_urls
from .healing_report import HealingAction, HealingReport

__all__ = ["REINGEST_PATH", "REINGEST_TRIGGERED", "TIMEOUT_S", "ReingestTrigger", "ServerReply"]

log = logging.getLogger(__name__)

REINGEST_TRIGGERED = "reingestTriggered"
REINGEST_PATH = "/reingestSegment/"
JOBS_PATH = "/reingestSegment/jobs"
TIMEOUT_S = 10.0
BODY_CHARS = 300


@dataclass(frozen=True)
class ServerReply:
    """A server's answer to `POST /reingestSegment/<segment>`: `status` and `body` as sent, or
    `status` None and `error` when it could not be reached."""

    server: str
    url: str
    status: int | None
    body: str = ""
    error: str = ""


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
            running = self.running_on(segment, ideal_instances)
            if running is not None:
                report.waiting.append(f"{segment}: re-ingestion already running on {running}")
                return
            reply = self.request(segment, ideal_instances)
            if reply is None:
                report.waiting.append(
                    f"{repair.reason}; re-ingestion not started: no live server of the segment "
                    "with a known admin endpoint; the next run tries again"
                )
                return
            self._report(repair, reply, report)
        except Exception as exc:  # never fail the run
            log.exception("healing %s: re-ingestion trigger of %s failed", table, segment)
            report.waiting.append(f"{segment}: re-ingestion not started: {exc}")

    def request(self, segment: str, ideal_instances: Iterable[str]) -> ServerReply | None:
        """Ask one live server of `segment` (picked as `trigger` picks it) to re-ingest it; None
        when there is none with a known admin endpoint."""
        candidates = self._candidates(sorted(ideal_instances))
        if not candidates:
            return None
        server = self.choose(sorted(candidates))
        url = f"{candidates[server]}{REINGEST_PATH}{urllib.parse.quote(segment, safe='')}"
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
            return ServerReply(server, url, None, error=str(exc))
        return ServerReply(server, url, status, body)

    def running_on(self, segment: str, ideal_instances: Iterable[str]) -> str | None:
        """The first live server of `segment` whose `GET /reingestSegment/jobs` lists a job for
        it (module docstring); None when none does."""
        for server, base in sorted(self._candidates(sorted(ideal_instances)).items()):
            request = urllib.request.Request(
                f"{base}{JOBS_PATH}", headers={"Authorization": f"Bearer {self.token()}"}
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                    jobs = json.loads(answer.read().decode("utf-8", "replace"))
            except (OSError, ValueError):  # HTTPError, URLError, timeouts, a body not JSON
                continue
            if isinstance(jobs, list) and any(
                isinstance(job, dict) and job.get("segmentName") == segment for job in jobs
            ):
                return server
        return None

    def _candidates(self, instances: list[str]) -> dict[str, str]:
        """Live instances among `instances` -> their admin base URL."""
        live = [i for i in instances if self.zk.exists(self.paths.liveinstance(i)) is not None]
        return {i: url for i, url in admin_urls(self.ctx, live).items() if url}

    def _report(self, repair: ErrorRepair, reply: ServerReply, report: HealingReport) -> None:
        segment, server, status, body = repair.segment, reply.server, reply.status, reply.body
        if status is None:
            report.waiting.append(
                f"{segment}: re-ingestion not started: {server} ({reply.url}) cannot be reached: "
                f"{reply.error}"
            )
        elif status == 200:
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
