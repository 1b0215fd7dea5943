"""Two nodes on this one host, for the scale tests' jobs across nodes: each node a network
namespace and a UTS namespace of its own (its own host name and its own address), the two
joined by a veth pair, as two machines on one network. A launcher runs on a node through
nsenter; the run directory is shared, as on a shared file system.

Why not two launchers on 127.0.0.1, each with only its host name changed: msrun starts the
job's scheduler on every node whose own addresses include ``--master_addr`` (its
``_is_local_ip``), so both started one on the same port; whichever lost the race to bind it
failed and made its msrun exit with status 1 once the job was over (seen here). Here only
node-a holds the master's address.

Each node's namespaces are held by a ``sleep`` of its own (not by the launchers): the veth
pair lives as long as both of its ends' namespaces, and a node whose launcher ended first took
the pair with it while the other node's ranks still had to say goodbye to the scheduler (seen:
"Network is unreachable", a timed-out rank, msrun's status 1). Needs root (CI runs as root),
unshare, nsenter and ip.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass

# Each node's namespace starts empty, so these collide with nothing on the host.
INTERFACE = "eth0"
ADDRESSES = ("10.213.0.1", "10.213.0.2")
# The holders outlive a test process killed hard for at most this long.
HOLD_S = 900


@dataclass
class Node:
    name: str
    address: str
    holder: subprocess.Popen

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run on this node: in its network and UTS namespaces."""
        return ["nsenter", f"--target={self.holder.pid}", "--net", "--uts", "--", *argv]

    def run(self, script: str) -> None:
        done = subprocess.run(self.command(["sh", "-ec", script]), capture_output=True,
                              text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"on {self.name}: {script}: {done.stderr.strip()}")


def _end_what_runs_in(namespace: str, holder: int) -> None:
    """Every process left in a node's network namespace (``namespace``: its
    /proc/PID/ns/net link) but its holder: what a launcher that timed out or failed left
    there (ranks in sessions of their own, a scheduler). Each was started on that node."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == holder:
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/net") == namespace:
                os.kill(int(entry), signal.SIGKILL)
        except OSError:          # gone meanwhile, or not ours to read
            pass


def _own_namespace(pid: int, timeout: float = 10.0) -> None:
    """Until ``pid`` runs in a network namespace other than this process's: unshare has
    made it and exec'd the holder (before that, /proc/PID/ns/net is still this one's)."""
    ours, deadline = os.readlink("/proc/self/ns/net"), time.monotonic() + timeout
    while os.readlink(f"/proc/{pid}/ns/net") == ours:
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} got no network namespace of its own")
        time.sleep(0.01)


@contextmanager
def two_nodes(names: tuple[str, str] = ("node-a", "node-b")):
    """Two ``Node``: names[0] at ADDRESSES[0] (the master's), names[1] at ADDRESSES[1]."""
    if os.geteuid() != 0:
        raise RuntimeError("two nodes on one host are namespaces of their own: run as root")
    holders: list[subprocess.Popen] = []
    try:
        for _ in names:
            holders.append(subprocess.Popen(["unshare", "--net", "--uts", "sleep", str(HOLD_S)]))
        for holder in holders:
            _own_namespace(holder.pid)
        nodes = [Node(name, address, holder)
                 for name, address, holder in zip(names, ADDRESSES, holders, strict=True)]
        first, second = nodes
        subprocess.run(["ip", "link", "add", INTERFACE, "netns", str(first.holder.pid), "type",
                        "veth", "peer", "name", INTERFACE, "netns", str(second.holder.pid)],
                       check=True, capture_output=True, text=True, timeout=30)
        for node in nodes:
            node.run(f"hostname {node.name}; ip addr add {node.address}/24 dev {INTERFACE}; "
                     f"ip link set {INTERFACE} up; ip link set lo up")
        yield nodes
    finally:
        ours = os.readlink("/proc/self/ns/net")
        for holder in holders:
            try:
                namespace = os.readlink(f"/proc/{holder.pid}/ns/net")
            except OSError:              # the holder is gone (unshare failed)
                namespace = ours
            if namespace != ours:
                _end_what_runs_in(namespace, holder.pid)
            holder.send_signal(signal.SIGTERM)
            holder.wait(timeout=30)
