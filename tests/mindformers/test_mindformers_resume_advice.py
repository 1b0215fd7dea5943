"""The report's resume advice names good weights (issue #42), under MindFormers' Trainer.

A healthy run saves with CheckpointMonitor every 5 steps. A resume from its step 10 with a bad
LR schedule (1e5 times higher at step 12, the lr_anomaly only warned) lets step 12's update
wreck the weights; step 13 explodes and is withheld, so mindwatch's checkpoint holds step 12's
update. The advice must name CheckpointMonitor's file of step 10, say why, and, pasted into the
config as printed with the LR fixed, train on to the end exactly as the healthy run did.
"""
import json
import re
from pathlib import Path

import pytest
import yaml
from mf_config import MINDWATCH_CELL, STEPS, mf_config
from test_mindformers_resume import apply

from mindwatch.runlog import read_rank_log

pytestmark = [pytest.mark.mindformers, pytest.mark.timeout(300),
              # the "launcher" group: one worker, one launcher process for these runs
              pytest.mark.xdist_group("launcher")]

JUMP, STOP = 12, 13
CHECKPOINTS = {"type": "CheckpointMonitor", "prefix": "llama_tiny", "save_checkpoint_steps": 5}
# The resume section as a user reads it: its heading, why, and the YAML to paste
ADVICE = re.compile(r"## Resume from the last good state, saved after step (\d+)\n\n(.*?)\n\n"
                    r"```yaml\n(.*?)\n```", re.S)


def _monitor(settings):
    [entry] = [c for c in settings["callbacks"] if c["type"] == "MindWatchMonitor"]
    return entry


@pytest.fixture(scope="module")
def story(tmp_path_factory, launcher):
    tmp_path = tmp_path_factory.mktemp("advice")
    config = mf_config(tmp_path, cell=MINDWATCH_CELL, seed=1, callbacks=[CHECKPOINTS])
    assert launcher.run(tmp_path, config) == STEPS
    log_path = str(tmp_path / "mw" / "rank_0.jsonl")
    healthy = {s["step"]: s["loss"] for s in read_rank_log(log_path).steps}
    fine = yaml.safe_load(config.read_text())
    # resumed from CheckpointMonitor's step 10, with an LR schedule that blows up at step 12
    bad = yaml.safe_load(config.read_text())
    bad.update(load_checkpoint=str(tmp_path / "output" / "checkpoint"),
               resume_training="llama_tiny_rank_0-1_10.ckpt",
               lr_schedule={**bad["lr_schedule"], "type": "JumpLR", "jump_step": JUMP})
    _monitor(bad).update(resume=True, on_anomaly={"lr_anomaly": "warn"})
    config.write_text(yaml.safe_dump(bad))
    launcher.run(tmp_path, config)
    console = (tmp_path / "launcher.out").read_text()
    stop = read_rank_log(log_path).anomalies[-1]
    markdown = Path(stop["report"]).with_suffix(".md").read_text()
    # the LR fixed (the first run's schedule and policies), the advice pasted as printed
    step, why, advice = ADVICE.search(markdown).groups()
    config.write_text(yaml.safe_dump(apply(fine, yaml.safe_load(advice))))
    launcher.run(tmp_path, config)
    return {"tmp_path": tmp_path, "healthy": healthy, "stop": stop, "markdown": markdown,
            "console": console, "step": int(step), "why": why, "advice": advice,
            "log": read_rank_log(log_path)}


def test_the_advice_names_checkpointmonitors_step_10_and_says_why(story):
    stop, tmp_path = story["stop"], story["tmp_path"]
    assert (stop["step"], stop["anomaly"], stop["actions"]) == (
        STOP, "gradient_explode", ["checkpoint", "stop"])
    warned = [a for a in story["log"].anomalies if a["anomaly"] == "lr_anomaly"]
    assert [(a["step"], a["actions"]) for a in warned] == [(JUMP, ["warn"])]
    good = str(tmp_path / "output" / "checkpoint" / "rank_0" / "llama_tiny_rank_0-1_10.ckpt")
    report = json.loads(Path(stop["report"]).read_text())
    assert report["resume_from"]["path"] == good
    assert (report["resume_from"]["step"], report["resume_from"]["onset"]) == (10, JUMP)
    why = report["resume_from"]["why"]
    assert f"step {JUMP}'s update went into the weights though lr_anomaly was found" in why
    assert story["step"] == 10 and story["why"] == why + "."
    assert (f"step {STOP}'s update was withheld, but the checkpoint's weights already hold an "
            "anomalous update") in " ".join(report["notes"])
    # the YAML resumes every rank from that file, by name: MindFormers' meta.json now points
    # at the file CheckpointMonitor saved when the stop ended training, which holds step 12
    snippet = yaml.safe_load(story["advice"])
    assert snippet["load_checkpoint"] == str(tmp_path / "output" / "checkpoint")
    assert snippet["resume_training"] == "llama_tiny_rank_0-1_10.ckpt"
    assert "saves the weights again when training ends: that newest file INCLUDES step " \
           f"{JUMP}'s update too" in " ".join(report["notes"])
    # the console's line, beside the anomaly's (which names mindwatch's own checkpoint)
    assert f"note: gradient_explode at step {STOP}: resume from {good} (saved after step 10)" \
        in story["console"]


def test_following_the_advice_with_the_lr_fixed_trains_as_the_healthy_run(story):
    log, healthy = story["log"], story["healthy"]
    runs = log.of_kind("run")
    assert [e["reason"] for e in log.of_kind("end")] == ["completed", "stopped", "completed"]
    last = [s for s in log.steps if s["time"] > runs[2]["time"]]
    assert [s["step"] for s in last] == list(range(11, STEPS + 1))
    assert not any(s["skipped"] for s in last)
    assert not [a for a in log.anomalies if a["time"] > runs[2]["time"]]
    for step in last:          # the state of step 10, the same batches and LR: the same losses
        assert step["loss"] == pytest.approx(healthy[step["step"]], rel=1e-5, abs=1e-6), step
