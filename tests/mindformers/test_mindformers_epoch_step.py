"""mindwatch's step records beside MindSpore Transformers' own log: each record's
``epoch``/``epoch_step`` are the epoch and the step MFLossMonitor printed for that step."""
import json

import pytest
import yaml
from mf_config import STEPS, mf_config, mf_epoch_steps

from mindwatch.runlog import read_rank_log

# the "launcher" group: one worker, one launcher process for this module's Trainer runs and
# the other modules' of the group (the launcher fixture)
pytestmark = [pytest.mark.mindformers, pytest.mark.default_pair, pytest.mark.timeout(300),
              pytest.mark.xdist_group("launcher")]

RUNNER = {"epochs": 2, "batch_size": 2, "sink_mode": False, "sink_size": 1,
          "gradient_accumulation_steps": 1}


def test_each_step_record_names_the_epoch_step_mflossmonitor_printed(tmp_path, launcher):
    launcher.run(tmp_path, mf_config(tmp_path, runner_config=RUNNER))
    steps = read_rank_log(str(tmp_path / "mw" / "rank_0.jsonl")).steps
    printed = mf_epoch_steps(tmp_path)          # one line a step, in order
    assert [s["step"] for s in steps] == list(range(1, 2 * STEPS + 1))
    assert [(s["epoch"], s["epoch_step"], s["steps_per_epoch"]) for s in steps] == printed
    assert printed[STEPS] == (2, 1, STEPS)      # the second epoch numbers from 1 again


def test_a_run_resumed_within_an_epoch_numbers_as_mflossmonitor_does(tmp_path, launcher):
    """Resumed from CheckpointMonitor's save of step 13 (MindFormers' `resume_training`):
    MindFormers restarts cur_step_num at 1 and prints epoch 1, step 14."""
    checkpoints = tmp_path / "output" / "checkpoint"
    launcher.run(tmp_path, mf_config(tmp_path, mindwatch=False,
                                     runner_config={**RUNNER, "epochs": 1}, callbacks=[
        {"type": "CheckpointMonitor", "prefix": "llama_tiny", "save_checkpoint_steps": 13,
         "directory": str(checkpoints)}]))
    [rank_dir] = list(checkpoints.rglob("rank_0"))
    # as if the run had ended after its save of step 13
    (rank_dir / "llama_tiny_rank_0-1_20.ckpt").unlink()
    (rank_dir / "meta.json").write_text(json.dumps(
        {"last_epoch": 1, "last_step": 13, "last_ckpt_file": "llama_tiny_rank_0-1_13.ckpt"}))
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    config = yaml.safe_load(mf_config(resumed, runner_config=RUNNER).read_text())
    config.update(load_checkpoint=str(rank_dir.parent), resume_training=True)
    (resumed / "config.yaml").write_text(yaml.safe_dump(config))
    launcher.run(resumed, resumed / "config.yaml")
    steps = read_rank_log(str(resumed / "mw" / "rank_0.jsonl")).steps
    printed = mf_epoch_steps(resumed)
    assert printed[0] == (1, 14, STEPS) and len(printed) == 2 * STEPS - 13
    assert [(s["epoch"], s["epoch_step"], s["steps_per_epoch"]) for s in steps] == printed
