"""The console's real stack for browser tests: `IngestCluster` plus the mirror sync process.

The console pages read only the database mirror, which `manage.py sync_zk --every N` keeps up to
date. Under tests beat does not sync the mirror (MIRROR_SYNC_ON_BEAT=false), so the stack runs the
sync as one more process, with the environment of the controller and the servers (their ZooKeeper
chroot, the test database file). `ConsoleStack.stop()` (inherited) SIGTERMs it with the rest.
"""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request

from tests.ingest_cluster import HOST, IngestCluster

__all__ = ["ConsoleStack"]


class ConsoleStack(IngestCluster):
    """A controller (API and console pages), servers, and `sync_zk --every` as processes."""

    @property
    def url(self) -> str:
        """The controller's base URL: the API and the console pages."""
        return f"http://{HOST}:{self.controller_port}"

    def start_mirror_sync(self, every: float = 1.0) -> subprocess.Popen:
        """`manage.py sync_zk --every <every>`, logged as <prefix>-sync_zk.log."""
        return self._spawn("sync_zk", ["sync_zk", "--every", f"{every:g}"])

    def serves_pages(self) -> bool:
        """True once the controller answers the login page over HTTP."""
        try:
            with urllib.request.urlopen(f"{self.url}/login/", timeout=5) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False
