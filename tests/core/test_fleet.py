"""The vectorised exchange, places and straggler rules (issue #43) decide exactly what the
per-rank loops they replaced decided: the old code runs from benchmarks/fleet.py, on random
inputs at a few world sizes."""
import importlib.util
import os

import numpy as np
import pytest

from mindwatch.anomaly import GRADIENT_NONFINITE, USER_STOP
from mindwatch.basics import medians
from mindwatch.job import fields as job_fields
from mindwatch.observation import StepObservation
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


class _Fleet:
    """n ranks' exchanges, simulated: each rank's straggler rule shares its window's middle
    values, every rank's vector goes through RankConsensus.exchange, and their sum comes back
    to the ranks that judge (``judged``: today's Peers, and the old loop beside each)."""

    def __init__(self, n, window, judged):
        self.n, self.window, self.judged = n, window, judged
        self.new, self.old = ({r: kind(rank=r, world_size=n, policy=fleet.Policy({}),
                                       straggler_window=window, straggler_factor=fleet.FACTOR)
                               for r in judged} for kind in (fleet.Peers, fleet.OldPeers))
        self.rules = [self.new[r].straggler if r in self.new else self.rule(r)
                      for r in range(n)]

    def rule(self, rank, kind=fleet.StragglerDetector):
        return kind(rank=rank, world_size=self.n, window=self.window, factor=fleet.FACTOR)

    def step(self, step, times, codes, stopping):
        """Every judged rank's findings, today's and the old loop's."""
        middles = [rule.share(float(t)) for rule, t in zip(self.rules, times, strict=True)]
        vectors = []
        for rank, middle in enumerate(middles):
            capture = RankConsensus(rank, self.n, lambda v: vectors.append(v) or v)
            capture.exchange(step, int(codes[rank]), float(times[rank]), None, False, None,
                             middle)
        total = np.sum(vectors, axis=0, dtype=np.float32)
        found = {}
        for rank in self.judged:
            shared = RankConsensus(rank, self.n, lambda v: total).exchange(
                step, int(codes[rank]), float(times[rank]), None, False, None, middles[rank])
            assert shared.data_times.tolist() == times.tolist()
            b = self.new[rank].findings(step=step, stop_codes=shared.stop_codes,
                                        data_times=shared.data_times, step_time_s=0.05,
                                        stopping=stopping, middles=shared.middles)
            a = self.old[rank].findings(step=step, stop_codes=shared.stop_codes.tolist(),
                                        data_times=shared.data_times.tolist(),
                                        step_time_s=0.05, stopping=stopping)
            found[rank] = (a, b)
        return found

    def resume(self, legacy):
        """Every rank's rule saved and loaded into a new one; ``legacy``: the judged ranks
        load the old loop's state (every rank's times), the others their own."""
        for rank in range(self.n):
            state = self.rules[rank].state_dict()
            assert set(state) == {"own_times", "in_episode"}
            if rank in self.judged:
                old_state = self.old[rank].straggler.state_dict()
                assert state["own_times"] == old_state["times"][rank]
                assert state["in_episode"] == old_state["in_episode"]
                if legacy:
                    state = old_state
                self.old[rank].straggler = self.rule(rank, fleet.OldStraggler)
                self.old[rank].straggler.load_state_dict(old_state)
            self.rules[rank] = self.rule(rank)
            self.rules[rank].load_state_dict(state)
            if rank in self.judged:
                self.new[rank].straggler = self.rules[rank]


@pytest.mark.parametrize(("n", "window", "resumes"), [
    (2, 20, (5, 61)), (3, 5, (3, 16)), (8, 20, (12, 61)), (8, 7, (22, 23)),
    (37, 7, (4, 22)), (300, 4, (2, 13)), (300, 5, (7, 20)), (1500, 4, (2, 13))])
