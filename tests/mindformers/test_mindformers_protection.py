"""MindWatchTrainOneStepCell under MindSpore Transformers' Trainer, registered through the YAML
as a user registers it: the bad update withheld in the graph, MindFormers' own outputs,
overflow check and loss scale untouched."""
import pytest
import yaml
from mf_config import (
    MINDWATCH_CELL,
    STEPS,
    mf_config,
    mf_steps,
    state_digests,
)

from mindwatch.runlog import read_rank_log

# the "launcher" group: one worker, one launcher process for this module's Trainer runs (the
# launcher fixture), healthy_pair's among them, once, and the other modules' of the group
pytestmark = [pytest.mark.mindformers, pytest.mark.timeout(300),
              pytest.mark.xdist_group("launcher")]


@pytest.fixture(scope="module")
def healthy_pair(tmp_path_factory, launcher):
    """The same healthy run twice, with MindFormers' cell and with mindwatch's: per-parameter
    norms on (runner_wrapper.local_norm) and a state record every 10 steps."""
    runs = {}
    for name, cell in (("mindformers", {}), ("mindwatch", MINDWATCH_CELL)):
        tmp_path = tmp_path_factory.mktemp(name)
        # seed 1: MindFormers seeds only a true seed, and both runs start from one model
        config = mf_config(tmp_path, callbacks=[{"type": "StateDigest"}], seed=1,
                           monitor={"state_interval": 10}, **({"cell": cell} if cell else {}))
        settings = yaml.safe_load(config.read_text())
        settings["runner_wrapper"]["local_norm"] = True
        config.write_text(yaml.safe_dump(settings))
        applied = launcher.run(tmp_path, config)
        runs[name] = (tmp_path, applied, read_rank_log(str(tmp_path / "mw" / "rank_0.jsonl")))
    return runs


def test_mflossmonitor_prints_the_same_lines_with_either_cell(healthy_pair):
    (theirs, applied_mf, _), (ours, applied_mw, log) = healthy_pair["mindformers"], \
        healthy_pair["mindwatch"]
    assert mf_steps(ours) == mf_steps(theirs)
    assert sorted(mf_steps(ours)) == list(range(1, STEPS + 1))
    assert applied_mf == applied_mw == STEPS
    # the training state itself, step by step
    assert state_digests((ours / "launcher.out").read_text()) == \
        state_digests((theirs / "launcher.out").read_text())
    for step in log.steps:
        mf = mf_steps(ours)[step["step"]]
        assert step["grad_norm"] == pytest.approx(mf["grad_norm"], rel=1e-6)
        assert step["lr"] == pytest.approx(mf["lr"], rel=1e-6)
        assert step["skipped"] is False and step["loss_scale"] == 1.0


def test_the_monitor_says_which_cell_protects(healthy_pair):
    notices = {name: [n["message"] for n in run[2].of_kind("notice")]
               for name, run in healthy_pair.items()}
    advice = "runner_wrapper: {type: MindWatchTrainOneStepCell}"
    assert any(advice in n and "CPUTrainOneStepCell applies the updates" in n
               for n in notices["mindformers"]), notices["mindformers"]
    assert not any(advice in n for n in notices["mindwatch"]), notices["mindwatch"]
    assert "without MindWatchMonitor" not in \
        (healthy_pair["mindwatch"][0] / "launcher.out").read_text()


def test_state_records_hold_the_update_under_mindwatchs_cell(healthy_pair):
    states = {name: run[2].of_kind("state") for name, run in healthy_pair.items()}
    assert [s["step"] for s in states["mindwatch"]] == [10, 20]
    for ours, theirs in zip(states["mindwatch"], states["mindformers"], strict=True):
        assert ours["weight_norm"] == pytest.approx(theirs["weight_norm"], rel=1e-6)
        assert theirs["update_norm"] is None                     # nothing took the copy
        assert 0 < ours["update_norm"] < 1e-2 * ours["weight_norm"]
        for layer, entry in ours["layers"].items():
            assert entry["update_ratio"] == pytest.approx(
                entry["update_norm"] / entry["weight_norm"], rel=1e-9), layer
            assert entry["grad_norm"] == pytest.approx(
                theirs["layers"][layer]["grad_norm"], rel=1e-6), layer
            assert entry["m_norm"] > 0 and entry["v_norm"] > 0


