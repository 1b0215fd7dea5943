"""Replays alone: what a replay that came out identical, healthy or different makes of the
step's anomalies, and the batch's place in its epoch."""
import math
import socket

from mindwatch.anomaly import Anomaly
from mindwatch.decisions.replays import Replays, device_shown, place_text, same
from mindwatch.observation import ReplayOutcome, StepObservation


def _obs(step, epoch=1, loss=math.nan, grad_norm=1.5, skipped=True):
    return StepObservation.from_arguments(
        step=step, epoch=epoch, loss=loss, lr=1e-3, grad_norm=grad_norm, grads_finite=None,
        lr_groups=None, skipped=skipped, steps=1, layer_grad_norms=None, extra=None)


def _replays(outcome):
    emitted, calls = [], []

    def replay():
        calls.append(1)
        return outcome
    return Replays(replay=replay, emit=lambda kind, fields: emitted.append((kind, fields)),
                   rank=3, device=1), emitted, calls


def _found(step):
    return [Anomaly("loss_nonfinite", step, math.nan, None, "loss is NaN")]


def test_identical_names_the_batch_in_its_epoch():
    replays, emitted, _ = _replays(ReplayOutcome(loss=math.nan, grad_norm=1.5, healthy=False))
    for step in range(1, 6):                                   # epoch 2 begins at step 5
        assert replays.review(_obs(step, epoch=1 + step // 5, skipped=False, loss=1.0), []) == []
    found = replays.review(_obs(6, epoch=2), _found(6))
    assert [a.kind for a in found] == ["loss_nonfinite"]
    # the verdict is a field of its own; the detector's message stays as it was
    assert found[0].message == "loss is NaN"
    assert found[0].fields["replay_verdict"].endswith(
        "bit-identical: the batch (step 2 of epoch 2) or the model's state is the cause, not "
        "the device")
    [(kind, fields)] = emitted
    assert kind == "replay" and fields["reproduced"] is True and fields["healthy"] is False
    assert fields["anomaly"] == "loss_nonfinite" and math.isnan(fields["replay_loss"])


def test_the_frameworks_own_epoch_step_names_the_batch():
    """A resumed MindFormers run starts mid-epoch: its first step is step 2 of epoch 1, as
    the observation says, not the first of the epoch."""
    replays, _, _ = _replays(ReplayOutcome(loss=math.nan, grad_norm=1.5, healthy=False))
    obs = StepObservation.from_arguments(
        step=2, epoch=1, epoch_step=2, steps_per_epoch=20, loss=math.nan, lr=1e-3,
        grad_norm=1.5, grads_finite=None, lr_groups=None, skipped=True, steps=1,
        layer_grad_norms=None, extra=None)
    [found] = replays.review(obs, _found(2))
    assert "the batch (step 2 of epoch 1)" in found.fields["replay_verdict"]


def test_healthy_is_a_transient_fault_naming_rank_host_and_device():
    replays, emitted, _ = _replays(ReplayOutcome(loss=0.5, grad_norm=1.25, healthy=True))
    found = replays.review(_obs(7), _found(7))
    assert [a.kind for a in found] == ["loss_nonfinite", "transient_fault"]
    fault = found[1]
    assert (fault.step, fault.value, fault.threshold) == (7, 1.25, None)
    assert "rank 3 (host " in fault.message and ", device 1)" in fault.message
    assert "see transient_fault" in found[0].fields["replay_verdict"]
    assert "replay_verdict" not in fault.fields        # it is the verdict
    assert emitted[0][1]["reproduced"] is False


def test_under_data_parallelism_the_fault_is_the_origin_ranks():
    replays, _, _ = _replays(ReplayOutcome(loss=0.5, grad_norm=1.25, healthy=True))
    found = [Anomaly("gradient_nonfinite", 7, math.nan, None, "gradients hold NaN",
                     origin_rank=1, origin_place=("node-b", 5))]
    fault = replays.review(_obs(7, loss=2.0), found)[-1]
    assert (fault.kind, fault.origin_rank, fault.origin_place) == (
        "transient_fault", 1, ("node-b", 5))
    assert "a transient fault on rank 1 (host node-b, device 5)" in fault.message


def test_different_but_anomalous_again_is_no_verdict():
    replays, _, _ = _replays(ReplayOutcome(loss=math.inf, grad_norm=2.0, healthy=False))
    [found] = replays.review(_obs(2), _found(2))
    assert found.fields["replay_verdict"].endswith(
        "failed again, though not bit-identically (loss nan then inf, gradient norm 1.5 then 2: "
        "dropout, or kernels that are not deterministic here): the batch (step 1 of epoch 1) or "
        "the model's state is the likely cause, not a transient fault")


def test_steps_not_withheld_are_never_replayed_nor_without_a_hook():
    replays, emitted, calls = _replays(ReplayOutcome(loss=1.0, grad_norm=1.0, healthy=True))
    assert replays.review(_obs(1, skipped=False), []) == [] and calls == [] == emitted
    none = Replays(replay=None, emit=lambda *a: None, rank=0, device=0)
    unreplayed = none.review(_obs(1), _found(1))[0]
    assert unreplayed.message == "loss is NaN" and unreplayed.fields == {}
    assert same(math.nan, math.nan) and same(None, None) and not same(1.0, None)


def test_a_process_without_a_device_is_named_by_its_host_alone():
    """The local rank is no device index on a CPU-only host: a real hardware sample of this
    host tells (no device listed, or the framework's memory on the CPU)."""
    from mindwatch.hardware.sampler import HardwareSampler, default_probes
    sampler = HardwareSampler(interval_s=60.0, on_sample=lambda sample: None,
                              **default_probes())
    record = sampler.sample_once().to_record()
    sampler.close()
    host = socket.gethostname()
    expected = 1 if record["devices"] else None        # this host: no NPU, no GPU driver
    replays = Replays(replay=lambda: ReplayOutcome(loss=0.5, grad_norm=1.25, healthy=True),
                      emit=lambda *a: None, rank=3, device=1, hardware=lambda: record)
    fault = replays.review(_obs(7), _found(7))[-1]
    assert fault.origin_place == (host, expected)
    assert f"a transient fault on rank 3 ({place_text(host, expected)}) is likely" \
        in fault.message
    assert place_text(host, None) == f"host {host}"
    # an accelerator's sample keeps the index; one whose framework trains on the CPU drops it
    gpu = {**record, "devices": [{"type": "gpu", "index": 1}], "framework_memory": None}
    assert device_shown(1, gpu) == 1
    assert device_shown(1, {**gpu, "framework_memory": {"device_target": "CPU"}}) is None
    assert device_shown(1, {"devices": [], "framework_memory": {"device_target": "Ascend"}}) == 1
    assert device_shown(1, None) == 1               # no sample yet: nothing known
