"""A stop under Hugging Face's Trainer and Lightning, as a user's script meets it: each run a
process of its own (trainer_stop_script.py) with ``stop_exit_code=42``. A NaN at step 6
stops the run, which exits 42 once the trainer has ended (the callback after mindwatch's
included, the line after ``train()``/``fit()`` not reached); the trainer's own checkpoint of
the step holds mindwatch's state; the anomaly report's resume advice, run as printed, goes on
to the last step. A healthy run exits 0."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from mindwatch.report.summary import summarize  # noqa: E402
from mindwatch.runlog import read_run  # noqa: E402
from torch_helpers import records  # noqa: E402

SCRIPT = Path(__file__).with_name("trainer_stop_script.py")
STEPS, NAN_AT = 12, 6


def start(trainer: str, run: Path, out: Path, *options: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SCRIPT), trainer, str(run), str(out),
                             *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def finish(process: subprocess.Popen) -> tuple[int, str]:
    out, err = process.communicate(timeout=240)
    return process.returncode, out + err


def stop_then_resume(trainer: str, tmp_path: Path) -> tuple[Path, Path, str]:
    """A NaN run and a healthy one side by side, then the NaN run resumed as its report
    says. Returns the NaN run's log and output directories and its first output."""
    run, out = tmp_path / "run", tmp_path / "out"
    healthy = start(trainer, tmp_path / "healthy", tmp_path / "healthy_out")
    stopped = start(trainer, run, out, "--nan-at", str(NAN_AT))
    (status, said), (healthy_status, healthy_said) = finish(stopped), finish(healthy)
    assert healthy_status == 0, healthy_said[-3000:]
    assert (tmp_path / "healthy_out" / "after_training").exists()
    assert records(tmp_path / "healthy", "end")[0]["reason"] == "completed"
    assert status == 42, said[-3000:]
    assert ("mindwatch [rank 0]: training stopped by loss_nonfinite at step 6; exiting with "
            "status 42 (stop_exit_code)") in said
    # the trainer ended first, the callback listed after mindwatch's too; the script's own
    # line after train()/fit() is not reached
    assert (out / "ended_after").exists() and not (out / "after_training").exists()
    steps = records(run, "step")
    assert [s["step"] for s in steps] == list(range(1, NAN_AT + 1))
    assert [s["step"] for s in steps if s["skipped"]] == [NAN_AT]
    assert records(run, "end")[0]["reason"] == "stopped"
    return run, out, said


def resume(trainer: str, run: Path, out: Path) -> None:
    report = run / "anomalies" / f"step{NAN_AT}_rank0.json"
    status, said = finish(start(trainer, run, out, "--resume", str(report)))
    assert status == 0, said[-3000:]
    assert (out / "after_training").exists()
    steps = records(run, "step")
    assert [s["step"] for s in steps] == [*range(1, NAN_AT + 1), *range(NAN_AT + 1, STEPS + 1)]
    assert [e["reason"] for e in records(run, "end")] == ["stopped", "completed"]
    summary = summarize(read_run(str(run)))
    assert summary["verdict"] == "HEALTHY" and summary["segments"] == 2


def advice(run: Path) -> str:
    body = json.loads((run / "anomalies" / f"step{NAN_AT}_rank0.json").read_text())
    markdown = (run / "anomalies" / f"step{NAN_AT}_rank0.md").read_text()
    assert body["resume"] in markdown
    return body["resume"]


def mindwatch_checkpoint(run: Path) -> dict:
    return torch.load(run / "checkpoints" / f"anomaly_step{NAN_AT}_rank0.ckpt",
                      weights_only=True)


def test_hf_trainer(tmp_path):
    from safetensors.torch import load_file
    run, out, said = stop_then_resume("hf", tmp_path)
    # the stop in the Trainer's own log: printed, and handed to the callbacks listed before
    # mindwatch's, as report_to trackers are
    assert "{'mindwatch_stop': 'loss_nonfinite at step 6', 'mindwatch_stop_step': 6" in said
    tracked = [json.loads(line) for line in (out / "tracked.jsonl").read_text().splitlines()]
    assert {"mindwatch_stop": "loss_nonfinite at step 6", "mindwatch_stop_step": 6,
            "epoch": 0.5} in tracked
    hf = out / f"checkpoint-{NAN_AT}"
    state = json.loads((hf / "trainer_state.json").read_text())
    assert state["global_step"] == NAN_AT
    control = state["stateful_callbacks"]["TrainerControl"]["args"]
    assert control["should_training_stop"] is True and control["should_save"] is True
    stop = [e for e in state["log_history"] if "mindwatch_stop" in e]
    assert stop == [{"mindwatch_stop": "loss_nonfinite at step 6", "mindwatch_stop_step": 6,
                     "epoch": 0.5, "step": 6}]
    assert state["log_history"][-1]["step"] == 6          # the step's own line after it
    # the Trainer's checkpoint holds mindwatch's: the weights from before step 6's update
    weights, saved = load_file(hf / "model.safetensors"), mindwatch_checkpoint(run)["model"]
    assert weights.keys() <= saved.keys() and len(weights) > 5
    assert all(torch.equal(weights[name], saved[name]) for name in weights)
    assert advice(run).splitlines()[-1] == (
        f'trainer.train(resume_from_checkpoint="{hf}")')
    resume("hf", run, out)


def test_lightning(tmp_path):
    run, out, _ = stop_then_resume("lightning", tmp_path)
    path = run / "checkpoints" / f"lightning_step{NAN_AT}.ckpt"
    lightning = torch.load(path, weights_only=False)
    assert lightning["global_step"] == NAN_AT
    saved = mindwatch_checkpoint(run)
    assert lightning["state_dict"].keys() == saved["model"].keys()
    assert all(torch.equal(lightning["state_dict"][k], v) for k, v in saved["model"].items())
    assert lightning["optimizer_states"][0]["state"][0]["step"] == NAN_AT - 1   # 6 withheld
    assert advice(run).splitlines()[-1] == f'trainer.fit(model, ckpt_path="{path}")'
    resume("lightning", run, out)
