"""MindFormers' own checkpoints (its CheckpointMonitor) of a run with MindWatchTrainOneStepCell
hold what they hold without mindwatch: its cell's own Parameters (the limits, the step stats)
are left out, so the checkpoint loads strictly into a model without mindwatch, and through
MindFormers' own ``load_checkpoint`` / ``resume_training``."""
import json
import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest
from mf_config import HERE, MINDWATCH_CELL, STEPS, mf_config, mf_steps

pytestmark = [pytest.mark.mindformers, pytest.mark.timeout(300),
              # the "launcher" group: one worker, one launcher process for these runs
              pytest.mark.xdist_group("launcher")]

SAVED_AT = 10
CHECKPOINT = f"llama_rank_0-1_{SAVED_AT}.ckpt"            # epoch 1, step 10
SAVING = {"type": "CheckpointMonitor", "prefix": "llama", "save_checkpoint_steps": SAVED_AT}
# what CheckpointMonitor appends to a checkpoint beside the Parameters (its resume's keys)
APPENDED = {"epoch_num", "step_num", "loss_scale", "global_batch_size"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory, launcher):
    """The same healthy run, saved by CheckpointMonitor every 10 steps: with mindwatch's cell
    (and its monitor), and with MindFormers' cell and no mindwatch at all."""
    runs = {}
    for name, settings in (("mindwatch", {"cell": MINDWATCH_CELL}),
                           ("without", {"mindwatch": False})):
        tmp_path = tmp_path_factory.mktemp({"mindwatch": "protected"}.get(name, name))
        # seed 1: MindFormers seeds only a true seed, and both runs start from one model
        assert launcher.run(tmp_path, mf_config(tmp_path, callbacks=[SAVING], seed=1,
                                                **settings)) == STEPS
        runs[name] = tmp_path
    return runs


def _checkpoint(run, step=SAVED_AT):
    path = run / "output" / "checkpoint" / "rank_0" / f"llama_rank_0-1_{step}.ckpt"
    return {name: value.asnumpy() for name, value in ms.load_checkpoint(str(path)).items()}


@pytest.mark.parametrize("step", [SAVED_AT, STEPS])
def test_the_checkpoint_is_the_one_mindformers_saves_without_mindwatch(saved, step):
    ours, theirs = _checkpoint(saved["mindwatch"], step), _checkpoint(saved["without"], step)
    assert not [name for name in ours if "mindwatch" in name]
    assert sorted(ours) == sorted(theirs)
    # a healthy run: mindwatch's cell trains MindFormers' steps bit for bit
    assert [name for name in ours if not np.array_equal(ours[name], theirs[name])] == []


# Built as the Trainer builds them from the config, without mindwatch: the legacy Llama, and
# MFTrainOneStepCell around it with MindFormers' AdamW
LOAD_STRICTLY = """
import json, sys
sys.path.insert(0, sys.argv[1])
import hyper_parallel_standin
hyper_parallel_standin.install()
import mindspore as ms
import yaml
from mindformers.core.lr import LinearWithWarmUpLR
from mindformers.core.optim import AdamW
from mindformers.models.llama import LlamaConfig, LlamaForCausalLM
from mindformers.wrapper import MFTrainOneStepCell
config = yaml.safe_load(open(sys.argv[2]))
model_config = {k: v for k, v in config["model"]["model_config"].items() if k != "type"}
network = LlamaForCausalLM(LlamaConfig(**model_config))
lr = LinearWithWarmUpLR(learning_rate=1e-3, warmup_steps=5, total_steps=20)
optimizer = AdamW(network.trainable_params(), learning_rate=lr, betas=(0.9, 0.95), eps=1e-8)
cell = MFTrainOneStepCell(network, optimizer, use_clip_grad=True, max_grad_norm=1e6,
                          scale_sense=1.0)
found = {}
for name, target in (("network", network), ("cell", cell)):
    loaded = ms.load_param_into_net(target, ms.load_checkpoint(sys.argv[3]), strict_load=True)
    found[name] = [sorted(names) for names in loaded]
print("loaded", json.dumps(found))
"""


def test_it_loads_strictly_into_a_model_and_a_train_cell_without_mindwatch(saved):
    run = saved["mindwatch"]
    path = run / "output" / "checkpoint" / "rank_0" / CHECKPOINT
    result = subprocess.run(
        [sys.executable, "-c", LOAD_STRICTLY, str(HERE), str(run / "config.yaml"), str(path)],
        cwd=run, capture_output=True, text=True, timeout=200)
    assert result.returncode == 0, result.stderr[-3000:]
    [line] = [line for line in result.stdout.splitlines() if line.startswith("loaded ")]
    found = json.loads(line.removeprefix("loaded "))
    # every Parameter of either loaded, and nothing of mindwatch's left over
    network_left, cell_left = found["network"][1], found["cell"][1]
    assert found["network"][0] == [] and found["cell"][0] == []
    assert set(cell_left) == APPENDED
    assert not [name for name in network_left if "mindwatch" in name]
    assert set(network_left) - APPENDED == {
        name for name in _checkpoint(run) if name.startswith(("adam_m.", "adam_v."))
    } | {"global_step", "scale_sense"}


def test_mindformers_resumes_from_it_without_mindwatch(saved, tmp_path, launcher):
    """MindFormers' own load_checkpoint and resume_training, MindFormers' cell, no mindwatch:
    steps 11-20 are those of the run that never stopped."""
    config = mf_config(tmp_path, mindwatch=False, seed=1, resume_training=CHECKPOINT,
                       load_checkpoint=str(saved["mindwatch"] / "output" / "checkpoint"))
    assert launcher.run(tmp_path, config) == STEPS        # global_step 10 restored + 10
    info = (tmp_path / "output" / "log" / "rank_0" / "info.log").read_text()
    assert f"dataset skip {SAVED_AT} steps" in info
    assert "mindwatch_" not in info         # no "not loaded" names of mindwatch's
    resumed, uninterrupted = mf_steps(tmp_path), mf_steps(saved["without"])
    again = [resumed[step] for step in sorted(resumed)]
    assert [(s["loss"], s["grad_norm"]) for s in again] == [
        (uninterrupted[step]["loss"], uninterrupted[step]["grad_norm"])
        for step in range(SAVED_AT + 1, STEPS + 1)]
