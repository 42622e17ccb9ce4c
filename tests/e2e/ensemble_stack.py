"""The outage stack (`OutageStack`) on a 3-member ZooKeeper ensemble, optionally under a chroot.

`Ensemble` drives scripts/zk_ensemble.sh (the one place the members' configuration is written)
with a state folder and 9 free loopback ports of its own, and reads the members' state the way an
operator would: `srvr` for each member's mode, the pid files for killing one.
`EnsembleStack` starts that ensemble instead of the single ZooKeeper, plus the private Redis; every
process of the stack gets `ZK_HOSTS=<3 members>[<chroot>]`.
`zk_connections(pid)` lists the established TCP connections of a process (and its children, for a
Celery worker's pool) to the members' client ports, read from /proc: which member each process
talks to, and whether it opened a new connection.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from tests import envdefaults
from tests.e2e.outage_stack import OutageStack
from tests.ingest_cluster import HOST, free_port
from tests.poll import wait_until

__all__ = ["Ensemble", "EnsembleStack", "process_tree", "zk_connections"]

SCRIPT = envdefaults.ROOT / "scripts" / "zk_ensemble.sh"
MEMBERS = (1, 2, 3)


class Ensemble:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        # member -> (client, peer, election) port
        self.ports = {m: (free_port(), free_port(), free_port()) for m in MEMBERS}
        self.hosts = ",".join(f"{HOST}:{self.ports[m][0]}" for m in MEMBERS)

    def script(self, *args: str) -> str:
        spec = ",".join(":".join(map(str, self.ports[m])) for m in MEMBERS)
        env = {**os.environ, "ZK_ENSEMBLE_DIR": str(self.state_dir), "ZK_ENSEMBLE_PORTS": spec}
        done = subprocess.run(
            [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"zk_ensemble.sh {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    def start(self) -> None:
        self.script("start")

    def stop(self) -> None:
        self.script("stop")

    def client_port(self, member: int) -> int:
        return self.ports[member][0]

    def client_ports(self) -> list[int]:
        return [self.client_port(m) for m in MEMBERS]

    def mode(self, member: int) -> str | None:
        """`Mode:` of the member's `srvr` answer (leader, follower), None when it does not serve."""
        try:
            with socket.create_connection((HOST, self.client_port(member)), timeout=2) as conn:
                conn.sendall(b"srvr")
                answer = b"".join(iter(lambda: conn.recv(4096), b"")).decode(errors="replace")
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode: "):
                return line.removeprefix("Mode: ").strip()
        return None

    def leader(self) -> int | None:
        return next((m for m in MEMBERS if self.mode(m) == "leader"), None)

    def pid(self, member: int) -> int:
        return int((self.state_dir / f"zk{member}" / "zk.pid").read_text().strip())

    def kill(self, member: int) -> None:
        """SIGKILL the member (no shutdown: its sockets close as the kernel drops them)."""
        pid = self.pid(member)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not _running(pid), timeout=10, what=f"zk{member} gone")


class EnsembleStack(OutageStack):
    def __init__(self, var_dir: Path, chroot: str = "") -> None:
        super().__init__(var_dir)
        self.ensemble = Ensemble(var_dir / "zk-ensemble")
        self.chroot = chroot
        self.zk_hosts = self.ensemble.hosts + chroot

    def start_stores(self) -> None:
        self._services("start", "redis")
        self.ensemble.start()

    def stop_stores(self) -> None:
        self._services("stop", "redis")
        self.ensemble.stop()


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                todo += [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
    return out


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def zk_connections(pid: int, client_ports: set[int]) -> set[tuple[int, int, int]]:
    """(pid, local port, member client port) of each established TCP connection from `pid` or a
    descendant to one of `client_ports`."""
    found = set()
    for member_pid in process_tree(pid):
        inodes = _socket_inodes(member_pid)
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{member_pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                remote_port = int(remote.rsplit(":", 1)[1], 16)
                if state == "01" and inode in inodes and remote_port in client_ports:
                    found.add((member_pid, int(local.rsplit(":", 1)[1], 16), remote_port))
    return found
