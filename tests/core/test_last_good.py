"""Where the report says to resume from (decisions/last_good.py), through the core alone: a
Monitor with a framework's hooks (a checkpoint file per stop, the states it saved), real run
logs and reports, each resumed process a new Monitor appending to the same log."""
import io
import json
import math

import pytest

from mindwatch import FrameworkHooks, Monitor
from mindwatch.decisions.last_good import ONSET_WINDOW, find_damage
from mindwatch.decisions.run_history import SegmentFacts
from mindwatch.framework import SavedStates

LR = 1e-3


class Framework:
    """The hooks of a framework that saved its own states at ``saved`` steps (files made
    when asked for), and writes a checkpoint file at each stop."""

    def __init__(self, tmp_path, saved=()):
        self.tmp_path, self.saved = tmp_path, saved
        self._file("x").parent.mkdir(exist_ok=True)
        for step in saved:
            self._file(f"state-{step}").write_text(str(step))

    def _file(self, name):
        return self.tmp_path / "framework" / name

    def save(self, step, reason):
        path = self.tmp_path / "checkpoints" / f"{reason}-{step}"
        path.parent.mkdir(exist_ok=True)
        path.write_text(str(step))
        return str(path)

    def hooks(self):
        return FrameworkHooks(
            save_checkpoint=self.save, resume_hint=lambda path: f"load({path!r})",
            saved_states=lambda: SavedStates(states=tuple(
                (step, str(self._file(f"state-{step}"))) for step in self.saved)))

    def state(self, step):
        return str(self._file(f"state-{step}"))


def _monitor(tmp_path, clock, framework, **settings):
    return Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None,
                   framework=framework.hooks(), **settings)


def _report(tmp_path, step):
    body = json.loads((tmp_path / "anomalies" / f"step{step}_rank0.json").read_text())
    return body, (tmp_path / "anomalies" / f"step{step}_rank0.md").read_text()


def _steps(monitor, clock, steps, lr=LR):
    for step in steps:
        clock.advance(1.0)
        monitor.observe(step=step, loss=2.0, lr=lr, grad_norm=1.0)


def test_a_warned_update_before_a_withheld_stop_sends_the_advice_before_it(tmp_path, clock):
    framework = Framework(tmp_path, saved=(5, 10, 15))
    monitor = _monitor(tmp_path, clock, framework, on_anomaly={"lr_anomaly": "warn"})
    _steps(monitor, clock, range(1, 12))
    monitor.observe(step=12, loss=2.0, lr=LR * 1e4, grad_norm=1.0)    # warned, applied
    _steps(monitor, clock, [13])
    found = monitor.observe(step=14, loss=math.inf, lr=LR, grad_norm=math.inf, skipped=True)
    assert monitor.stop_requested in found
    monitor.close()
    body, markdown = _report(tmp_path, 14)
    assert body["checkpoint"].endswith("anomaly-14")
    good = framework.state(10)
    assert {k: body["resume_from"][k] for k in ("path", "step", "onset")} == {
        "path": good, "step": 10, "onset": 12}
    assert body["resume"] == f"load({good!r})"          # the code loads that state, not ours
    why = body["resume_from"]["why"]
    assert why.startswith(f"resume from {good} (saved after step 10), the newest state from "
                          "before step 12, not from the checkpoint: step 12's update went into "
                          "the weights though lr_anomaly was found there, 2 steps before")
    assert ("step 14's update was withheld, but the checkpoint's weights already hold an "
            "anomalous update: step 12's update") in body["notes"][0]
    assert f"the last good state on disk is {good} (saved after step 10)" in body["notes"][1]
    assert f"## Resume from the last good state, saved after step 10\n\n{why}.\n\n```python\n" \
           f"load({good!r})\n```" in markdown


def test_without_a_state_from_before_the_onset_it_says_so_and_what_to_do(tmp_path, clock):
    framework = Framework(tmp_path, saved=(15,))        # only after the damage
    monitor = _monitor(tmp_path, clock, framework, on_anomaly={"lr_anomaly": "warn"})
    _steps(monitor, clock, range(1, 12))
    monitor.observe(step=12, loss=2.0, lr=LR * 1e4, grad_norm=1.0)
    monitor.observe(step=13, loss=math.nan, lr=LR, grad_norm=math.nan, skipped=True)
    monitor.close()
    body, markdown = _report(tmp_path, 13)
    assert body["resume"] is None and body["resume_from"]["path"] is None
    said = body["resume_from"]["why"]
    assert said.startswith("no training state saved before step 12 exists (step 12's update")
    assert said.endswith("restart from the initial weights, or from a checkpoint you know is "
                         "good from before step 12")
    assert "no training state saved before step 12 exists" in body["notes"]
    assert f"## Resume from before step 12\n\n{said}.\n" in markdown


