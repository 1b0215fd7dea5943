"""A ``SnapshotStore`` (recovery/rewinding.py) over a plain Python training state, for the
core tests of rewinds that need no framework (tests/core, tests/report)."""
import copy


class DictStore:
    """Snapshots of ``state``, a dict of numbers."""

    def __init__(self):
        self.state = {"w": 0.0, "step": 0}
        self.copies = {}

    def take(self, step):
        self.copies[step] = copy.deepcopy(self.state)
        return 16

    def restore(self, step):
        self.state = copy.deepcopy(self.copies[step])

    def drop(self, step):
        del self.copies[step]
