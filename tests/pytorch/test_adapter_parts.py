"""The adapter's small parts: versions, the memory reader, trainers' optional imports, and
Hugging Face's Trainer left as it was found."""
import io
import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from mindwatch.torch import TrainMonitor, compat  # noqa: E402
from mindwatch.torch.hardware.memory import torch_memory_reader  # noqa: E402
from torch_helpers import records  # noqa: E402


def test_the_run_record_names_torch_and_an_untested_release_is_said_once(tmp_path,
                                                                        monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    for step in (1, 2):
        monitor.observe(step=step, loss=1.0)
    monitor.close()
    (run,) = records(tmp_path / "run", "run")
    assert run["versions"]["torch"] == "2.99.0" and run["versions"]["mindspore"] is None
    notices = [n["message"] for n in records(tmp_path / "run", "notice")]
    assert len(notices) == 1 and "PyTorch 2.99.0 is not a version mindwatch is tested with" \
        in notices[0] and "2.13" in notices[0]
    assert compat.TESTED.supports(compat.release().version) is False


def test_the_memory_reader_reads_the_accelerator_in_mb_and_never_raises():
    gib = 2 ** 30

    class Cuda:
        @staticmethod
        def is_available():
            return True

        memory_allocated = staticmethod(lambda: 3 * gib)
        memory_reserved = staticmethod(lambda: 4 * gib)
        max_memory_allocated = staticmethod(lambda: 5 * gib)

        @staticmethod
        def max_memory_reserved():
            raise RuntimeError("driver gone")

    fake = types.SimpleNamespace(cuda=Cuda, npu=None)
    assert torch_memory_reader(fake)() == {
        "device_target": "GPU", "allocated_mb": 3072.0, "reserved_mb": 4096.0,
        "max_allocated_mb": 5120.0, "max_reserved_mb": None}
    # this machine: no accelerator, no allocator to read
    assert torch_memory_reader()() == {
        "device_target": "CPU", "allocated_mb": None, "reserved_mb": None,
        "max_allocated_mb": None, "max_reserved_mb": None}


def test_a_missing_trainer_package_says_what_to_install(monkeypatch):
    import mindwatch.torch as adapter
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.delitem(sys.modules, "mindwatch.torch.trainers.hf", raising=False)
    with pytest.raises(ImportError, match="pip install transformers accelerate"):
        adapter.HFCallback  # noqa: B018
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.delitem(sys.modules, "mindwatch.torch.trainers.lightning", raising=False)
    with pytest.raises(ImportError, match="pip install lightning"):
        adapter.LightningCallback  # noqa: B018


def test_hf_trainer_gets_its_clipping_back_and_logs_the_pre_clip_norm(tmp_path):
    from transformers import Trainer, TrainingArguments

    from mindwatch.torch import HFCallback
    from torch_conformance import SCENARIOS, STEPS, Pairs, PoisonNet
    args = TrainingArguments(output_dir=str(tmp_path / "t"), per_device_train_batch_size=4,
                             gradient_accumulation_steps=2, max_steps=STEPS // 2,
                             max_grad_norm=0.5, report_to=[], save_strategy="no",
                             logging_steps=1, use_cpu=True, disable_tqdm=True, seed=0)
    callback = HFCallback(str(tmp_path / "run"), stream=io.StringIO())
    model = PoisonNet(SCENARIOS[0].poison)
    losses = []
    model.register_forward_hook(
        lambda module, inputs, out: losses.append(float(out["loss"])) if module.training
        else None)
    trainer = Trainer(model=model, args=args, train_dataset=Pairs(), callbacks=[callback])
    trainer.train()
    assert args.max_grad_norm == 0.5
    steps = records(tmp_path / "run", "step")
    assert len(steps) == STEPS // 2
    # each step's loss: the mean of its two micro-batches; the norm: the Trainer's own
    # (pre-clip) grad_norm of its log
    assert [s["loss"] for s in steps] == pytest.approx(
        [(a + b) / 2 for a, b in zip(losses[::2], losses[1::2], strict=True)], rel=1e-6)
    logged = [entry["grad_norm"] for entry in trainer.state.log_history if "grad_norm" in entry]
    assert [s["grad_norm"] for s in steps] == pytest.approx(logged, rel=1e-6)
    assert max(logged) > 0.5              # clipping had work to do
