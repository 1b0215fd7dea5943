"""A PyTorch run resumed in a new process with ``resume=True`` judges its first step against
the run's history, read back from its log: an LR mistyped for the resume (1e-3 -> 500) is an
``lr_anomaly`` on the resumed step, whose update the protected optimizer withholds. Each run
is a real process (resume_history_script.py): a plain loop, Hugging Face's Trainer
resumed with ``resume_from_checkpoint`` and Lightning's with ``fit(ckpt_path=...)``."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch_helpers import records  # noqa: E402

SCRIPT = Path(__file__).with_name("resume_history_script.py")


def run(loop: str, tmp_path: Path, first: int, last: int, *options: str) -> list[tuple]:
    """One process; returns the anomalies it printed: (step, kind, actions)."""
    done = subprocess.run([sys.executable, str(SCRIPT), loop, str(tmp_path / "run"),
                           str(tmp_path / "ckpt"), str(first), str(last), *options],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return [(int(step), kind, actions.split(",")) for _, step, kind, actions in
            (line.split() for line in done.stdout.splitlines() if line.startswith("anomaly"))]


def resumed_notice(log_dir: Path) -> str:
    [said] = [n["message"] for n in records(log_dir, "notice")
              if n["message"].startswith("resumed")]
    return said


def test_a_plain_loop_resumed_with_a_mistyped_lr_withholds_its_first_step(tmp_path):
    (tmp_path / "ckpt").mkdir()
    assert run("plain", tmp_path, 1, 10) == []
    found = run("plain", tmp_path, 11, 20, "--resume")
    assert found == [(11, "lr_anomaly", ["checkpoint", "stop"])]
    steps = records(tmp_path / "run", "step")
    assert [(s["step"], s["lr"], s["skipped"]) for s in steps[10:]] == [(11, 500.0, True)]
    assert resumed_notice(tmp_path / "run").startswith(
        "resumed after step 10: the history of the last 10 steps restored from rank_0.jsonl "
        "(the rules' windows, the LR peak 0.001, the smoothed loss ")
    # withheld: the model is step 10's, bit for bit, in mindwatch's checkpoint and after
    before = torch.load(tmp_path / "ckpt" / "last.pt", weights_only=True)["model"]
    [anomaly] = records(tmp_path / "run", "anomaly")
    assert "at step 11 is 5e+05x the highest this run has trained at (0.001" \
        in anomaly["message"]                       # judged by the restored LR peak
    for path in (anomaly["checkpoint"], tmp_path / "ckpt" / "after.pt"):
        after = torch.load(path, weights_only=True)["model"]
        assert after.keys() == before.keys()
        assert all(torch.equal(after[name], before[name]) for name in before), path


def resumed_trainer_run(loop: str, tmp_path: Path) -> dict:
    """A trainer's 10 healthy steps, then its resume from step 10's checkpoint with the LR
    mistyped: step 11 withheld on the restored LR peak. Returns step 11's anomaly record."""
    assert run(loop, tmp_path, 1, 10) == []
    found = run(loop, tmp_path, 11, 20, "--resume")
    assert found == [(11, "lr_anomaly", ["checkpoint", "stop"])]
    steps = records(tmp_path / "run", "step")
    assert [s["step"] for s in steps] == list(range(1, 12))
    assert (steps[-1]["lr"], steps[-1]["skipped"]) == (500.0, True)
    [anomaly] = records(tmp_path / "run", "anomaly")
    assert "at step 11 is 5e+05x the highest this run has trained at (0.001" \
        in anomaly["message"]                       # judged by the restored LR peak
    assert resumed_notice(tmp_path / "run").startswith(
        "resumed after step 10: the history of the last 10 steps restored from rank_0.jsonl "
        "(the rules' windows, the LR peak 0.001")
    return anomaly


def same_tensors(before: dict, after: dict) -> bool:
    return after.keys() == before.keys() and all(torch.equal(after[k], before[k])
                                                 for k in before)


def test_hugging_face_resumed_from_its_checkpoint_withholds_the_mistyped_lr(tmp_path):
    resumed_trainer_run("hf", tmp_path)
    # the Trainer's own checkpoint of the stop holds step 10's model: the update withheld
    from safetensors.torch import load_file
    assert same_tensors(load_file(tmp_path / "ckpt" / "checkpoint-10" / "model.safetensors"),
                        load_file(tmp_path / "ckpt" / "checkpoint-11" / "model.safetensors"))


def test_lightning_resumed_from_its_checkpoint_withholds_the_mistyped_lr(tmp_path):
    (tmp_path / "ckpt").mkdir()
    anomaly = resumed_trainer_run("lightning", tmp_path)
    # mindwatch's checkpoint of the stop holds step 10's weights: the update withheld
    before = torch.load(tmp_path / "ckpt" / "step10.ckpt", weights_only=False)["state_dict"]
    assert same_tensors(before, torch.load(anomaly["checkpoint"], weights_only=True)["model"])
