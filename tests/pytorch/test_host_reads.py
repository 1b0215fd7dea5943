"""The decision is taken on the device: protection adds no read to the host during backward
and the optimizer step, and observe reads the step's numbers once (the path an accelerator
takes, forced here on the CPU, whose own path reads the verdict when it is taken)."""
import io

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import HostReads, batches, records, tiny_model  # noqa: E402


def reads_of_a_step(optimizer_factory, monitor=None, poison=False, on_host=False):
    """(reads during backward + step + zero_grad, reads in observe) of a third step;
    ``on_host``: the CPU's way (the verdict read when taken), else an accelerator's."""
    model = tiny_model()
    optimizer = optimizer_factory(model.parameters())
    if monitor is not None:
        optimizer = monitor.protect(optimizer, model=model, clip_grad_norm=1.0)
        monitor.train_step.verdict_on_host = on_host
    counts = None
    for step, (x, y) in enumerate(batches(3), start=1):
        with HostReads() as in_step:
            loss = nn.functional.mse_loss(model(x), y)
            if poison and step == 3:
                loss = loss * float("nan")
            if monitor is not None:
                monitor.backward(loss)
            else:
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        with HostReads() as in_observe:
            if monitor is not None:
                monitor.observe(step=step)
        counts = (in_step.count, in_observe.count, in_observe.names)
    return counts


OPTIMIZERS_FOR_READS = [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: torch.optim.AdamW(p, lr=1e-3),
    lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=False),
]


@pytest.mark.parametrize("factory", OPTIMIZERS_FOR_READS,
                         ids=["SGD", "AdamW", "AdamW-single-tensor"])
@pytest.mark.parametrize("poison", [False, True], ids=["healthy", "withheld"])
def test_protection_reads_nothing_to_the_host_and_observe_reads_once(tmp_path, factory, poison):
    bare_step, _, _ = reads_of_a_step(factory)
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO(),
                           on_anomaly={"loss_nonfinite": "skip", "gradient_nonfinite": "skip"})
    step_reads, observe_reads, names = reads_of_a_step(factory, monitor, poison)
    monitor.close()
    # AdamW's own step reads its CPU step counts (torch's _get_value): the same in both
    assert step_reads == bare_step
    assert (observe_reads, names) == (1, ["tolist"])
    assert records(tmp_path / "run", "step")[-1]["skipped"] is poison


def test_the_counter_sees_a_read(tmp_path):
    """The counter can fail: a loop that reads its loss each step is seen doing it."""
    with HostReads() as reads:
        torch.ones(2).sum().item()
        bool(torch.ones(1) > 0)
    assert reads.count == 2


def test_on_the_cpu_the_verdict_is_read_when_taken_and_a_healthy_step_copies_nothing(tmp_path):
    # a CPU tensor's value is on the host already: the one read waits for nothing, and a
    # healthy step then skips the copies an accelerator's step makes
    factory = OPTIMIZERS_FOR_READS[1]
    bare_step, _, _ = reads_of_a_step(factory)
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    step_reads, observe_reads, _ = reads_of_a_step(factory, monitor, on_host=None)
    copies = monitor.train_step._withholding._buffers
    monitor.close()
    assert (step_reads, observe_reads) == (bare_step + 1, 1)
    assert copies == []                     # no step was withheld: nothing was ever copied