def test_the_straggler_rule_on_exchanged_medians_equals_the_old_loop(n, window, resumes):
    """Each rank shares its own window's middle values and judges itself from the ranks'
    exchanged medians: every judged rank's findings (stragglers, the slow ranks in bursts;
    peer stops) are the old loop's, step after step, before the windows fill too, across
    resumes from each rank's own state (one saved before the window filled) and from the
    old loop's (every rank's times)."""
    rng = np.random.default_rng(600 + n + window)
    slow = n - 1
    judged = sorted({0, 1, slow} | (set(range(n)) if n <= 8 else set()))
    fleet_ = _Fleet(n, window, judged)
    fired, stops = set(), 0
    for step in range(1, 6 * window + 1):
        times = rng.uniform(0.001, 0.02, n).astype(np.float32)
        if (step // window) % 2:                     # slow, then not, then slow again
            times[slow] = rng.uniform(0.1, 0.3)
        if step > 3 * window:                        # rank 0 slow too: a tie of sorts
            times[0] = rng.choice(np.float32([0.1, 0.2]))
        if rng.random() < 0.2:                       # values that tie across the ranks
            times = rng.choice(np.float32([0.0, 0.01, 0.05]), n)
        codes = np.zeros(n, np.int64)
        if step % 9 == 0:
            codes[rng.integers(n)] = stop_code(GRADIENT_NONFINITE if step % 2 else USER_STOP)
        for rank, (a, b) in fleet_.step(step, times, codes, step % 7 == 0).items():
            assert b == a
            fired |= {rank for f in a if f.kind == "straggler"}
            stops += sum(f.kind == "peer_stop" for f in a)
            if step < window:
                assert not [f for f in b if f.kind == "straggler"]
        if step in resumes:
            fleet_.resume(legacy=step == resumes[1])
    assert slow in fired and stops >= 1             # the inputs held findings to compare


def test_a_float32_median_would_decide_otherwise_at_the_boundary():
    """The median of an even window is the float64 mean of its two middle values: here it
    lies just above twice the other rank's, where its float32 rounding lands exactly on it.
    The two exchanged slots keep the decision the old loop made."""
    low, high = np.float32(1.0), np.nextafter(np.float32(1.0), np.float32(2.0))
    assert np.float32((float(low) + float(high)) / 2) == 1.0        # rounds to the limit
    old = fleet.OldStraggler(rank=1, world_size=2, window=2)
    new = fleet.StragglerDetector(rank=1, world_size=2, window=2)
    for step, mine in ((1, low), (2, high)):
        middle = new.share(float(mine))
        middles = np.array([[0.5, middle[0]], [0.5, middle[1]]], np.float32)
        a = old.update_peers(step, [0.5, float(mine)], 0.1)
        assert new.update_peers(step, [0.5, float(mine)], 0.1, middles) == a
    assert [f.kind for f in a] == ["straggler"] and a[0].value == 1.0 + 2.0 ** -24



def _median_cases(rng, n):
    """Values of every shape for a median over n ranks: random, sorted, periodic (a value
    per local rank), all equal, and values whose sample (where basics/medians.py's selection
    looks first) misleads it, so that it partitions them all."""
    misleading = rng.uniform(0, 1, n)
    misleading[(np.arange(medians.SAMPLE) * 2654435761) % n] = 5.0
    return [rng.uniform(0, 1, n), np.sort(rng.normal(0, 1, n)),
            np.tile(rng.uniform(0, 1, 8), n // 8 + 1)[:n], np.full(n, 0.25), misleading]

@pytest.mark.parametrize("n", [1024, 1025, 4096, 4097])
def test_the_median_of_the_others_is_statistics_median(n):
    """Over many ranks the rule selects the middle medians near a sample's: the value
    statistics.median gives, for medians of every shape (random, sorted, a value per local
    rank, all equal, few distinct values, a sample that misleads the selection)."""
    import statistics

    from mindwatch.detectors.straggler import _median

    rng = np.random.default_rng(n)
    cases = [*_median_cases(rng, n), rng.choice([0.0, 0.01, 0.02], n),
             (rng.uniform(0, 1, (2, n)).astype(np.float32).astype(float).sum(axis=0)) / 2]
    for values in cases:
        assert _median(np, values) == statistics.median(values.tolist())


@pytest.mark.parametrize(("n", "window"), [(2, 20), (3, 5), (8, 20), (37, 7), (300, 4)])
def test_the_straggler_rule_on_every_ranks_times_equals_the_old_loop(n, window):
    """A caller that hands in only every rank's data times (a custom exchange, through
    Monitor.observe_peers): every step's findings (stragglers, one slow rank in bursts; peer
    stops), the saved state, and the findings after it is loaded into a new rule."""
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
        # the exchange's float32 times, then floats
        arrays = {"stop_codes": codes,
                  "data_times": times if step < 2 * window else as_lists["data_times"]}
        stopping = step % 7 == 0
        a = old.findings(step=step, step_time_s=0.05, stopping=stopping, **as_lists)
        b = new.findings(step=step, step_time_s=0.05, stopping=stopping, **arrays)
        assert b == a
        fired += sum(f.kind == "straggler" for f in a)
        stops += sum(f.kind == "peer_stop" for f in a)
        if step == 3 * window + 1:                   # a saved state, resumed
            state = old.straggler.state_dict()
            assert new.straggler.state_dict() == {**state, "own_times": state["times"][rank]}
            for peers in (old, new):
                peers.straggler = type(peers.straggler)(rank=rank, world_size=n,
                                                        window=window, factor=2.0)
                peers.straggler.load_state_dict(state)
            assert new.straggler.state_dict()["times"] == state["times"]
    assert fired >= 2 and stops >= 1               # the inputs held findings to compare
    assert new.straggler.state_dict()["times"] == old.straggler.state_dict()["times"]


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
    """A state of every rank's times (the old format, or a caller's that gives no medians)
    saved before the window filled (even before the first step), or lists of uneven length:
    the rule goes on from it and saves what it holds, oldest first; this rank's own window is
    its row."""
    rule = fleet.StragglerDetector(rank=0, world_size=3, window=3)
    rule.load_state_dict({"times": times, "in_episode": False})
    assert rule.state_dict() == {"times": times, "own_times": times[0], "in_episode": False}
    rule.update_peers(1, np.array([0.5, 0.5, 0.5], np.float32), 0.1)
    kept = min(len(t) for t in times)
    assert rule.state_dict()["times"] == [[*t[len(t) - kept:], 0.5] for t in times]
    assert rule.state_dict()["own_times"] == [*times[0], 0.5][-3:]


def test_the_own_window_shares_its_middle_values_and_resumes():
    """share: the data time as float32, the window's two middle values (one, twice, for an
    odd count); the state holds this rank's own window only, and a loaded old state (every
    rank's times) gives it its row."""
    rule = fleet.StragglerDetector(rank=1, world_size=3, window=4)
    assert rule.share(0.1) == (float(np.float32(0.1)),) * 2
    rule = fleet.StragglerDetector(rank=1, world_size=3, window=4)
    shared = [rule.share(v) for v in (0.25, 0.75, 0.5, 0.0, 1.0)]
    assert shared == [(0.25, 0.25), (0.25, 0.75), (0.5, 0.5), (0.25, 0.5), (0.5, 0.75)]
    assert rule.state_dict() == {"own_times": [0.75, 0.5, 0.0, 1.0], "in_episode": False}
    again = fleet.StragglerDetector(rank=1, world_size=3, window=4)
    again.load_state_dict({"times": [[9.0], [1.0, 2.0, 3.0, 4.0, 5.0], []],
                           "in_episode": True})
    assert again.share(6.0) == (4.0, 5.0)
    assert again.state_dict() == {"own_times": [3.0, 4.0, 5.0, 6.0], "in_episode": True}


def _peer_times(rng, n):
    """Every rank's data time of a step, float32 as exchanged, one of them not usable (NaN,
    an infinity, negative): kept as 0."""
    times = rng.uniform(0.0, 0.1, n).astype(np.float32)
    times[rng.integers(n)] = rng.choice([np.nan, np.inf, -np.inf, -0.5])
    return times


@pytest.mark.parametrize(("n", "window"), [(2, 20), (3, 5), (8, 4), (37, 7), (300, 6)])
def test_the_pace_of_every_rank_equals_the_old_deques(n, window):
    """Random steps with new segments (the windows clear), warm-up, withheld steps and the
    step after them, unusable step times, steps without an exchange (the ranks' windows
    lag the pace's), a change in the number of ranks, float32 arrays then lists: after each
    step, what the readers read is what the deques gave."""
    rng = np.random.default_rng(300 + n)
    old, new = (kind(window=window, warmup=3) for kind in (fleet.OldPace, fleet.Pace))
    segment = ranks = 0
    medians = slow_peers = 0
    for step in range(1, 14 * window):
        segment = 1 if step % (5 * window) == 1 else segment + 1
        step_s = float(rng.uniform(0.05, 0.3))
        if rng.random() < 0.05:
            step_s = [None, np.nan, np.inf, 0.0][int(rng.integers(4))]
        obs = StepObservation(step=step, step_time_s=step_s, segment_step=segment,
                              data_time_s=float(rng.uniform(0, 0.05)), time=float(step),
                              skipped=bool(rng.random() < 0.1))
        for pace in (old, new):
            pace.add(obs)
        ranks = n + 1 if step > 10 * window else n
        if step % 5 != 0:
            times = _peer_times(rng, ranks)
            given = times if step < 7 * window else times.astype(float).tolist()
            old.add_peers(given), new.add_peers(given)
        assert new.has_peers == old.has_peers and new.ready == old.ready
        mine, theirs = new.peer_data_s(), old.peer_data_s()
        assert (None if mine is None else mine.tolist()) == theirs
        medians += theirs is not None
        for limit in (0.1, 0.2, 0.28):
            a, b = old.slow_steps(limit), new.slow_steps(limit)
            assert (b is None) == (a is None)
            if a is not None:
                assert b._replace(peers=None) == a._replace(peers=None)
                assert (None if b.peers is None else b.peers.tolist()) == a.peers
                slow_peers += a.peers is not None
    assert medians > 0 and slow_peers > 0         # the inputs held windows to compare


@pytest.mark.parametrize("n", [2, 5, 37, 300])
def test_throughput_drop_names_the_same_ranks_as_the_old_loops(n):
    """Through Peers (the exchange's arrays; the old code: lists): a steady run, then some
    ranks' input pipelines slow (or their compute, without a peer's data time growing),
    over a few segments: the same anomalies, naming the same ranks."""
    rng = np.random.default_rng(400 + n)
    new_drop = fleet.ThroughputDropDetector(fleet.Pace(window=10, warmup=5), factor=1.5,
                                            baseline=None)
    old_drop = fleet.OldThroughputDrop(fleet.OldPace(window=10, warmup=5), factor=1.5,
                                       baseline=None)
    new = fleet.peers_of(fleet.Peers, n, detectors=[new_drop])
    old = fleet.peers_of(fleet.OldPeers, n, detectors=[old_drop])
    step, named = 0, set()
    for segment in range(4):
        slow = rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False)
        data_slows = segment % 2 == 0
        for segment_step in range(1, 81):
            step += 1
            late = segment_step > 60
            step_s = 0.3 if late else 0.1
            obs = StepObservation(step=step, step_time_s=step_s, data_time_s=0.01,
                                  segment_step=segment_step, time=step * 0.2)
            times = rng.uniform(0.005, 0.015, n).astype(np.float32)
            if late and data_slows:
                times[slow] = rng.uniform(0.15, 0.25, len(slow))
            a = old_drop.update(obs) + old.findings(
                step=step, stop_codes=[0] * n, data_times=times.astype(float).tolist(),
                step_time_s=step_s, stopping=False)
            b = new_drop.update(obs) + new.findings(
                step=step, stop_codes=np.zeros(n, np.int64), data_times=times,
                step_time_s=step_s, stopping=False)
            assert b == a
            named |= {(a.fields["cause"], len(a.fields["ranks"]))
                      for a in a if a.kind == "throughput_drop"}
    assert {cause for cause, _ in named} == {"data", "compute"}


def _job_rows(rng, n):
    """Every rank's job row: values of any scale and sign, ties, ±0.0, subnormals; in half
    the steps some not finite; some fields unknown on some ranks (or on all); a few kinds;
    some withheld."""
    rows = np.zeros((n, job_fields.WIDTH), np.float32)
    fields = len(job_fields.JOB_FIELDS)
    style = int(rng.integers(4))
    if style == 0:
        values = rng.uniform(0, 1, (n, fields)) * 10.0 ** rng.integers(-8, 9)
    elif style == 1:
        values = np.round(rng.normal(0, 1, (n, fields)) * 100) / 100
    else:
        values = rng.choice(np.array([-0.0, 0.0, 1.5, -2.0, 1e-45, 3e38, 0.1], np.float32),
                            (n, fields))
    rows[:, :fields] = values
    if rng.random() < 0.5:                    # else all finite: reduce's common case
        bad = rng.choice(n, int(rng.integers(1, n + 1)), replace=False)
        rows[bad, rng.integers(fields)] = rng.choice([np.nan, np.inf, -np.inf], len(bad))
    known = np.full(n, 2 ** fields - 1)
    if style >= 2:
        known = rng.integers(0, 2 ** fields, n) if style == 3 else known & ~(1 << 2)
    rows[:, job_fields.KNOWN] = known
    for slot in (job_fields.KINDS, job_fields.LATE):
        rows[rng.choice(n, int(rng.integers(0, 3))), slot] = rng.integers(1, 2 ** 10)
    rows[:, job_fields.SKIPPED] = rng.random(n) < 0.05
    return rows


@pytest.mark.parametrize("n", [1, 2, 3, 8, 37, 300, 1024, 1500])
def test_the_job_aggregation_equals_its_first_version(n):
    """job_step's fields, the kinds found and the heatmap's bins (values, their spelling,
    -0.0, NaN, None) as the first version computed them, on random rows over bins of every
    span."""
    rng = np.random.default_rng(500 + n)
    old, new = fleet.OldRankBins(), fleet.RankBins()
    step, flushed = 1, 0
    with np.errstate(invalid="ignore", over="ignore"):
        for _ in range(150):
            rows = _job_rows(rng, n)
            assert repr(job_fields.reduce(rows)) == repr(fleet.old_reduce(rows))
            assert np.array_equal(job_fields.known_mask(rows), fleet.old_known_mask(rows))
            for slot in (job_fields.KINDS, job_fields.LATE):
                a, b = fleet.old_kinds_of(rows, slot), job_fields.kinds_of(rows, slot)
                assert list(b) == list(a) and all(np.array_equal(b[k], a[k]) for k in a)
                assert all(b[k].dtype == a[k].dtype for k in a)
            a, b = old.add(step, rows), new.add(step, rows)
            assert repr(b) == repr(a)
            flushed += a is not None
            step += int(rng.choice([1, 1, 7, 60, 900]))
        assert repr(new.flush(step)) == repr(old.flush(step))
    assert flushed >= 5


def test_shorts_spell_every_value_as_short_does():
    """7 significant digits in array operations, exactly as float(f"{v:.7g}"): random values
    of every scale, rounding ties and values next to them, powers of ten and their
    neighbours, zeros, NaN, infinities and values out of the fast range."""
    rng = np.random.default_rng(7)
    ties = (rng.integers(10 ** 6, 10 ** 7, 4000) + 0.5) * 10.0 ** rng.integers(-20, 15, 4000)
    powers = 10.0 ** rng.integers(-17, 17, 4000).astype(float)
    values = np.concatenate([
        rng.uniform(0, 1, 20000) * 10.0 ** rng.integers(-20, 20, 20000),
        rng.normal(0, 1, 20000).astype(np.float32) * 10.0 ** rng.integers(-9, 9, 20000),
        ties, np.nextafter(ties, 0), np.nextafter(ties, np.inf),
        powers, np.nextafter(powers, 0), np.nextafter(powers, np.inf),
        [0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324, 1e-320, 1.7e308, 9999999.5, 1e15]])
    values = np.concatenate([values, -values])
    assert repr(job_fields.shorts(values)) == repr([fleet.short(v) for v in values.tolist()])


@pytest.mark.parametrize("n", [1023, 4096, 4097])
def test_the_median_over_many_ranks_is_np_medians(n):
    """The bits np.median gives, for values of every shape: random, sorted, periodic (a value
    per local rank), all equal, ties of 0.0 and -0.0, and values whose sample (where the
    selection looks first) misleads it, so that it partitions them all."""
    rng = np.random.default_rng(n)
    cases = [*_median_cases(rng, n), rng.choice([-0.0, 0.0, 1.0, -1.0], n),
             rng.choice([-0.0, 0.0], n)]
    block = np.asarray(cases, np.float32)
    for mine, values in zip(medians.medians(np, block), block, strict=True):
        numpy = np.median(values)
        assert (mine.dtype, mine.tobytes()) == (numpy.dtype, numpy.tobytes())
