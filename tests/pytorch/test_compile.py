"""Protection under torch.compile: the hooks are the optimizer's, so a compiled model (or a
compiled loss) changes nothing; the withheld step is bit for bit the state before it, and
the checkpoint holds the plain model's keys."""
import io
import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import batches, bitwise_equal, records, snapshot, tiny_model  # noqa: E402


@pytest.mark.slow
def test_a_compiled_model_is_protected(tmp_path):
    model = tiny_model()
    compiled = torch.compile(model)
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO(),
                           on_anomaly={"loss_nonfinite": "skip", "gradient_nonfinite": "skip"})
    optimizer = monitor.protect(torch.optim.AdamW(model.parameters(), lr=1e-2), model=model)
    for step, (x, y) in enumerate(batches(6), start=1):
        if step == 4:
            x = x.clone()
            x[0, 0] = math.nan        # a NaN in the batch: NaN loss and gradients
            before = snapshot(model, optimizer)
        monitor.backward(nn.functional.mse_loss(compiled(x), y))
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
        if step == 4:
            assert bitwise_equal(snapshot(model, optimizer), before)
    monitor.close()
    steps = records(tmp_path / "run", "step")
    assert [r["skipped"] for r in steps] == [False, False, False, True, False, False]
    assert all(math.isfinite(r["loss"]) for r in steps if not r["skipped"])


def test_a_compiled_models_checkpoint_loads_into_the_plain_model(tmp_path):
    """protect(model=compiled): the checkpoint holds the model's own keys, not the compiled
    wrapper's ``_orig_mod.`` ones, so the report's advice loads it into a fresh model that
    is not compiled, strictly (the eager backend: the wrapper is the same, its compiling
    quick)."""
    model = tiny_model()
    compiled = torch.compile(model, backend="eager")
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    optimizer = monitor.protect(torch.optim.AdamW(compiled.parameters(), lr=1e-2),
                                model=compiled)
    for step, (x, y) in enumerate(batches(6), start=1):
        if step == 4:
            x = x.clone()
            x[0, 0] = math.nan
        monitor.backward(nn.functional.mse_loss(compiled(x), y))
        optimizer.step()
        optimizer.zero_grad()
        if any(a.stops for a in monitor.observe(step=step)):
            break
    monitor.close()
    (anomaly, *_) = records(tmp_path / "run", "anomaly")
    saved = torch.load(anomaly["checkpoint"], weights_only=True)
    assert list(saved["model"]) == list(model.state_dict())       # "0.weight", not _orig_mod.
    fresh = tiny_model(seed=1)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    report = json.loads(Path(anomaly["report"]).read_text())
    exec(report["resume"], {"torch": torch, "model": fresh, "optimizer": fresh_optimizer})
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters(),
                                                  strict=True))
    fresh.load_state_dict(saved["model"], strict=True)
