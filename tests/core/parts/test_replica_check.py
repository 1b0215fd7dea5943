"""ReplicaCheck alone: the majority is the reference, every other rank a replica_mismatch,
decided alike on every rank; only the reference ranks checkpoint."""
import math

import numpy as np

from mindwatch.anomaly import Anomaly
from mindwatch.policy import Policy
from mindwatch.ranks.peers import Peers
from mindwatch.ranks.replicas import ReplicaCheck, replica_groups
from mindwatch.settings import MonitorSettings

NAMES = ("a.weight", "b.weight", "moment1.a.weight")


def _rows(n, differ=(), where=1):
    rows = np.tile(np.arange(6, dtype=np.float32), (n, 1))
    for rank in differ:
        rows[rank, 2 * where + 1] += 1.0
    return rows


def _check(rank, world=4):
    acted: list[Anomaly] = []
    peers = Peers(rank=rank, world_size=world, policy=Policy(MonitorSettings().policies),
                  straggler_window=8, straggler_factor=3.0)
    peers.places = {2: ("node-c", 1)}
    return ReplicaCheck(peers=peers, act=acted.extend), acted


def test_agreeing_replicas_raise_nothing_and_nan_equals_nan():
    check, acted = _check(0)
    rows = _rows(3)
    rows[:, 0] = math.nan                                   # the same NaN on every rank
    assert check.observe(step=1000, fingerprints=rows, names=NAMES) == [] and acted == []


def test_the_minority_differs_from_the_majority_on_every_rank():
    for rank in range(4):
        check, acted = _check(rank)
        [found] = check.observe(step=2000, fingerprints=_rows(4, differ=[2]), names=NAMES)
        assert acted == [found] and (found.kind, found.value) == ("replica_mismatch", 1.0)
        assert found.message == ("rank 2 holds weights and optimizer state that differ from "
                                 "the 3 ranks that agree at step 2000 (first in b.weight)")
        assert found.actions == ([] if rank != 2 else ["stop"])    # policy's, or no checkpoint
        assert (found.origin_rank, found.origin_place) == (2, ("node-c", 1))


def test_two_ranks_name_which_differs_from_which_and_ties_keep_rank_0():
    [found] = _check(1, world=2)[0].observe(step=8, fingerprints=_rows(2, differ=[1], where=2),
                                            names=NAMES)
    assert found.origin_rank is None                     # no majority: no culprit named
    assert found.message == ("rank 1's weights and optimizer state differ from rank 0's at "
                             "step 8 (first in moment1.a.weight); with two ranks the majority "
                             "is unknown: rank 0's are kept")
    assert replica_groups(_rows(4, differ=[0, 1])) == [[0, 1], [2, 3]]
