"""The vectorised exchange, places and straggler rules (issue #43) decide exactly what the
per-rank loops they replaced decided: the old code runs from benchmarks/fleet.py, on random
inputs at a few world sizes."""
import importlib.util
import os

import numpy as np
import pytest

from mindwatch.anomaly import GRADIENT_NONFINITE, USER_STOP
from mindwatch.ranks.consensus import _HOST_BYTES, _SLOTS, RankConsensus
from mindwatch.ranks.peers import STOP_REASONS, stop_code

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "fleet.py")
_SPEC = importlib.util.spec_from_file_location("fleet", _PATH)
fleet = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fleet)

SIZES = (2, 3, 8, 37, 300)


def _random_totals(n, rng, count=6):
    """Sums as the ranks' vectors make them: a few stops (some of codes no kind has), rewind
    wishes (some without a kind, some of an unknown one), data times, touched flags."""
    totals = []
    for _ in range(count):
        total = np.zeros(_SLOTS * n, np.float32)
        some = rng.choice(n, size=max(1, n // 3), replace=False)
        total[some] = rng.integers(0, len(STOP_REASONS) + 3, len(some))
        total[n:2 * n] = rng.uniform(0, 0.3, n).astype(np.float32)
        total[2 * n + some] = rng.integers(0, 5, len(some))
        total[3 * n + some] = rng.integers(0, len(STOP_REASONS) + 3, len(some))
        total[4 * n + some] = rng.integers(0, 2, len(some))
        totals.append(total)
    return totals


@pytest.mark.parametrize("n", SIZES)
def test_the_exchange_equals_the_old_loop(n):
    rng = np.random.default_rng(n)
    totals = _random_totals(n, rng)
    old = fleet.OldRankConsensus(1 % n, n, fleet.Replay(totals))
    new = RankConsensus(1 % n, n, fleet.Replay(totals))
    wished = 0
    for step in range(40, 40 + len(totals)):
        a = old.exchange(step, 0, 0.01, None, False)
        b = new.exchange(step, 0, 0.01, None, False)
        assert b.stop_codes.tolist() == a.stop_codes
        assert b.data_times.tolist() == a.data_times
        assert b.rewind_wishes == a.rewind_wishes and b.touched == a.touched
        wished += len(a.rewind_wishes)
    assert wished > 0                   # the inputs held wishes to compare


@pytest.mark.parametrize("n", SIZES)
def test_places_equal_the_old_loop(n):
    rng = np.random.default_rng(100 + n)
    hosts = ["node-a", "nœud-ü", "x" * 70, "é" * 40, "h"]         # long ones are cut
    width = _HOST_BYTES + 1
    total = np.zeros((n, width), np.float32)
    for rank in range(n):
        name = hosts[int(rng.integers(len(hosts)))].encode()[:_HOST_BYTES]
        total[rank, :len(name)] = np.frombuffer(name, np.uint8)
        total[rank, -1] = rng.integers(-1, 8)            # -1: no device
    old = fleet.OldRankConsensus(0, n, fleet.Replay([total.reshape(-1)]))
    new = RankConsensus(0, n, fleet.Replay([total.reshape(-1)]))
    a, b = old.places("node-a", 0), new.places("node-a", 0)
    assert b == a and len(b) == n
    assert {type(device) for _, device in b.values()} <= {int, type(None)}
    assert any(device is None for _, device in b.values()) or n < 8


@pytest.mark.parametrize(("n", "window"), [(2, 20), (3, 5), (8, 20), (37, 7), (300, 4)])
def test_the_straggler_rules_equal_the_old_loop(n, window):
    """Every step's findings (stragglers, one slow rank in bursts; peer stops), the saved
    state, and the findings after it is loaded into a new rule."""
    rng = np.random.default_rng(200 + n)
    rank = n - 1
    old, new = (kind(rank=rank, world_size=n, policy=fleet.Policy({}),
                     straggler_window=window, straggler_factor=2.0)
                for kind in (fleet.OldPeers, fleet.Peers))
    fired = stops = 0
    for step in range(1, 6 * window):
        times = rng.uniform(0.001, 0.02, n).astype(np.float32)
        if (step // window) % 2:                     # slow, then not, then slow again
            times[rank] = rng.uniform(0.1, 0.3)
        codes = np.zeros(n, np.int64)
        if step % 9 == 0:
            codes[rng.integers(n)] = stop_code(GRADIENT_NONFINITE if step % 2 else USER_STOP)
        as_lists = {"stop_codes": codes.tolist(), "data_times": times.astype(float).tolist()}
        # the exchange's float32 times, then (a custom exchange's) float64: the ring widens
        arrays = {"stop_codes": codes,
                  "data_times": times if step < 2 * window else times.astype(np.float64)}
        stopping = step % 7 == 0
        a = old.findings(step=step, step_time_s=0.05, stopping=stopping, **as_lists)
        b = new.findings(step=step, step_time_s=0.05, stopping=stopping, **arrays)
        assert b == a
        fired += sum(f.kind == "straggler" for f in a)
        stops += sum(f.kind == "peer_stop" for f in a)
        if step == 3 * window + 1:                   # a saved state, resumed
            state = old.straggler.state_dict()
            assert new.straggler.state_dict() == state
            for peers in (old, new):
                peers.straggler = type(peers.straggler)(rank=rank, world_size=n,
                                                        window=window, factor=2.0)
                peers.straggler.load_state_dict(state)
            assert new.straggler.state_dict() == state
    assert fired >= 2 and stops >= 1               # the inputs held findings to compare
    assert new.straggler.state_dict() == old.straggler.state_dict()


def test_the_list_path_finds_the_same_first_stop():
    """Custom loops hand in lists: the first other rank with a known code, as before."""
    new = fleet.Peers(rank=1, world_size=4, policy=fleet.Policy({}), straggler_window=20,
                      straggler_factor=2.0)
    codes = [0, stop_code(USER_STOP), 99, stop_code(GRADIENT_NONFINITE)]
    for given in (codes, np.array(codes)):
        [peer] = new.findings(step=3, stop_codes=given, data_times=[0.0] * 4,
                              step_time_s=None, stopping=False)
        assert peer.origin == (3, GRADIENT_NONFINITE) and peer.value == 3.0


@pytest.mark.parametrize("times", [[[], [], []], [[0.5, 0.25], [0.1], [0.2, 0.3]]])
def test_a_state_saved_early_or_uneven_loads(times):
    """A state saved before the window filled (even before the first step), or lists of
    uneven length: the rule goes on from it and saves what it holds, oldest first."""
    rule = fleet.StragglerDetector(rank=0, world_size=3, window=3)
    rule.load_state_dict({"times": times, "in_episode": False})
    assert rule.state_dict()["times"] == times
    rule.update_peers(1, np.array([0.5, 0.5, 0.5], np.float32), 0.1)
    kept = min(len(t) for t in times)
    assert rule.state_dict()["times"] == [[*t[len(t) - kept:], 0.5] for t in times]
