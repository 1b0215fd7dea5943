"""Under Hugging Face's Trainer and Lightning, the resume advice after damaged weights names the
trainer's own checkpoint from before the damage (torch/checkpoints/resume.py's saved_states),
in the trainer's terms; through the core's Monitor with the adapter's hooks, on real folders
laid out as each trainer writes them."""
import io
import json
import math

import pytest

pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from mindwatch import FrameworkHooks, Monitor
from mindwatch.torch.checkpoints.resume import resume_snippet, saved_states
from mindwatch.torch.checkpoints.training_state import HF, LIGHTNING, TrainingState


def _stop_after_a_warned_lr(tmp_path, clock, state):
    """Steps 1-11 healthy, a warned LR blow-up applied at 12, a NaN withheld at 13."""
    def save(step, reason):
        path = tmp_path / "mw" / "checkpoints" / f"{reason}_step{step}_rank0.ckpt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"state")
        return str(path)

    hooks = FrameworkHooks(save_checkpoint=save,
                           resume_hint=lambda path: resume_snippet(path, state),
                           saved_states=lambda: saved_states(state))
    monitor = Monitor(str(tmp_path / "mw"), clock=clock, stream=io.StringIO(),
                      hardware_interval_s=None, framework=hooks,
                      on_anomaly={"lr_anomaly": "warn"})
    for step in range(1, 12):
        monitor.observe(step=step, loss=2.0, lr=1e-3, grad_norm=1.0)
    monitor.observe(step=12, loss=2.0, lr=10.0, grad_norm=1.0)
    monitor.observe(step=13, loss=math.nan, lr=1e-3, grad_norm=math.nan, skipped=True)
    monitor.close()
    return json.loads((tmp_path / "mw" / "anomalies" / "step13_rank0.json").read_text())


def test_hugging_faces_checkpoint_from_before_the_damage_is_resumed_from(tmp_path, clock):
    output_dir = tmp_path / "out"
    for step in (5, 10, 15):                         # the Trainer's save_steps=5, earlier
        (output_dir / f"checkpoint-{step}").mkdir(parents=True)
    (output_dir / "runs").mkdir()
    state = TrainingState(trainer=HF, trainer_checkpoint=str(output_dir / "checkpoint-13"))
    report = _stop_after_a_warned_lr(tmp_path, clock, state)
    good = str(output_dir / "checkpoint-10")
    assert report["resume_from"]["path"] == good and report["resume_from"]["onset"] == 12
    assert report["resume"].endswith(f'trainer.train(resume_from_checkpoint="{good}")')
    assert "own checkpoint of the last good state" in report["resume"]


def test_lightnings_checkpoint_from_before_the_damage_is_resumed_from(tmp_path, clock):
    checkpoints = tmp_path / "mw" / "checkpoints"
    checkpoints.mkdir(parents=True)
    for step in (4, 8):
        (checkpoints / f"lightning_step{step}.ckpt").write_bytes(b"state")
    state = TrainingState(trainer=LIGHTNING,
                          trainer_checkpoint=str(checkpoints / "lightning_step13.ckpt"))
    report = _stop_after_a_warned_lr(tmp_path, clock, state)
    good = str(checkpoints / "lightning_step8.ckpt")
    assert report["resume_from"]["path"] == good
    assert f'trainer.fit(model, ckpt_path="{good}")' in report["resume"]


def test_the_stops_own_checkpoint_stands_for_the_trainers_of_the_same_step(tmp_path):
    state = TrainingState(trainer=HF, trainer_checkpoint=str(tmp_path / "checkpoint-13"))
    own = resume_snippet(str(tmp_path / "checkpoints" / "anomaly_step13_rank0.ckpt"), state)
    assert "wrote its own checkpoint of this step" in own
    assert own.endswith(f'resume_from_checkpoint="{tmp_path / "checkpoint-13"}")')
    # an older checkpoint of mindwatch's has no trainer checkpoint beside it: loaded as is
    older = resume_snippet(str(tmp_path / "checkpoints" / "anomaly_step7_rank0.ckpt"), state)
    assert older.startswith('saved = torch.load("') and "checkpoint-13" not in older
    assert saved_states(TrainingState()).states == ()        # a plain loop: none
