"""on_anomaly "skip" in the core: limits from the spike windows, actions, escalation."""
import json
import math

from mindwatch import Monitor
from mindwatch.policy import Policy, resolve_policies
from mindwatch.ranks.peers import Peers, stop_code
from mindwatch.recovery.skipping import not_withheld_reason

SPIKES = dict(spike_window=8, spike_warmup=4, hardware_interval_s=None)


def _monitor(tmp_path, stream, clock, **settings):
    return Monitor(str(tmp_path), stream=stream, clock=clock, **{**SPIKES, **settings})


def _warm_up(monitor, steps=6):
    for step in range(1, steps + 1):
        monitor.observe(step=step, loss=1.0 + 0.01 * (step % 3), grad_norm=1.0 + 0.01 * step)


def test_limits_are_infinite_until_warm_then_fire_exactly_there(tmp_path, stream, clock):
    monitor = _monitor(tmp_path, stream, clock, on_anomaly={"loss_spike": "skip"})
    assert monitor.skips.limits.loss == math.inf and monitor.skips.limits.grad_norm == math.inf
    _warm_up(monitor)
    limit = monitor.skips.limits.loss
    assert 1.0 < limit < 10 and monitor.skips.limits.grad_norm == math.inf   # grad on warn
    assert not monitor.observe(step=7, loss=limit * 0.999, skipped=False)
    [spike] = monitor.observe(step=8, loss=limit * 1.001, skipped=True)
    assert spike.kind == "loss_spike" and spike.actions == ["skip"] and not spike.stops


def test_a_skip_that_withheld_nothing_warns_and_says_so_once(tmp_path, stream, clock):
    monitor = _monitor(tmp_path, stream, clock, on_anomaly="skip")
    _warm_up(monitor)
    [first] = monitor.observe(step=7, loss=100.0)
    monitor.observe(step=8, loss=1.0)
    [second] = monitor.observe(step=9, loss=100.0)
    assert first.actions == second.actions == ["warn"]
    assert stream.getvalue().count("'skip' acts as 'warn'") == 1


def test_withheld_steps_are_reported_and_escalate_after_max_skips(tmp_path, stream, clock):
    monitor = _monitor(tmp_path, stream, clock, on_anomaly="skip", max_skips=2)
    _warm_up(monitor)
    found = [monitor.observe(step=s, loss=100.0, skipped=True) for s in (7, 8, 9)]
    assert [[a.actions for a in f] for f in found] == [
        [["skip"]], [["skip"]], [["skip", "checkpoint", "stop"]]]
    assert "still above the spike limit" in found[1][0].message
    assert "max_skips=2" in found[2][0].message and monitor.stop_requested is found[2][0]


def test_a_resumed_run_counts_the_updates_withheld_before_it(tmp_path, stream, clock):
    first = _monitor(tmp_path / "a", stream, clock, on_anomaly="skip", max_skips=2)
    _warm_up(first)
    first.observe(step=7, loss=100.0, skipped=True)
    first.observe(step=8, loss=100.0, skipped=True)
    state = json.loads(json.dumps(first.state_dict()))          # saved as JSON beside a ckpt
    assert state["withheld_steps"] == [7, 8]
    first.close()
    resumed = _monitor(tmp_path / "b", stream, clock, on_anomaly="skip", max_skips=2)
    resumed.load_state_dict(state)
    [third] = resumed.observe(step=9, loss=100.0, skipped=True)
    assert third.actions == ["skip", "checkpoint", "stop"] and "max_skips=2" in third.message
    resumed.close()


def test_skips_older_than_100_steps_do_not_count(tmp_path, stream, clock):
    monitor = _monitor(tmp_path, stream, clock, on_anomaly="skip", max_skips=1)
    _warm_up(monitor)
    assert monitor.observe(step=7, loss=100.0, skipped=True)[0].actions == ["skip"]
    for step in range(8, 108):
        monitor.observe(step=step, loss=1.0)
    assert monitor.observe(step=108, loss=100.0, skipped=True)[0].actions == ["skip"]


def test_a_peer_whose_skip_escalated_makes_every_rank_checkpoint():
    policy = Policy(resolve_policies("skip"))
    peers = Peers(rank=0, world_size=2, policy=policy, straggler_window=4, straggler_factor=2)
    [peer] = peers.findings(step=9, stop_codes=[0, stop_code("loss_spike")],
                            data_times=[0.0, 0.0], step_time_s=None, stopping=False)
    assert peer.actions == ["checkpoint", "stop"]


def test_the_reason_an_update_was_not_withheld_names_what_would_withhold_it():
    assert not_withheld_reason("loss_spike", "checkpoint_and_stop") == (
        "loss_spike is withheld on the step only under on_anomaly={'loss_spike': 'skip'}; "
        "its policy is 'checkpoint_and_stop'")
    assert not_withheld_reason("loss_rising", "stop") == (
        "loss_rising is found from the steps before, after the update was applied; "
        "on_anomaly={'loss_rising': 'rewind'} goes back to a snapshot from before its onset")
    assert not_withheld_reason("overheat", "checkpoint_and_stop") == (
        "overheat is not a fault of the update, which nothing withholds")
    assert "within the graph's limits" in not_withheld_reason("gradient_explode", "stop")
