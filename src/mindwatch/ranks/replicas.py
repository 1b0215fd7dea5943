"""Replicas that silently diverge: each data-parallel rank's fingerprint of its weights and
optimizer state (the adapter computes them and exchanges them every ``consistency_interval``
steps), compared here. Ranks whose fingerprints are bit-identical form a group; the largest
group (ties: the one holding the lowest rank) is the reference, and every other rank is a
``replica_mismatch``, decided alike on every rank, so every rank stops after the same step.

Only the reference ranks take the policy's checkpoint: a rank that differs holds weights
nobody should resume from. With two ranks there is no majority: the message says which
differs from which, and rank 0's side is kept.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..anomaly import REPLICA_MISMATCH, Anomaly
from .peers import Peers

if TYPE_CHECKING:
    import numpy as np


def replica_groups(fingerprints: np.ndarray) -> list[list[int]]:
    """Ranks with bit-identical rows, the largest group first (ties: lowest rank first)."""
    # numpy imported here: the views import this package and need none (a reader's process
    # under an address-space cap has no room for its BLAS buffers)
    import numpy as np

    groups: dict[bytes, list[int]] = {}
    for rank, row in enumerate(fingerprints):
        groups.setdefault(np.ascontiguousarray(row).tobytes(), []).append(rank)
    return sorted(groups.values(), key=lambda ranks: (-len(ranks), ranks[0]))


def first_difference(a: np.ndarray, b: np.ndarray, names: Sequence[str]) -> str:
    """The first tensor (two fingerprint entries each) where two rows differ."""
    import numpy as np

    differ = np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))
    return names[int(differ[0]) // 2] if len(differ) else "?"


class ReplicaCheck:
    """``peers``: this rank, the policy and where the ranks run (ranks/peers.py); ``act``:
    carries out the finding (decisions.Actions.act)."""

    def __init__(self, *, peers: Peers, act: Callable[[list[Anomaly]], None]):
        self._peers, self._act = peers, act
        self.rank, self._policy = peers.rank, peers.policy

    def observe(self, *, step: int, fingerprints: np.ndarray,
                names: Sequence[str]) -> list[Anomaly]:
        """``fingerprints``: one row per rank (float32), ``names``: the tensors in order."""
        import numpy as np

        rows = np.asarray(fingerprints, np.float32)
        groups = replica_groups(rows)
        if len(groups) < 2:
            return []
        reference, others = groups[0], sorted(r for group in groups[1:] for r in group)
        example = others[0] if self.rank in reference else self.rank
        where = first_difference(rows[example], rows[reference[0]], names)
        if len(rows) == 2:
            message = (f"rank {others[0]}'s weights and optimizer state differ from rank "
                       f"{reference[0]}'s at step {step} (first in {where}); with two ranks "
                       f"the majority is unknown: rank {reference[0]}'s are kept")
        else:
            message = (f"rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} "
                       f"hold{'' if len(others) > 1 else 's'} weights and optimizer state "
                       f"that differ from the {len(reference)} ranks that agree at step "
                       f"{step} (first in {where})")
        anomaly = Anomaly(REPLICA_MISMATCH, step, float(len(others)), None, message)
        if len(others) == 1 and len(rows) > 2:          # a majority says which one it is
            anomaly.origin_rank = others[0]
            anomaly.origin_place = self._peers.places.get(others[0], (None, None))
        if self.rank not in reference:          # its weights are the ones not to keep
            anomaly.actions = [a for a in self._policy.actions_for(REPLICA_MISMATCH)
                               if a != "checkpoint"] or ["warn"]
        self._act([anomaly])
        return [anomaly]
