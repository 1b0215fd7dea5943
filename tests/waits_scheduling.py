"""make test's scheduling under pytest-xdist: ``--dist loadgroup`` with one worker kept for the
msrun jobs and the tests that mostly wait.

Measured on the 2-core host (one make test, each test's wall and CPU time): about 300 of the
two workers' 1,080 seconds passed with the worker's core idle, in tests that sleep by design
(paced steps for the ETA and slowdown rules, hangs and stalls held until the watchdog speaks,
slow webhooks) and in the msrun jobs (their ranks start, meet and stop). A third worker that
took any test would also run a third CPU-bound test beside two others, and the timing
premises of the paced tests would fail (seen: 3 runs of 4 had a failure). Here the last
worker takes only the pinned groups, one after another: the msrun tests ("ranks") and the
tests marked ``waits`` (those that wait, and those whose premise is a steady load beside
them, which an msrun job's ranks starting at once would break), a group a module. The other
workers take everything else, then, once that is done, the pinned groups the last worker has
not started (or all of them, should it be gone): with the waits in one group, the last
worker's chain of msrun jobs and paced tests ended the run ~50 s after the others (482 s
against 432 in one make test).

They take a waits group only once the msrun jobs are done: an msrun job is two ranks and
msrun's own process, which under MindSpore 2.7.0 and 2.7.1 polls its workers without a pause
(a core of its own). Beside one, a 100 ms step of the Trainer took 1.5-2.4 s in make
test-compat, and the slowdown test's steady steps were as slow as its slow ones. A worker
with nothing it may take waits until the msrun jobs are done, and so does its last test: an
xdist worker runs a test once it has the next one or is told to stop.

With two workers (make test-compat) the last one, once its pinned groups are done, takes
the others' too: two CPU-bound tests on two cores. With one, this is loadgroup as
pytest-xdist has it.
"""
from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling

RANKS = "ranks"


# "ranks": the msrun tests, one job at a time; "waits-<module>": a module's tests marked
# waits (conftest.py). xdist orders the groups by their number of tests: "ranks" comes first.
def _pinned(scope: str) -> bool:
    return scope == RANKS or scope.startswith("waits-")


class WaitsScheduling(LoadGroupScheduling):
    def _pinned_node(self):
        nodes = self.nodes
        if len(nodes) < 2:
            return None
        return max(nodes, key=lambda node: int(node.gateway.id.removeprefix("gw")))

    def _msrun_jobs_left(self) -> bool:
        return RANKS in self.workqueue or any(
            not all(work_unit.values())
            for assigned in self.assigned_work.values()
            for scope, work_unit in assigned.items() if scope == RANKS)

    def _assign_work_unit(self, node) -> None:
        pinned_node = self._pinned_node()
        if pinned_node is None:
            super()._assign_work_unit(node)
            return
        wanted = [scope for scope in self.workqueue if _pinned(scope) == (node is pinned_node)]
        if not wanted:
            if not self.workqueue or (node is pinned_node and len(self.nodes) > 2):
                node.shutdown()     # the worker ends once its pending tests are run
                return
            if node is not pinned_node and self._msrun_jobs_left():
                return              # idle until the msrun jobs end (mark_test_complete)
            wanted = list(self.workqueue)
        scope = wanted[0]
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid)
                                for nodeid, done in work_unit.items() if not done])

    def mark_test_complete(self, node, item_index, duration=0) -> None:
        super().mark_test_complete(node, item_index, duration)
        if node is self._pinned_node():     # the workers waiting for the msrun jobs' end
            for other in self.nodes:
                if other is not node:
                    self._reschedule(other)
