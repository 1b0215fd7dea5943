"""Slow ranks by cause (issue #44): the rule of detectors/slow_cause.py on given medians, its
place in the straggler rule (detectors/straggler.py), the exchange's slots
(ranks/consensus.py), the job event's answer for a slow host (job/events.py) and the whole
path through real Monitors exchanging in threads (tests/thread_ranks.py)."""
import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from mindwatch.detectors.slow_cause import COMPUTE, DATA, HOST, UNKNOWN, SlowCause
from mindwatch.detectors.straggler import StragglerDetector
from mindwatch.job.events import slow_note
from mindwatch.ranks.consensus import RankConsensus
from mindwatch.ranks.rank_sync import RankSync
from thread_ranks import run_ranks

NONE = np.full(4, UNKNOWN, np.float32)       # no rank knows its CPU wait


def _work(*values):
    return np.array(values, np.float32)


def _steps(rule, work, waits=NONE, steps=10, data=False, start=1):
    """Each step's anomalies, the same medians every step."""
    return [rule.update(step, work, waits, data=data, where=" (host h, device 1)")
            for step in range(start, start + steps)]


def test_share_leaves_out_the_warmup_and_gives_the_window_median_once_full():
    rule = SlowCause(rank=0, world_size=2, window=4, warmup=2)
    shared = [rule.share(w, q) for w, q in
              [(9.0, 9.0), (9.0, None), (0.010, 0.2), (0.012, 0.4), (0.011, 0.1), (0.020, 0.3)]]
    # the two warm-up steps count for nothing; a CPU wait of None is not measured
    assert shared[:5] == [(UNKNOWN, UNKNOWN)] * 5
    assert shared[5] == (pytest.approx(0.0115), pytest.approx(0.25))
    assert rule.share(-1.0, None) == (pytest.approx(0.0115), pytest.approx(0.25))


