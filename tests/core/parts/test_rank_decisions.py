"""RankDecisions alone: this rank's stop code, the stops of the others, rewinds."""
from parts_kit import Kit

from mindwatch.anomaly import GRADIENT_NONFINITE, Anomaly
from mindwatch.ranks.decisions import RankDecisions
from mindwatch.ranks.peers import Peers, stop_code
from mindwatch.recovery.rewinding import RewindGuard
from mindwatch.recovery.skipping import SkipGuard


def _decisions(kit, rank=0):
    peers = Peers(rank=rank, world_size=2, policy=kit.policy, straggler_window=20,
                  straggler_factor=2.0)
    rewinds = RewindGuard(kit.policy, snapshot_every=100, snapshots_kept=2, max_rewinds=3,
                          rank=rank, store=None, detectors=[])
    skips = SkipGuard(kit.policy, max_skips=5, loss_spike=None, grad_spike=None)
    return RankDecisions(current=kit.current, peers=peers, rewinds=rewinds, skips=skips,
                         actions=kit.actions, writer=kit.writer)


def test_the_stop_code_is_this_ranks_own_wish(tmp_path, clock):
    kit = Kit(tmp_path, clock)
    decisions = _decisions(kit)
    assert decisions.stop_code() == 0
    kit.segment.stop_requested = Anomaly(GRADIENT_NONFINITE, 3, None, None, "nan",
                                         actions=["stop"])
    assert decisions.stop_code() == stop_code(GRADIENT_NONFINITE) > 0


def test_another_ranks_stop_stops_this_one_after_the_same_step(tmp_path, clock):
    kit = Kit(tmp_path, clock)
    kit.segment.last_step = 5
    decisions = _decisions(kit)
    [peer] = decisions.observe_peers(step=5, stop_codes=[0, stop_code(GRADIENT_NONFINITE)],
                                     data_times=[0.01, 0.01], step_time_s=0.1)
    assert peer.kind == "peer_stop" and peer.origin == (1, GRADIENT_NONFINITE)
    assert kit.segment.stop_requested is peer
    assert decisions.stop_code() == 0        # a follower asks nothing of the others
    [record] = kit.sink.of_kind("anomaly")
    assert record["anomaly"] == "peer_stop" and record["step"] == 5
    # once stopping, another rank's stop adds nothing
    assert decisions.observe_peers(step=5, stop_codes=[0, 1], data_times=[0.0, 0.0]) == []


def test_without_a_rewind_policy_settling_is_a_no_op(tmp_path, clock):
    kit = Kit(tmp_path, clock)
    decisions = _decisions(kit)
    assert decisions.settle_rewind(step=1) is None
    assert kit.sink.records == []
