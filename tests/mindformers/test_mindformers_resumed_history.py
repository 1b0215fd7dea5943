"""A MindSpore Transformers run resumed with ``resume_training`` (MindWatchMonitor's entry
with ``resume: True``) judges its first step against the run's history, read back from
mindwatch's log: the LR mistyped in the resumed config (1e-3 -> 500) is an ``lr_anomaly`` on
the first resumed step, withheld by MindWatchTrainOneStepCell. The checkpoint resumed from
is CheckpointMonitor's of step 10 of a 20-step run, so the log's steps 11-20 are left out of
the history (the run goes on from step 10, not 20)."""
import json

import mindspore as ms
import numpy as np
import pytest
import yaml
from mf_config import MINDWATCH_CELL, STEPS, mf_config

from mindwatch.runlog import read_rank_log

pytestmark = [pytest.mark.mindformers, pytest.mark.timeout(300),
              # the "launcher" group: one worker, one launcher process for these runs
              pytest.mark.xdist_group("launcher")]

SAVED_AT = 10
SAVING = {"type": "CheckpointMonitor", "prefix": "llama", "save_checkpoint_steps": SAVED_AT}


def weights(path):
    """The model's weights in a checkpoint (MindFormers' or mindwatch's), by name."""
    return {name: value.asnumpy() for name, value in ms.load_checkpoint(str(path)).items()
            if name.startswith("model.") or name.startswith("lm_head.")}


def test_a_mistyped_lr_in_the_resumed_config_is_withheld_on_its_first_step(tmp_path, launcher):
    launcher.run(tmp_path, mf_config(tmp_path, cell=MINDWATCH_CELL, seed=1, callbacks=[SAVING]))
    rank_dir = tmp_path / "output" / "checkpoint" / "rank_0"
    # as if the run had died after CheckpointMonitor's save of step 10
    (rank_dir / f"llama_rank_0-1_{STEPS}.ckpt").unlink()
    (rank_dir / "meta.json").write_text(json.dumps(
        {"last_epoch": 1, "last_step": SAVED_AT, "last_ckpt_file": "llama_rank_0-1_10.ckpt"}))
    config = yaml.safe_load(mf_config(tmp_path, cell=MINDWATCH_CELL, seed=1,
                                      monitor={"resume": True}).read_text())
    config["optimizer"]["learning_rate"] = config["lr_schedule"]["learning_rate"] = 500.0
    config.update(load_checkpoint=str(rank_dir.parent), resume_training=True)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    assert launcher.run(tmp_path, tmp_path / "config.yaml") == SAVED_AT    # none applied
    log = read_rank_log(str(tmp_path / "mw" / "rank_0.jsonl"))
    resumed = log.of_kind("run")[1]
    steps = [s for s in log.steps if s["time"] > resumed["time"]]
    assert [(s["step"], s["skipped"]) for s in steps] == [(SAVED_AT + 1, True)]
    assert steps[0]["lr"] > 100
    [anomaly] = log.anomalies
    assert (anomaly["anomaly"], anomaly["step"], anomaly["actions"]) == (
        "lr_anomaly", SAVED_AT + 1, ["checkpoint", "stop"])
    assert "the highest this run has trained at (0.001" in anomaly["message"]
    [said] = [n["message"] for n in log.of_kind("notice") if n["time"] > resumed["time"]
              and n["message"].startswith("resumed")]
    assert said.startswith(f"resumed after step {SAVED_AT}: the history of the last "
                           f"{SAVED_AT} steps restored from rank_0.jsonl (the rules' windows, "
                           "the LR peak 0.001")
    assert said.endswith(f"; the log's {STEPS - SAVED_AT} step records after step {SAVED_AT}, "
                         "where training resumes, left out")
    # withheld: the weights mindwatch checkpointed after the step are step 10's, bit for bit
    before = weights(rank_dir / f"llama_rank_0-1_{SAVED_AT}.ckpt")
    after = weights(anomaly["checkpoint"])
    assert sorted(after) == sorted(before) and len(before) >= 5
    assert [name for name in before if not np.array_equal(after[name], before[name])] == []
