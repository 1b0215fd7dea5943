"""When CpuShares scans every process to name the other processes that take the host's CPU:
a seed as a contention starts, its follow-up names them, then every TOP_EVERY_S at most.
On a scripted process table (psutil's shape, the CPU seconds each process has used) and a
fake clock, so the schedule is exact; tests/hardware/test_cpu_share.py runs it against this
machine's real processes."""
from collections import namedtuple
from types import SimpleNamespace

import psutil

from mindwatch.hardware.cpu_share import TOP_EVERY_S, CpuShares

Times = namedtuple("Times", "user system")
HostTimes = namedtuple("HostTimes", "user system idle")
OWN = 100


class Table:
    """A host of 2 cores whose processes used ``seconds[pid]`` CPU seconds so far."""

    Error = psutil.Error

    def __init__(self):
        self.seconds, self.host = {OWN: 0.0}, 0.0
        self.scans = 0

    def run(self, wall_s, **shares):
        """``wall_s`` seconds pass; each pid (``p<pid>=share``) takes that share of a core."""
        self.host += 2 * wall_s
        for name, share in shares.items():
            pid = int(name[1:])
            self.seconds[pid] = self.seconds.get(pid, 0.0) + share * wall_s

    def Process(self, pid=OWN):
        return SimpleNamespace(pid=pid, children=lambda recursive: [],
                               cpu_times=lambda: Times(self.seconds[pid], 0.0))

    def process_iter(self, attrs):
        self.scans += 1
        return [SimpleNamespace(info={"pid": pid, "name": f"p{pid}",
                                      "cpu_times": Times(seconds, 0.0)})
                for pid, seconds in self.seconds.items()]

    def cpu_times(self):
        return HostTimes(self.host, 0.0, 0.0)


def test_a_contention_that_grows_before_its_follow_up_is_still_named(tmp_path):
    table, now = Table(), [0.0]
    shares = CpuShares(table, pid=OWN, proc=str(tmp_path), clock=lambda: now[0])
    named = []
    # others' share (percent of the host): none, then 20% (seed), 45% (grew: the follow-up
    # names them all the same), 45% for a while (every TOP_EVERY_S), then 5% (calm)
    for others in (0, 0, 20, 45, *[45] * 12, 5, 5):
        now[0] += 2.0
        table.run(2.0, p100=1.0, p7=others / 50.0)
        named.append(shares.sample(4.0, 50.0 + others)["cpu_top"])
    assert named[2] is None                                  # the seed
    assert named[3] == [{"pid": 7, "name": "p7", "cpu_percent": 45.0}]
    again = [i for i, top in enumerate(named) if top and i > 3]
    assert again == [3 + int(TOP_EVERY_S / 2.0)]             # then every 20 s
    assert named[-2:] == [None, None] and table.scans == 3