def test_a_rank_whose_work_is_above_the_factor_is_named_by_its_compute_after_persist_steps():
    rule = SlowCause(rank=1, world_size=4, window=20, factor=1.15)
    assert rule.persist == 5
    found = _steps(rule, _work(0.010, 0.0125, 0.0101, 0.0099))
    assert [len(f) for f in found] == [0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    anomaly = found[4][0]
    assert (anomaly.kind, anomaly.step, anomaly.fields) == ("straggler", 5, {"cause": COMPUTE})
    assert anomaly.value == pytest.approx(0.0125)
    assert anomaly.threshold == pytest.approx(1.15 * 0.010)
    assert anomaly.message == (
        "rank 1 (host h, device 1) is a straggler (cause: compute): its own work before the "
        "step's collective takes 12.5 ms per step, 1.25x the other ranks' 10.0 ms (medians "
        "over 20 steps): a slower or throttled device, or more work in its step; every rank "
        "waits for it")
    assert rule.now == COMPUTE


@pytest.mark.parametrize("work", [
    (0.010, 0.0114, 0.010, 0.010),       # 1.14x: under the factor
    (0.0010, 0.0019, 0.0010, 0.0010),    # 1.9x but 0.9 ms: under min_seconds
    (0.010, UNKNOWN, 0.010, 0.010),      # this rank measures nothing
    # 1.25x, but the others spread by 10%: within (sqrt(2 ln 4) + 1.5) x 1.48 ms
    (0.010, 0.0125, 0.011, 0.009),
])
def test_no_compute_straggler_under_the_factor_the_floor_or_unknown(work):
    rule = SlowCause(rank=1, world_size=4, window=20)
    assert _steps(rule, _work(*work), steps=30) == [[]] * 30


def test_a_slow_streak_that_breaks_starts_again_and_one_episode_warns_once():
    rule = SlowCause(rank=1, world_size=4, window=8, persist=2)
    slow, fine = _work(0.010, 0.013, 0.010, 0.010), _work(0.010, 0.010, 0.010, 0.010)
    found = [rule.update(step, work, NONE, data=False) for step, work in
             enumerate([slow, fine, slow, slow, slow, fine, slow, slow], start=1)]
    assert [[a.step for a in f] for f in found] == [[], [], [], [4], [], [], [], [8]]


def test_the_others_median_is_of_the_ranks_that_know_it():
    rule = SlowCause(rank=2, world_size=5, window=20, persist=1)
    [anomaly] = rule.update(1, _work(UNKNOWN, 0.010, 0.013, 0.0101, UNKNOWN),
                            np.full(5, UNKNOWN, np.float32), data=False)
    assert anomaly.threshold == pytest.approx(1.15 * 0.01005)


def test_a_rank_whose_threads_wait_for_a_cpu_is_named_by_its_host():
    rule = SlowCause(rank=3, world_size=4, window=20, factor=1.15, wait_factor=2.0, persist=1)
    waits = _work(0.05, 0.04, 0.06, 0.5)
    # its work is slow too (wall time): the wait explains it, the cause is the host
    [anomaly] = rule.update(7, _work(0.010, 0.010, 0.010, 0.02), waits, data=False)
    assert anomaly.fields == {"cause": HOST}
    assert (anomaly.value, anomaly.threshold) == (pytest.approx(0.5), pytest.approx(0.1))
    assert anomaly.message.startswith(
        "rank 3 is a straggler (cause: host): its threads waited for a CPU 0.5 s per second, "
        "10x the other ranks' 0.05 s (medians over 20 steps): other processes on its host "
        "take its CPU")


@pytest.mark.parametrize("waits", [
    (0.05, 0.04, 0.06, 0.09),          # 1.8x the others': under straggler_factor
    (0.001, 0.001, 0.001, 0.1),        # 100x, but 0.099 s/s more: under factor - 1
])
def test_no_host_straggler_under_the_ratio_or_the_seconds(waits):
    rule = SlowCause(rank=3, world_size=4, window=20, persist=1)
    assert rule.update(1, NONE, _work(*waits), data=False) == []


def test_a_rank_the_data_rule_names_is_not_judged_by_its_work():
    rule = SlowCause(rank=1, world_size=4, window=20, persist=1)
    slow = _work(0.010, 0.013, 0.010, 0.010)
    assert rule.update(1, slow, NONE, data=True) == []
    assert [a.fields["cause"] for a in rule.update(2, slow, NONE, data=False)] == [COMPUTE]


def test_a_loaded_state_goes_on_where_it_was():
    rule = SlowCause(rank=1, world_size=4, window=3, warmup=1, persist=4)
    slow = _work(0.010, 0.013, 0.010, 0.010)
    for step in range(1, 4):
        rule.share(0.01 * step, 0.1)
        rule.update(step, slow, NONE, data=False)
    state = json.loads(json.dumps(rule.state_dict()))
    assert state == {"work": [0.02, 0.03], "wait": [0.1, 0.1], "streak": 3,
                     "cause": COMPUTE, "seen": 3, "in_episode": False}
    again = SlowCause(rank=1, world_size=4, window=3, warmup=1, persist=4)
    again.load_state_dict(state)
    assert again.share(0.04, 0.1) == rule.share(0.04, 0.1) == (pytest.approx(0.03), 0.1)
    assert [a.step for a in again.update(4, slow, NONE, data=False)] == [4]
    assert again.now == COMPUTE
    assert SlowCause(rank=0, world_size=2, window=3).state_dict() == {}


def test_the_straggler_rule_names_data_first_and_shares_its_cause():
    rule = StragglerDetector(rank=0, world_size=3, window=2, factor=2.0)
    rule.where = " (host a)"
    work = (_work(0.02, 0.01, 0.01), np.full(3, UNKNOWN, np.float32))
    middles = np.array([[0.05, 0.001, 0.001]] * 2, np.float32)
    assert rule.slow_code == 0
    for step in (1, 2):
        rule.share(0.05)
        found = rule.update_peers(step, [], 0.1, middles, work)
    [anomaly] = found
    assert anomaly.fields == {"cause": DATA}
    assert anomaly.message.startswith("rank 0 (host a) is a straggler: it spends 50.0 ms")
    assert rule.slow_code == 1                  # data: 1 + its index in CAUSES
    # its input recovers: its compute is what is slow now
    fast = np.array([[0.001, 0.001, 0.001]] * 2, np.float32)
    found = []
    for step in range(3, 3 + rule.cause.persist):
        found += rule.update_peers(step, [], 0.1, fast, work)
    assert [a.fields["cause"] for a in found] == [COMPUTE] and rule.slow_code == 3


def test_the_exchange_carries_each_ranks_medians_and_cause():
    vectors = {}

    def reduce_of(rank):
        def reduce(vector):
            vectors[rank] = vector
            return sum(vectors.values()) if len(vectors) == 3 else vector
        return reduce

    consensus = [RankConsensus(rank, 3, reduce_of(rank)) for rank in range(3)]
    for rank in (1, 2):
        consensus[rank].exchange(5, 0, 0.01, None, False, None, (0.01, 0.01),
                                 work=(UNKNOWN if rank == 2 else 0.012, 0.25), slow=rank + 1)
    shared = consensus[0].exchange(5, 0, 0.01, None, False, None, (0.01, 0.01),
                                   work=(0.010, UNKNOWN), slow=0)
    assert shared.work.tolist() == pytest.approx([0.010, 0.012, UNKNOWN])
    assert shared.waits.tolist() == pytest.approx([UNKNOWN, 0.25, 0.25])
    assert shared.slow.tolist() == [0, 2, 3]
    assert len(vectors[0]) == 10 * 3             # 10 slots a rank, 40 bytes... of decisions


PLACES = {r: ("node-a" if r < 4 else "node-b", r % 4) for r in range(8)}


@pytest.mark.parametrize("slow, note", [
    ([0] * 8, ""),
    ([0, 0, 0, 0, 3, 3, 3, 3],
     "; slow now: all 4 ranks of host node-b (ranks 4-7) by their compute: the host"),
    ([0, 0, 0, 0, 3, 2, 3, 3],
     "; slow now: all 4 ranks of host node-b (ranks 4-7) by their host and compute: the host"),
    ([0, 1, 0, 0, 0, 3, 3, 0],
     "; slow now: rank 1 (host node-a, device 1) by its data, rank 5 (host node-b, device 1) "
     "by its compute, rank 6 (host node-b, device 2) by its compute"),
])
def test_the_job_event_names_the_slow_ranks_and_a_host_all_of_whose_ranks_are_slow(slow, note):
    assert slow_note(np.array(slow), PLACES) == note


def test_the_cpu_wait_is_read_from_the_latest_hardware_sample():
    def sync(hardware, interval):
        monitor = SimpleNamespace(responder=SimpleNamespace(hardware=hardware),
                                  settings=SimpleNamespace(hardware_interval_s=interval))
        return RankSync(monitor, None)._cpu_wait()

    assert sync({"cpu_wait_s": 1.0}, 2.0) == 0.5
    assert sync({"cpu_wait_s": None}, 2.0) is None
    assert sync(None, 2.0) is None and sync({"cpu_wait_s": 1.0}, None) is None


def test_ranks_of_one_host_slow_in_compute_are_named_and_the_job_names_the_host(tmp_path):
    """8 real Monitors exchanging in threads; ranks 4-7 (node-b) report 30% more own work."""
    log_dir = str(tmp_path / "run")

    def body(monitor, rank):
        found = []
        for step in range(1, 41):
            found += monitor.end_step(step=step, loss=1.0, step_time_s=0.05,
                                      data_time_s=0.001,
                                      work_time_s=0.013 if rank >= 4 else 0.010)
        monitor.close()
        return [(a.step, a.fields.get("cause"), a.message.split(":")[0]) for a in found]

    found = run_ranks(8, body, log_dir=log_dir, hosts={r: PLACES[r][0] for r in range(8)},
                      hardware_interval_s=None, trend_warmup=5)
    # warm-up 5, window 20, 5 steps in a row: step 29
    assert found == [[]] * 4 + [
        [(29, COMPUTE, f"rank {r} (host node-b, device {r}) is a straggler (cause")]
        for r in range(4, 8)]
    with open(os.path.join(log_dir, "job.jsonl"), encoding="utf-8") as handle:
        events = [r for r in map(json.loads, handle) if r["kind"] == "event"]
    assert [(e["step"], e["ranks"], e["message"]) for e in events] == [
        (29, "4-7", "straggler on rank(s) 4-7; slow now: all 4 ranks of host node-b (ranks "
                    "4-7) by their compute: the host")]


def test_no_rank_is_judged_by_its_work_while_another_is_named_slow_by_its_input():
    rule = StragglerDetector(rank=1, world_size=3, window=20)
    rule.cause.persist = 1
    work = (_work(0.010, 0.013, 0.010), np.full(3, UNKNOWN, np.float32))
    middles = np.array([[0.001] * 3] * 2, np.float32)
    # rank 2 slow by its data (code 1), then by its host (2): rank 1's CPU time grows by
    # the wait, it is not named; rank 2 slow by its compute (3) does not hold it back
    assert rule.update_peers(1, [], 0.1, middles, work, np.array([0, 0, 1])) == []
    assert rule.update_peers(2, [], 0.1, middles, work, np.array([0, 0, 2])) == []
    found = rule.update_peers(3, [], 0.1, middles, work, np.array([0, 0, 3]))
    assert [a.fields["cause"] for a in found] == [COMPUTE]
    # its own code does not count as another's
    assert not rule._waited_for(np.array([0, 1, 0]))


def test_the_fleet_benchmark_names_a_rank_20_percent_slower_in_24_steps_after_the_warmup():
    """benchmarks/slow_ranks.py's simulation at a small size: the window (20) and five steps
    in a row after the warm-up (50), no false alarm; a healthy run none."""
    import importlib.util
    path = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "slow_ranks.py")
    spec = importlib.util.spec_from_file_location("slow_ranks", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.simulate(8, "compute", 0, 80, 1, noise_model="device")[:2] == (24, 0)
    assert bench.simulate(8, "input", 0, 40, 1, noise_model="device")[:2] == (20, 0)
    assert bench.simulate(8, "healthy", 0, 80, 1, noise_model="device")[:2] == (None, 0)


def test_among_4096_ranks_the_largest_healthy_median_is_not_named():
    """Medians spread by 5% (sd): the largest of 4095 lies ~3.5 sd above the middle, past
    straggler_work_factor 1.15 but within the spread allowed at that many ranks (sqrt(2 ln n)
    + SPREAD_MARGIN deviations); a rank 40% slower stands beyond it."""
    work = (0.010 * (1 + 0.05 * np.random.default_rng(7).standard_normal(4096))).astype(
        np.float32)
    top = int(np.argmax(work))
    assert work[top] > 1.15 * np.median(work)
    waits = np.full(4096, UNKNOWN, np.float32)
    rule = SlowCause(rank=top, world_size=4096, window=20, persist=1)
    assert rule.update(1, work, waits, data=False) == []
    slow = work.copy()
    slow[top] = 0.014
    [anomaly] = SlowCause(rank=top, world_size=4096, window=20, persist=1).update(
        1, slow, waits, data=False)
    assert anomaly.fields == {"cause": COMPUTE}
