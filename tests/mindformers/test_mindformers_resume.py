"""A stop under MindFormers' Trainer, then the report's YAML advice pasted into the config as
a user would: the run resumes with MindFormers' own `load_checkpoint` and `resume_training`
(optimizer state, step count, data position) and appends to mindwatch's run log."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mf_config import HERE, MINDWATCH_CELL, STEPS, mf_config

from mindwatch.cli import main
from mindwatch.runlog import read_rank_log

pytestmark = [pytest.mark.mindformers, pytest.mark.timeout(300),
              # the "launcher" group: one worker, one launcher process (the launcher
              # fixture) for this module's Trainer runs, resumed's once, and the others'
              pytest.mark.xdist_group("launcher")]

NAN_STEP = 6
ADVICE = re.compile(r"## Resume from the checkpoint\n\n```(\w+)\n(.*?)\n```", re.S)


def apply(settings, snippet):
    """The advice merged into a config as a user pastes it: its top-level keys set, and each
    of its `callbacks:` entries into the config's entry of that type."""
    for key, value in snippet.items():
        if key != "callbacks":
            settings[key] = value
            continue
        for entry in value:
            [own] = [c for c in settings["callbacks"] if c["type"] == entry["type"]]
            own.update(entry)
    return settings


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, launcher):
    """Run 1: MindWatchTrainOneStepCell, a NaN at step 6 under the default policy
    (checkpoint_and_stop). Run 2: the same config without the NaN, with the advice of the
    report's .md applied."""
    tmp_path = tmp_path_factory.mktemp("resume")
    config = mf_config(tmp_path, cell=MINDWATCH_CELL, seed=1,
                       callbacks=[{"type": "NanAtStep", "step": NAN_STEP}])
    first_applied = launcher.run(tmp_path, config)
    stopped = read_rank_log(str(tmp_path / "mw" / "rank_0.jsonl"))
    anomaly = stopped.anomalies[0]
    markdown = Path(anomaly["report"]).with_suffix(".md").read_text()
    language, advice = ADVICE.search(markdown).groups()
    settings = yaml.safe_load(config.read_text())
    settings["callbacks"] = [c for c in settings["callbacks"] if c["type"] != "NanAtStep"]
    config.write_text(yaml.safe_dump(apply(settings, yaml.safe_load(advice))))
    applied = launcher.run(tmp_path, config)
    return {"tmp_path": tmp_path, "first_applied": first_applied, "anomaly": anomaly,
            "language": language, "advice": advice, "applied": applied,
            "log": read_rank_log(str(tmp_path / "mw" / "rank_0.jsonl"))}


def test_the_reports_yaml_resumes_at_the_withheld_step_with_the_step_count(resumed):
    anomaly, log = resumed["anomaly"], resumed["log"]
    assert anomaly["step"] == NAN_STEP and anomaly["actions"] == ["checkpoint", "stop"]
    assert resumed["first_applied"] == NAN_STEP - 1            # step 6's update withheld
    assert resumed["language"] == "yaml"
    snippet = yaml.safe_load(resumed["advice"])
    resume_dir = Path(anomaly["checkpoint"]).parents[1] / "mindformers_resume"
    assert snippet["load_checkpoint"] == str(resume_dir) and snippet["resume_training"] is True
    assert snippet["callbacks"] == [{"type": "MindWatchMonitor", "resume": True}]
    assert "- type: MindWatchMonitor" in resumed["advice"]
    # MindFormers' layout beside checkpoints/: this rank's file and the meta.json naming it
    assert sorted(p.name for p in (resume_dir / "rank_0").iterdir()) == [
        "meta.json", f"mindwatch_rank_0-1_{NAN_STEP - 1}.ckpt"]
    # run 2 started (no resume error), appended a second segment and trained to the end
    runs, ends = log.of_kind("run"), log.of_kind("end")
    assert len(runs) == 2 and [e["reason"] for e in ends] == ["stopped", "completed"]
    assert runs[1]["config"]["resume"] is True
    second = [s for s in log.steps if s["time"] > runs[1]["time"]]
    # the checkpoint holds the state after step 5 (step 6 withheld): step 6 is trained again
    assert [s["step"] for s in second] == list(range(NAN_STEP, STEPS + 1))
    assert not any(s["skipped"] for s in second)
    # the run's length, as MindFormers counts it: 20, not 5 more than it
    assert runs[1]["total_steps"] == STEPS and second[-1]["eta_s"] == 0.0
    assert resumed["applied"] == STEPS            # optimizer global_step: 5 restored + 15
    info = (resumed["tmp_path"] / "output" / "log" / "rank_0" / "info.log").read_text()
    assert f"dataset skip {NAN_STEP - 1} steps" in info         # the data position


