"""The update-size rule (detectors/update_size.py, detectors/lr_anomaly.py): an update absurd
against the weights it changes is an lr_anomaly from the first step on, its ceiling handed to
the protected step before the step; max_lr; no history needed, and none of it moves for the
updates a healthy run makes."""
import math

import pytest

from mindwatch import Monitor
from mindwatch.detectors.update_size import (
    ADAPTIVE,
    GRADIENT,
    RELATIVE,
    WeightScale,
    update_rule,
)


@pytest.mark.parametrize(("names", "rule"), [
    (["AdamW", "Adam", "Optimizer"], ADAPTIVE), (["AdamWeightDecay", "Optimizer", "Cell"],
                                                   ADAPTIVE),
    (["FusedAdamWeightDecay"], ADAPTIVE), (["RMSprop"], ADAPTIVE), (["Lion"], ADAPTIVE),
    (["SGD", "Optimizer"], GRADIENT), (["Momentum", "Optimizer"], GRADIENT),
    (["Lamb", "Optimizer"], RELATIVE), (["Adafactor"], RELATIVE), (["CAME"], RELATIVE),
    (["Adadelta", "Optimizer"], None), (["LBFGS", "Optimizer"], None), (["Rprop"], None)])
def test_the_rule_follows_the_optimizers_class(names, rule):
    assert update_rule(names) == rule


def test_the_ratio_each_rule_estimates():
    # 100 weights of RMS 0.5: norm 5
    adam, sgd, lamb = (WeightScale(norm=5.0, count=100, rule=r)
                       for r in (ADAPTIVE, GRADIENT, RELATIVE))
    assert adam.rms == 0.5
    assert adam.ratio(1e3, None) == 2e3 and adam.lr_ceiling(1.0) == 0.5
    assert sgd.ratio(0.1, 2.0) == pytest.approx(0.04)          # 0.1 * 2 / 5
    assert sgd.lr_ceiling(1.0, 2.0) == 2.5 and sgd.norm_ceiling(1.0, 0.1) == 50.0
    assert lamb.ratio(3.0, None) == 3.0 and lamb.lr_ceiling(2.0) == 2.0
    # weights that are all zero have no scale to judge by; nor has an unknown optimizer
    for scale in (WeightScale(norm=0.0, count=100, rule=ADAPTIVE),
                  WeightScale(norm=5.0, count=100, rule=None)):
        assert scale.ratio(1e6, 1.0) is None and scale.lr_ceiling(1.0) == math.inf


def _monitor(tmp_path, **settings):
    return Monitor(str(tmp_path), hardware_interval_s=None, print_interval=100, **settings)


def test_an_absurd_first_update_is_withheld_on_its_step_with_no_history(tmp_path):
    """Adam at LR 1e3 against weights of RMS 0.02: the LR ceiling is handed over before the
    first step (max_update_ratio 1: 0.02), and the first step is the anomaly."""
    monitor = _monitor(tmp_path)
    monitor.weights(WeightScale(norm=0.02 * 1000, count=10**6, rule=ADAPTIVE), lr=1e3)
    assert monitor.step_limits.lr == pytest.approx(0.02)
    found = monitor.observe(step=1, loss=2.0, lr=1e3, grad_norm=1.0, skipped=True)
    (anomaly,) = found
    assert (anomaly.kind, anomaly.value, anomaly.threshold) == ("lr_anomaly", 1e3,
                                                                pytest.approx(0.02))
    assert "~5e+04x their RMS (0.02)" in anomaly.message
    assert anomaly.stops                      # checkpoint_and_stop, as for an LR blow-up
    monitor.close()


def test_a_healthy_run_is_never_judged_too_large(tmp_path):
    """A warm-up from zero to 3e-3 then a decay, Adam against weights of RMS 0.09 (the
    demo's: a ratio of 0.033 at the peak), and SGD at 0.05: no anomaly."""
    monitor = _monitor(tmp_path)
    monitor.weights(WeightScale(norm=0.09 * 1000, count=10**6, rule=ADAPTIVE), lr=0.0)
    for step in range(1, 201):
        lr = 3e-3 * min(step / 30, 1.0) * (1 - step / 400)
        assert monitor.observe(step=step, loss=3.0 - step / 100, lr=lr, grad_norm=1.0) == []
    monitor.close()
    sgd = _monitor(tmp_path / "sgd")
    sgd.weights(WeightScale(norm=4.0, count=400, rule=GRADIENT), lr=0.05)
    for step in range(1, 51):
        assert sgd.observe(step=step, loss=1.0, lr=0.05, grad_norm=3.0) == []
    sgd.close()


def test_sgd_is_judged_by_the_runs_gradient_so_an_explosion_stays_the_gradients(tmp_path):
    """SGD: before any step the first step's norm is capped for its LR (a ceiling on the
    norm); afterwards the LR is capped for the last applied step's norm, so a gradient that
    explodes later is gradient_explode's alone, and an LR typed 1000x too large is the LR's."""
    monitor = _monitor(tmp_path, grad_explode=1e9, lr_jump_factor=1e6)   # this rule alone
    monitor.weights(WeightScale(norm=4.0, count=400, rule=GRADIENT), lr=0.05)
    assert monitor.step_limits.grad_norm == pytest.approx(80.0)     # 1 * 4 / 0.05
    assert monitor.observe(step=1, loss=1.0, lr=0.05, grad_norm=2.0) == []
    assert monitor.step_limits.grad_norm == math.inf
    assert monitor.step_limits.lr == pytest.approx(2.0)              # 1 * 4 / 2
    assert {a.kind for a in monitor.observe(step=2, loss=9.0, lr=0.05, grad_norm=1e5,
                                            skipped=True)} <= {"loss_spike", "grad_spike"}
    (anomaly,) = monitor.observe(step=3, loss=1.0, lr=50.0, grad_norm=2.0, skipped=True)
    assert (anomaly.kind, anomaly.threshold) == ("lr_anomaly", pytest.approx(2.0))
    monitor.close()


def test_max_lr_holds_from_the_first_step(tmp_path):
    monitor = _monitor(tmp_path, max_lr=0.01)
    assert monitor.step_limits.lr == 0.01
    (anomaly,) = monitor.observe(step=1, loss=1.0, lr=0.02, grad_norm=1.0, skipped=True)
    assert (anomaly.kind, anomaly.value, anomaly.threshold) == ("lr_anomaly", 0.02, 0.01)
    assert "above max_lr 0.01" in anomaly.message
    monitor.close()


def test_the_rule_can_be_turned_off(tmp_path):
    monitor = _monitor(tmp_path, max_update_ratio=None)
    monitor.weights(WeightScale(norm=1.0, count=10**6, rule=ADAPTIVE), lr=1e3)
    assert monitor.step_limits.lr == math.inf
    assert monitor.observe(step=1, loss=1.0, lr=1e3, grad_norm=1.0) == []
    monitor.close()