def test_explosions_and_a_nan_are_withheld_and_the_loss_scale_sees_only_the_overflow(
        tmp_path, launcher):
    """grad_explode below some steps' norms, under "skip"; a NaN embedding at step 12 (an
    overflow, MindFormers' own check). A dynamic loss scale of 1024: halved by the overflow
    alone. Every withheld step leaves the training state bit-identical."""
    # seed 1: one model every run (with seed 0 each run draws its own, and how many steps
    # explode, so whether max_skips escalates to a stop, would vary); two layers, whose norms
    # grad_explode splits in every MindFormers release make test-compat runs
    config = mf_config(tmp_path, cell=MINDWATCH_CELL, seed=1, layers=2,
                       callbacks=[{"type": "NanAtStep", "step": 12}, {"type": "StateDigest"}],
                       monitor={"grad_explode": 1.46, "on_anomaly": {
                           "gradient_explode": "skip", "loss_nonfinite": "skip",
                           "gradient_nonfinite": "skip"}})
    settings = yaml.safe_load(config.read_text())
    settings["runner_wrapper"]["scale_sense"] = {
        "type": "DynamicLossScaleUpdateCell", "loss_scale_value": 1024, "scale_factor": 2,
        "scale_window": 1000}
    config.write_text(yaml.safe_dump(settings))
    applied = launcher.run(tmp_path, config)
    log = read_rank_log(str(tmp_path / "mw" / "rank_0.jsonl"))
    digests = state_digests((tmp_path / "launcher.out").read_text())
    withheld = [s["step"] for s in log.steps if s["skipped"]]
    exploded = [s["step"] for s in log.steps if s["grad_norm"] > 1.46]
    assert 12 in withheld and exploded and set(withheld) == {12, *exploded}
    assert applied == STEPS - len(withheld)
    for step in withheld:
        if step > 1:                  # (step 1 may explode too: no digest before it)
            assert digests[step][0] == digests[step - 1][0], step
    assert all(digests[step][0] != digests[step - 1][0] for step in range(2, STEPS + 1)
               if step not in withheld)
    scales = {step: scale for step, (_, scale) in digests.items()}
    assert scales[11] == 1024.0 and scales[12] == 512.0          # the overflow
    assert set(scales.values()) == {1024.0, 512.0}               # ... alone
    assert all(scales[s] == scales[s - 1] for s in exploded if s > 1)
    kinds = {(a["anomaly"], a["step"]) for a in log.anomalies}
    assert {("gradient_explode", s) for s in exploded} <= kinds
    assert ("loss_nonfinite", 12) in kinds
    assert log.end["reason"] == "completed"
    # MindFormers' own line says the update was dropped
    assert [s for s, line in mf_steps(tmp_path).items() if line["overflow"]] == withheld
    # computed once more on the same batch: the explosion reproduces
    replays = {r["step"]: r for r in log.of_kind("replay")}
    assert all(replays[s]["reproduced"] is True for s in exploded)


def test_the_cell_without_the_monitor_says_what_it_does_not_protect(tmp_path, launcher):
    config = mf_config(tmp_path, mindwatch=False, cell=MINDWATCH_CELL,
                       callbacks=[{"type": "NanAtStep", "step": 4}])
    applied = launcher.run(tmp_path, config)
    out = (tmp_path / "launcher.out").read_text()
    assert out.count("MindWatchTrainOneStepCell runs without MindWatchMonitor") == 1
    assert "Add `- type: MindWatchMonitor`" in out
    assert applied == STEPS - 1                 # the NaN step withheld all the same


def test_a_learning_rate_typed_1e3_is_withheld_on_its_first_step(tmp_path, launcher):
    """``learning_rate: 1e3`` from the first step (a typo for 1e-3): the LR jump rule has no
    peak yet, but the update would move every weight by ~1e3, thousands of times the
    weights' RMS, so mindwatch's cell withholds step 1 itself and the job stops with the
    model as it was initialised (before, step 1 went through and step 2 exploded)."""
    config = mf_config(tmp_path, cell=MINDWATCH_CELL, seed=1)
    settings = yaml.safe_load(config.read_text())
    settings["optimizer"]["learning_rate"] = 1e3
    settings["lr_schedule"] = {"type": "ConstantWarmUpLR", "learning_rate": 1e3,
                               "warmup_steps": 0, "total_steps": -1}
    config.write_text(yaml.safe_dump(settings))
    applied = launcher.run(tmp_path, config)
    assert applied == 0                       # the optimizer applied no update at all
    log = read_rank_log(str(tmp_path / "mw" / "rank_0.jsonl"))
    assert [(s["step"], s["skipped"]) for s in log.steps] == [(1, True)]
    (anomaly,) = log.anomalies
    assert anomaly["anomaly"] == "lr_anomaly" and anomaly["step"] == 1
    assert "would move the weights by" in anomaly["message"]
    assert log.end["reason"] == "stopped"
