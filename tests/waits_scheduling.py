"""make test's scheduling under pytest-xdist: ``--dist loadgroup`` with one worker kept for the
tests that mostly wait.

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
against 432 in one make test). With fewer than three workers this is loadgroup as
pytest-xdist has it.
"""
from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling


# "ranks": the msrun tests, one job at a time; "waits-<module>": a module's tests marked
# waits (conftest.py). xdist orders the groups by their number of tests: "ranks" comes first.
def _pinned(scope: str) -> bool:
    return scope == "ranks" or scope.startswith("waits-")


class WaitsScheduling(LoadGroupScheduling):
    def _pinned_node(self):
        nodes = self.nodes
        if len(nodes) < 3:
            return None
        return max(nodes, key=lambda node: int(node.gateway.id.removeprefix("gw")))

    def _assign_work_unit(self, node) -> None:
        pinned_node = self._pinned_node()
        if pinned_node is None:
            super()._assign_work_unit(node)
            return
        wanted = [scope for scope in self.workqueue if _pinned(scope) == (node is pinned_node)]
        if not wanted:
            if node is pinned_node or not self.workqueue:
                node.shutdown()     # the worker ends once its pending tests are run
                return
            wanted = list(self.workqueue)
        scope = wanted[0]
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid)
                                for nodeid, done in work_unit.items() if not done])
