"""on_anomaly "rewind" in the framework-free core: snapshots, targets, escalation, records."""
import math

import pytest

from dict_store import DictStore
from mindwatch import Monitor
from mindwatch.framework import FrameworkHooks
from mindwatch.runlog import read_rank_log

QUIET = dict(hardware_interval_s=None, print_interval=10**6, spike_window=8, spike_warmup=4,
             grad_explode=1e30)


def _monitor(tmp_path, store, **settings):
    import io
    return Monitor(str(tmp_path), stream=io.StringIO(),
                   framework=FrameworkHooks(snapshots=store), **{**QUIET, **settings})


def _run(monitor, store, losses, start=1):
    """Train: each step moves the state (w += 1, step += 1), then observe and settle."""
    monitor.rewinds.begin(start - 1)
    events = {}
    for step, loss in enumerate(losses, start=start):
        store.state["w"] += 1.0
        store.state["step"] += 1
        monitor.observe(step=step, loss=loss, lr=1e-3, grad_norm=1.0)
        event = monitor.settle_rewind(step=step)
        if event is not None:
            events[step] = (event.to_step, dict(store.state))
        if monitor.stop_requested is not None:
            break
    monitor.close()
    return events


def test_a_spike_goes_back_to_the_last_snapshot_before_it(tmp_path):
    store = DictStore()
    monitor = _monitor(tmp_path, store, on_anomaly="rewind", snapshot_every=5,
                       snapshots_kept=2)
    losses = [1.0] * 30
    losses[22 - 1] = 50.0                        # a spike at step 22
    events = _run(monitor, store, losses)
    # Snapshots at 0 (begin), 5, 10, 15, 20; two kept: 15 and 20. Back to 20's state.
    assert events == {22: (20, {"w": 20.0, "step": 20})}
    assert store.state == {"w": 28.0, "step": 28}          # 8 more steps after the rewind
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    [rewind] = log.of_kind("rewind")
    assert (rewind["step"], rewind["to_step"], rewind["anomaly"], rewind["rewinds"]) == \
        (22, 20, "loss_spike", 1)
    [spike] = log.anomalies
    assert spike["actions"] == ["rewind"] and "state of step 20 was restored" in spike["message"]
    assert spike["report"] and log.end["reason"] == "completed"
    # The rewind is recorded right after its anomaly, both after the step.
    kinds = [r["kind"] for r in log.records if r.get("step") == 22]
    assert kinds == ["step", "anomaly", "rewind"]
    # After a rewind the interval counts from it: the next snapshot is of step 27.
    assert monitor.rewinds.snapshot_steps == [20, 27]


def test_snapshots_are_deferred_past_touched_steps(tmp_path):
    store = DictStore()
    monitor = _monitor(tmp_path, store, on_anomaly={"loss_nonfinite": "rewind"},
                       snapshot_every=5, snapshots_kept=3)
    monitor.rewinds.begin(0)
    for step in range(1, 13):
        # Steps 10 and 11 touched on another rank (a warn-only anomaly there).
        monitor.observe(step=step, loss=1.0)
        monitor.settle_rewind(step=step, wishes=[], touched=step in (10, 11))
    assert monitor.rewinds.snapshot_steps == [0, 5, 12]


def test_loss_rising_goes_back_before_the_rise_began(tmp_path):
    store = DictStore()
    monitor = _monitor(tmp_path, store, on_anomaly={"loss_rising": "rewind"},
                       snapshot_every=10, snapshots_kept=5, loss_rising_window=20,
                       spike_warmup=8, loss_spike_ratio=100.0)
    losses = [1.0 + 0.001 * (i % 3) for i in range(40)] + [1.0 * 1.05 ** i for i in range(1, 30)]
    events = _run(monitor, store, losses)
    step, (to_step, _) = next(iter(events.items()))         # the first rise
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    rising = next(a for a in log.anomalies if a["anomaly"] == "loss_rising")
    onset = step - 10 + 1                        # the recent half's first step
    assert rising["step"] == step and to_step < onset <= 41 < step
    assert to_step == max(s for s in (0, 10, 20, 30, 40, 50) if s < onset)