def test_the_resumed_losses_are_an_uninterrupted_runs(resumed, tmp_path, launcher):
    config = mf_config(tmp_path, cell=MINDWATCH_CELL, seed=1)
    assert launcher.run(tmp_path, config) == STEPS
    healthy = {s["step"]: s["loss"] for s in read_rank_log(str(tmp_path / "mw" /
                                                               "rank_0.jsonl")).steps}
    log = resumed["log"]
    again = {s["step"]: s["loss"]
             for s in log.steps if s["time"] > log.of_kind("run")[1]["time"]}
    assert sorted(again) == list(range(NAN_STEP, STEPS + 1))
    for step in again:         # the same state, batches and LR: the same losses
        assert again[step] == pytest.approx(healthy[step], rel=1e-5, abs=1e-6), step
    before = {s["step"]: s["loss"] for s in log.steps[:NAN_STEP - 1]}
    assert before == pytest.approx({step: healthy[step] for step in before}, rel=1e-5)


def test_the_summary_and_the_console_count_the_resumed_segments_own_steps(resumed, capsys):
    """The resumed segment trained steps 6 (again: withheld before) to 20, its own 15: not
    the run's 20."""
    run_dir, own = str(resumed["tmp_path"] / "mw"), STEPS - NAN_STEP + 1
    assert main(["summary", run_dir, "--json"]) == 0          # the latest segment completed
    [rank] = json.loads(capsys.readouterr().out)["ranks"]
    assert (rank["steps"], rank["last_step"]) == (own, STEPS)
    assert [(s["first_step"], s["last_step"], s["steps"]) for s in rank["segments"]] == [
        (1, NAN_STEP, NAN_STEP), (NAN_STEP, STEPS, own)]
    assert main(["summary", run_dir]) == 0
    assert f"  rank 0: {own} steps (steps {NAN_STEP}-{STEPS}), completed in " \
        in capsys.readouterr().out
    # the console of the resumed run (its output: the launcher's second run)
    output = (resumed["tmp_path"] / "launcher.out").read_text()
    assert f"training completed at step {STEPS} after {own} steps in " in output


# MindFormers builds the YAML's entry (and re-raises its error as `type(e)(f"{name}: {e}")`)
BUILD_ENTRY = """
import sys
sys.path.insert(0, sys.argv[1])
import hyper_parallel_standin
hyper_parallel_standin.install()
from mindformers.core.callback.build_callback import build_callback
from mindwatch.mindformers import MindWatchMonitor  # noqa: F401  registers it
build_callback({"type": "MindWatchMonitor", "log_dir": sys.argv[2], "hardware_interval_s": None})
"""


def test_an_existing_run_log_without_resume_says_the_yaml_key(tmp_path):
    (tmp_path / "rank_0.jsonl").write_text('{"kind": "run"}\n')
    result = subprocess.run([sys.executable, "-c", BUILD_ENTRY, str(HERE), str(tmp_path)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    # the last line of the traceback: the error as MindFormers re-raised it
    error = [line for line in result.stderr.splitlines() if "already holds" in line][-1]
    assert error.startswith("mindwatch.basics.run_dir.RunLogExists: MindWatchMonitor: ")
    assert "set `resume: True` in the MindWatchMonitor entry of callbacks:" in error
    assert "pass resume=True" not in error


class _Params:
    """MindSpore's callback parameters, what resume_point reads of them."""

    def __init__(self, batch_num, sink=False):
        self.batch_num, self.dataset_sink_mode = batch_num, sink
        self.cur_epoch_num, self.net_outputs, self.train_dataset = 1, None, None


@pytest.mark.parametrize(("step", "skipped", "done", "epoch", "in_epoch"), [
    (6, True, 5, 1, 5),        # withheld: the state after step 5, step 6 is trained again
    (6, False, 6, 1, 6),       # applied (a signal's stop): goes on at step 7
    (21, True, 20, 1, 20),     # an epoch's last step done: the next epoch comes next
    (22, False, 22, 2, 2),
    (1, True, 0, 0, 0),        # nothing done yet
])
def test_the_resume_point_is_the_last_step_the_checkpoint_holds(step, skipped, done, epoch,
                                                                 in_epoch):
    from mindwatch.mindformers.resume import resume_point
    point = resume_point(step, [{"step": step, "skipped": skipped}], _Params(20))
    assert (point.step, point.epoch, point.epoch_step) == (done, epoch, in_epoch)
    assert point.keys() == {"epoch_num": epoch, "step_num": done}
    assert point.file_name(3) == f"mindwatch_rank_3-{epoch}_{in_epoch}.ckpt"


def test_a_checkpoint_of_mindformers_own_resumes_every_rank_from_its_folder():
    from mindwatch.mindformers.resume import yaml_advice
    path = "/out/checkpoint/rank_1/llama_rank_1-1_10.ckpt"     # CheckpointMonitor's
    advice = yaml_advice(path, None)
    assert advice.language == "yaml"
    assert yaml.safe_load(advice) == {
        "load_checkpoint": "/out/checkpoint", "resume_training": "llama_rank_1-1_10.ckpt",
        "callbacks": [{"type": "MindWatchMonitor", "resume": True}]}
    # MindFormers resumes from a folder only: any other file loads its weights alone
    other = yaml.safe_load(yaml_advice("/somewhere/state.ckpt", None))
    assert other["load_checkpoint"] == "/somewhere/state.ckpt" and "resume_training" not in other
    assert other["callbacks"] == [{"type": "MindWatchMonitor", "resume": True}]
