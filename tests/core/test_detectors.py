"""Each detector on exact, hand-made series; and the state round trip of every detector."""
import copy
import math
import random

import pytest

from mindwatch import MonitorSettings
from mindwatch.detectors import (
    GradBoundsDetector,
    LossRisingDetector,
    LrAnomalyDetector,
    NonFiniteDetector,
    build_detectors,
    grad_spike,
    loss_spike,
)
from mindwatch.observation import StepObservation


def obs(step, **fields):
    return StepObservation(step=step, **fields)


def kinds(detector, series, field="loss", **extra):
    """The steps (1-based) at which the detector fires on ``series``."""
    fired = []
    for step, value in enumerate(series, start=1):
        if detector.update(obs(step, **{field: value}, **extra)):
            fired.append(step)
    return fired


def noisy_decreasing_loss(steps, seed, noise=0.15):
    """A healthy small-batch run: a falling curve with multiplicative noise."""
    rng = random.Random(seed)
    return [(4.0 * math.exp(-step / 150) + 1.0) * math.exp(rng.gauss(0, noise))
            for step in range(steps)]


def test_nonfinite_fires_on_the_step():
    detector = NonFiniteDetector()
    assert detector.update(obs(1, loss=1.0, grad_norm=2.0)) == []
    found = detector.update(obs(2, loss=math.nan, grad_norm=math.inf))
    assert [(a.kind, a.step) for a in found] == [("loss_nonfinite", 2), ("gradient_nonfinite", 2)]
    assert [a.kind for a in detector.update(obs(3, loss=1.0, grads_finite=False))] == [
        "gradient_nonfinite"]


def test_vanishing_needs_a_streak_and_fires_once_per_streak():
    detector = GradBoundsDetector(vanish=1e-6, vanish_steps=3)
    series = [1.0, 1e-7, 1e-7, 1.0, 1e-7, 1e-7, 1e-7, 1e-7, 1e-7]
    assert kinds(detector, series, field="grad_norm") == [7]


def test_vanishing_counts_sink_steps():
    detector = GradBoundsDetector(vanish=1e-6, vanish_steps=6)
    fired = [detector.update(obs(step, grad_norm=1e-9, steps=4)) for step in (4, 8)]
    assert [len(f) for f in fired] == [0, 1]


@pytest.mark.parametrize("seed", range(20))
def test_spike_rules_stay_quiet_on_healthy_noisy_runs(seed):
    losses = noisy_decreasing_loss(600, seed)
    rng = random.Random(seed + 1000)
    norms = [0.8 * math.exp(rng.gauss(0, 0.35)) for _ in range(600)]
    assert kinds(loss_spike(), losses) == []
    assert kinds(grad_spike(), norms, field="grad_norm") == []
    assert kinds(LossRisingDetector(), losses) == []


@pytest.mark.parametrize("seed", range(5))
def test_a_real_spike_is_caught_on_its_step(seed):
    losses = noisy_decreasing_loss(300, seed)
    losses[200] *= 5.0      # ~10 sigma of this run's 15% step-to-step noise
    assert kinds(loss_spike(), losses) == [201]
    rng = random.Random(seed)
    norms = [0.8 * math.exp(rng.gauss(0, 0.35)) for _ in range(300)]
    norms[150] *= 20
    assert kinds(grad_spike(), norms, field="grad_norm") == [151]


def test_spike_warmup_and_episodes():
    detector = loss_spike(warmup=20, window=64)
    series = [1.0 + 0.01 * (i % 3) for i in range(20)]
    assert kinds(detector, [50.0] + [1.0] * 0) == []          # no history yet: silent
    detector = loss_spike(warmup=20, window=64)
    series = [*series, 50.0, 60.0, 1.0, 55.0]
    assert kinds(detector, series) == [21, 24]                  # one alarm per episode


def test_skipped_steps_stay_out_of_the_window():
    detector = grad_spike(warmup=4, window=8)
    for step in range(1, 9):
        detector.update(obs(step, grad_norm=1.0 + 0.1 * (step % 2)))
    detector.update(obs(9, grad_norm=1e6, skipped=True))
    assert max(detector.state_dict()["logs"]) < 1.0