def test_escalation_when_no_snapshot_is_old_enough(tmp_path):
    store = DictStore()
    monitor = _monitor(tmp_path, store, on_anomaly="rewind", snapshot_every=5,
                       snapshots_kept=1)
    losses = [1.0] * 12
    losses[6 - 1] = math.nan
    _run(monitor, store, losses[:5])             # snapshots 0 and 5; 5 kept
    assert monitor.rewinds.snapshot_steps == [5]
    found = monitor.rewinds.review(5, [_anomaly("loss_nonfinite", 5)])
    assert found[0].actions == ["checkpoint", "stop"]
    assert "no kept snapshot was taken before step 5" in found[0].message
    assert "snapshots of steps: 5" in found[0].message


def test_rewinds_escalate_after_max_rewinds_and_restore_detectors(tmp_path):
    store = DictStore()
    monitor = _monitor(tmp_path, store, on_anomaly="rewind", snapshot_every=4, max_rewinds=2)
    losses = [1.0] * 8 + [math.nan] * 5
    events = _run(monitor, store, losses)
    assert list(events) == [9, 10]
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    actions = [a["actions"] for a in log.anomalies]
    assert actions == [["rewind"], ["rewind"], ["checkpoint", "stop"]]
    assert "2 rewinds already (max_rewinds=2)" in log.anomalies[-1]["message"]
    assert log.end["reason"] == "stopped" and log.steps[-1]["step"] == 11
    assert monitor.state_dict()["rewinds"] == 2


def test_the_spike_window_goes_back_with_the_state(tmp_path):
    store = DictStore()
    monitor = _monitor(tmp_path, store, on_anomaly={"loss_spike": "rewind"}, snapshot_every=4)
    spike = next(d for d in monitor.detectors if getattr(d, "kind", None) == "loss_spike")
    losses = [1.0] * 9 + [40.0]
    _run(monitor, store, losses)
    assert max(spike.state_dict()["logs"]) == 0.0             # log(1): the spike is gone
    assert spike.state_dict()["in_episode"] is False


def test_the_framework_free_monitor_refuses_rewind_before_making_files(tmp_path):
    with pytest.raises(ValueError, match="snapshot the training state"):
        Monitor(str(tmp_path / "run"), on_anomaly="rewind")
    assert not (tmp_path / "run").exists()


def test_rewind_as_one_policy_leaves_other_kinds_their_defaults(tmp_path):
    monitor = _monitor(tmp_path, DictStore(), on_anomaly="rewind")
    assert monitor.policy.policy_for("loss_spike") == "rewind"
    assert monitor.policy.policy_for("overheat") == "checkpoint_and_stop"
    assert monitor.policy.policy_for("straggler") == "warn"
    with pytest.raises(ValueError, match=r"cannot be 'rewind'.*memory_pressure"):
        _monitor(tmp_path / "b", DictStore(), on_anomaly={"memory_pressure": "rewind"})


def _anomaly(kind, step):
    from mindwatch.anomaly import Anomaly
    return Anomaly(kind, step, math.nan, None, f"{kind} at step {step}")


def test_summary_and_report_show_the_rewind(tmp_path):
    from mindwatch.report.html import render_html
    from mindwatch.report.summary import render_text, summarize
    from mindwatch.runlog import read_run
    store = DictStore()
    losses = [1.0] * 30
    losses[22 - 1] = 50.0
    _run(_monitor(tmp_path, store, on_anomaly="rewind", snapshot_every=5), store, losses)
    summary = summarize(read_run(str(tmp_path)))
    assert summary["rewinds"] == 1 and summary["skipped_steps"] == 0
    assert summary["ranks"][0]["rewinds"] == [
        {"step": 22, "to_step": 20, "anomaly": "loss_spike", "origin_rank": 0}]
    assert "1 rewind (step 22 -> 20)" in render_text(summary)
    page = render_html(read_run(str(tmp_path)))
    assert 'id="recovery">Recovery: 0 updates withheld, 1 rewind' in page
    assert '<tr data-step="22" data-to-step="20"><td>22</td><td>20</td><td>0</td>' \
           '<td>loss_spike</td>' in page
    # Beside a run that never rewound, the page of both names the run that did.
    from mindwatch.report.compare import render_compare
    clean = _monitor(tmp_path / "clean", DictStore())
    clean.observe(step=1, loss=1.0)
    clean.close()
    page = render_compare([read_run(str(tmp_path)), read_run(str(tmp_path / "clean"))],
                          ["rewound", "clean"])
    assert '<h2 id="recovery">Recovery</h2><h3 data-run="rewound">rewound: 0 updates ' \
           "withheld, 1 rewind</h3>" in page
    assert 'data-run="clean">clean:' not in page
    assert '<tr data-step="22" data-to-step="20"><td>22</td><td>20</td>' in page