def test_an_anomalous_update_long_before_is_not_taken_for_the_onset(tmp_path, clock):
    framework = Framework(tmp_path, saved=(1,))
    monitor = _monitor(tmp_path, clock, framework, on_anomaly={"lr_anomaly": "warn"})
    _steps(monitor, clock, [1])
    monitor.observe(step=2, loss=2.0, lr=LR * 1e4, grad_norm=1.0)      # warned, long ago
    last = 3 + ONSET_WINDOW
    _steps(monitor, clock, range(3, last), lr=LR * 1e4)
    monitor.observe(step=last, loss=math.nan, lr=LR * 1e4, grad_norm=math.nan, skipped=True)
    monitor.close()
    body, markdown = _report(tmp_path, last)
    # the stop's own checkpoint: its update withheld, nothing anomalous near it
    assert body["resume_from"]["path"] == body["checkpoint"]
    assert body["resume_from"]["onset"] is None
    assert f"the checkpoint holds the last good weights: step {last}'s update was withheld" \
        in body["notes"]
    assert "## Resume from the checkpoint\n\n```python\n" in markdown


def test_the_same_step_failing_again_after_a_resume_sends_the_advice_further_back(
        tmp_path, clock):
    """The issue's story: a healthy run to step 10; resumed from there with a bad LR that no
    rule saw, step 11's update wrecks the weights and step 12 explodes (withheld); resumed
    from that stop's checkpoint (the state after step 11), step 12 explodes again."""
    framework = Framework(tmp_path, saved=(5, 10))
    first = _monitor(tmp_path, clock, framework)
    _steps(first, clock, range(1, 11))
    first.close()
    second = _monitor(tmp_path, clock, framework, resume=True)
    _steps(second, clock, [11])
    second.observe(step=12, loss=9.0, lr=LR, grad_norm=1e9, skipped=True)
    second.close()
    body, _ = _report(tmp_path, 12)
    assert body["resume_from"]["path"] == body["checkpoint"]     # nothing known against it
    third = _monitor(tmp_path, clock, framework, resume=True)
    third.observe(step=12, loss=9.0, lr=LR, grad_norm=1e9, skipped=True)
    third.close()
    body = json.loads((tmp_path / "anomalies" / "step12_rank0_gradient_explode.json")
                      .read_text())
    good = framework.state(10)
    assert {k: body["resume_from"][k] for k in ("path", "step", "onset")} == {
        "path": good, "step": 10, "onset": 11}
    assert ("gradient_explode stopped the run at step 12 before (the segment resumed after "
            "step 10) and again at step 12 after resuming from the state after step 11: that "
            "state already held the damage, made from step 11 on") in body["resume_from"]["why"]
    assert body["notes"][0].startswith("step 12's update was withheld, but the checkpoint's "
                                       "weights already hold an anomalous update")


def _segment(resumed_after, last_step, damage=(), stops=(), rewinds=()):
    return SegmentFacts(resumed_after=resumed_after, last_step=last_step, damage=list(damage),
                        stops=list(stops), rewinds=list(rewinds))


@pytest.mark.parametrize(("segments", "step", "here", "onsets", "onset"), [
    # loss_rising found at 40 rose from 25: the onset is where the rise began
    ([_segment(0, 41, damage=[(40, "loss_rising")])], 41, [], {(40, "loss_rising"): 25}, 25),
    # anomalous updates chain back, each within the window of the next; 40 is too far
    ([_segment(0, 200, damage=[(40, "loss_spike"), (100, "grad_spike"), (140, "loss_spike")])],
     180, [], {}, 100),
    # a rewind to step 90 took the update of step 100 back out: only 140 remains
    ([_segment(0, 200, damage=[(100, "grad_spike"), (140, "loss_spike")],
               rewinds=[(120, 90)])], 180, [], {}, 140),
    # the stopping step's own update, applied
    ([_segment(0, 180)], 180, [(180, "lr_anomaly")], {}, 180),
    # nothing anomalous reached the weights
    ([_segment(0, 180, damage=[(100, "loss_spike")])], 180, [], {}, None),
    # the segment resumed after step 30 descends from the first up to there: its warned
    # update of step 28 counts, the one of step 35 (after the resume point) does not
    ([_segment(0, 40, damage=[(35, "loss_spike")]), _segment(30, 60)], 60, [], {}, None),
    ([_segment(0, 40, damage=[(28, "loss_spike"), (35, "loss_spike")]), _segment(30, 60)],
     60, [], {}, 28),
    # the latest segment that reached the resume point made the state resumed: its damage
    # counts; one that resumed after that point is another line of training
    ([_segment(0, 30), _segment(20, 50, damage=[(25, "loss_spike")]), _segment(30, 60)],
     60, [], {}, 25),
    ([_segment(0, 40), _segment(35, 50, damage=[(45, "loss_spike")]), _segment(30, 60)],
     60, [], {}, None),
])
def test_the_onset_along_the_weights_lineage(segments, step, here, onsets, onset):
    damage = find_damage(segments, step=step, kind="loss_nonfinite", here=here, onsets=onsets)
    assert (damage.onset if damage else None) == onset


def test_an_earlier_segments_update_counts_up_to_the_resume_point():
    segments = [_segment(0, 40, damage=[(28, "loss_spike"), (35, "loss_spike")]),
                _segment(30, 60)]
    damage = find_damage(segments, step=45, kind="loss_nonfinite", here=[], onsets={})
    assert damage.onset == 28 and "step 28's update went into the weights" in damage.why