def test_loss_rising_catches_slow_divergence_not_a_single_spike():
    losses = noisy_decreasing_loss(200, seed=3, noise=0.05)
    spiked = list(losses)
    spiked[150] *= 1000
    assert kinds(LossRisingDetector(window=40, min_rise=0.1), spiked) == []
    diverging = losses[:150] + [losses[149] * 1.02 ** k for k in range(1, 51)]
    fired = kinds(LossRisingDetector(window=40, min_rise=0.1), diverging)
    assert len(fired) == 1 and 150 < fired[0] <= 170


def test_lr_anomaly():
    detector = LrAnomalyDetector(jump_factor=10.0)
    warmup = [0.0, 1e-5, 2e-5, 3e-5, 3e-5 * 0.1]            # from zero, then a step decay
    assert kinds(detector, warmup, field="lr") == []
    assert kinds(LrAnomalyDetector(), [1e-3, 2e-2], field="lr") == [2]
    assert kinds(LrAnomalyDetector(), [1e-3, -1e-3], field="lr") == [2]
    assert kinds(LrAnomalyDetector(), [1e-3, math.nan, 1e-3], field="lr") == [2]


def test_a_warm_restart_is_no_lr_anomaly_a_blow_up_past_the_peak_is():
    # SGDR: cosine from 1e-3 down to 1e-6, then back to 1e-3 in one step (a 1000x jump)
    cycle = [1e-6 + (1e-3 - 1e-6) * (1 + math.cos(math.pi * k / 20)) / 2 for k in range(21)]
    assert kinds(LrAnomalyDetector(), cycle * 3, field="lr") == []
    # a per-step LR list with a typo: 1e-3 ... 1e3; applied (no wrap), 1e3 becomes the peak
    blow_up = [1e-3] * 19 + [1e3] * 3
    assert kinds(LrAnomalyDetector(), blow_up, field="lr") == [20]
    # withheld (wrap), every step above the limit is one
    assert kinds(LrAnomalyDetector(), blow_up, field="lr", skipped=True) == []    # no peak yet
    detector = LrAnomalyDetector()
    detector.update(obs(1, lr=1e-3))
    assert kinds(detector, [1e3] * 3, field="lr", skipped=True) == [1, 2, 3]


def test_a_withheld_lr_does_not_raise_the_peak_and_the_limit_moves_in_steps():
    detector = LrAnomalyDetector(jump_factor=10.0)
    assert detector.limit() == math.inf
    detector.update(obs(1, lr=1e-3))
    limit = detector.limit()
    assert 1e-2 <= limit < 1.05e-2                          # the peak rounded up to 5%
    detector.update(obs(2, lr=1.01e-3))                     # inside the same 5% step
    assert detector.limit() == limit
    found = detector.update(obs(3, lr=1.0, skipped=True))
    assert [a.threshold for a in found] == [limit]
    assert detector.limit() == limit                        # the withheld 1.0 is no peak
    assert [a.step for a in detector.update(obs(4, lr=1.0))] == [4]
    group = obs(5, lr=1e-3)
    group.lr_groups = [1e-3, 50.0]                          # any group's LR counts
    assert detector.update(group)


def test_every_detector_state_round_trips():
    settings = MonitorSettings(spike_warmup=5, spike_window=16, loss_rising_window=8)
    first, second = build_detectors(settings), build_detectors(settings)
    series = noisy_decreasing_loss(40, seed=9)
    for step, loss in enumerate(series[:30], start=1):
        for detector in first:
            detector.update(obs(step, loss=loss, grad_norm=loss / 3, lr=1e-3))
    for source, target in zip(first, second, strict=True):
        target.load_state_dict(copy.deepcopy(source.state_dict()))
        assert target.state_dict() == source.state_dict()
    # Restored detectors behave exactly as the originals from there on, a spike included.
    tail = [*series[30:], series[-1] * 50]
    for step, loss in enumerate(tail, start=31):
        observation = obs(step, loss=loss, grad_norm=loss / 3, lr=1e-3)
        for source, target in zip(first, second, strict=True):
            assert [(a.kind, a.step) for a in source.update(observation)] == \
                [(a.kind, a.step) for a in target.update(observation)]
    assert any(d.state_dict() for d in first)
