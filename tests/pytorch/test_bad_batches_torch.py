"""Issue #46 on PyTorch (contract 1.10): a plain loop protected with ``model=`` names the
batch of a stopped step (its fingerprint taken from the model's inputs by a forward pre-hook:
reading/batch.py), the step's batch enters bad_batches.jsonl, and the run resumed in the same
directory, its data in another order, withholds that batch's update by itself before it is
applied (``skip_reason: known_bad_batch``, the weights and optimizer state as they were, no
anomaly, one notice, no replay) and stops on the next new bad batch. Under gradient
accumulation the identity is the step's whole batch, whatever the order of its
micro-batches. Then Hugging Face's Trainer (with accumulation too, and resumed from one of
its checkpoints, its skipped batches or its epoch over again) and Lightning (its batches dealt
in another order), a process each (trainer_stop_script.py), whose ledgers name the bad
batch's samples as the trainer's loader fetched them; the plain loop's loader:
test_sample_indices_torch.py; DDP: tests/pytorch/test_ddp.py."""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.basics.batch_identity import fingerprint, host_numbers  # noqa: E402
from mindwatch.runlog.bad_batches import read_ledger  # noqa: E402
from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import bitwise_equal, records, snapshot, tiny_model  # noqa: E402

GENERATOR = torch.Generator().manual_seed(3)
GOOD = [(torch.randn(8, 8, generator=GENERATOR), torch.randn(8, 1, generator=GENERATOR))
        for _ in range(8)]


def poisoned(index, row=3):
    x, y = GOOD[index]
    x = x.clone()
    x[row, 2] = float("nan")
    return x, y


def shuffled(batch, seed=0):
    order = torch.randperm(len(batch[0]), generator=torch.Generator().manual_seed(seed))
    return batch[0][order], batch[1][order]


def host_fingerprint(*xs):
    """The model sees x (the loss takes y outside it): the batch is its x, as the host
    computes it (basics/batch_identity.py), the micro-batches' put together."""
    return fingerprint(host_numbers([np.concatenate([x.numpy() for x in xs])]))


def train(log_dir, steps, *, on_host=None, **settings):
    """The docs' loop, protected with model=; each step a list of micro-batches (gradient
    accumulation), each backpropagated through a closure (a withheld step is replayed), an
    evaluation forward between steps. Returns the steps run and the model and optimizer
    state after each."""
    model = tiny_model()
    monitor = TrainMonitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                           **settings)
    optimizer = monitor.protect(torch.optim.AdamW(model.parameters(), lr=1e-2), model=model)
    monitor.train_step.verdict_on_host = on_host
    after = {0: snapshot(model, optimizer)}
    for step, micro in enumerate(steps, start=1):
        share = 1.0 / len(micro)
        for x, y in micro:
            monitor.backward(lambda x=x, y=y, share=share:
                             nn.functional.mse_loss(model(x), y) * share)
        optimizer.step()
        optimizer.zero_grad()
        model.eval()                    # an evaluation's forward: no training batch
        with torch.no_grad():
            model(torch.randn(4, 8))
        model.train()
        monitor.observe(step=step)
        after[step] = snapshot(model, optimizer)
        if monitor.stop_requested:
            break
    monitor.close(exit=False)
    return list(after)[1:], after


def segment(log_dir):
    """The last run segment's records."""
    found = records(log_dir)
    return found[max(i for i, r in enumerate(found) if r["kind"] == "run"):]


@pytest.mark.parametrize("on_host", [None, False], ids=["cpu-way", "accelerator-way"])
def test_a_stopped_batch_is_withheld_by_itself_when_the_run_comes_back(tmp_path, on_host):
    run = tmp_path / "run"
    first = [[GOOD[0]], [GOOD[1]], [poisoned(2)], [GOOD[3]]]
    assert train(run, first, on_host=on_host)[0] == [1, 2, 3]
    # the NaN input makes the loss and the gradients non-finite: both name the batch
    kinds = ["gradient_nonfinite", "loss_nonfinite"]
    anomalies = records(run, "anomaly")
    assert sorted(a["anomaly"] for a in anomalies) == kinds
    assert {a["step"] for a in anomalies} == {3}
    assert len({json.dumps(a["batch"]) for a in anomalies}) == 1
    anomaly = anomalies[0]
    assert anomaly["batch"] == {"fingerprint": host_fingerprint(poisoned(2)[0]),
                                "indices": None}
    [entry] = read_ledger(str(run / "bad_batches.jsonl"))
    assert (entry["fingerprint"], entry["step"], entry["kinds"]) == (
        anomaly["batch"]["fingerprint"], 3, kinds)

    # the run comes back with its data in another order: the bad batch at step 2, its
    # samples shuffled; a new bad batch at step 4
    second = [[GOOD[3]], [shuffled(poisoned(2))], [GOOD[4]], [poisoned(5, row=0)], [GOOD[6]]]
    ran, after = train(run, second, on_host=on_host, resume=True)
    assert ran == [1, 2, 3, 4]
    assert bitwise_equal(after[1], after[2])         # step 2's update was never applied
    assert not bitwise_equal(after[2], after[3])     # step 3's was
    found = segment(run)
    steps = {r["step"]: r for r in found if r["kind"] == "step"}
    assert (steps[2]["skipped"], steps[2]["skip_reason"]) == (True, "known_bad_batch")
    assert [steps[s]["skipped"] for s in (1, 3, 4)] == [False, False, True]
    assert "skip_reason" not in steps[4]
    # no anomaly for the known batch: the new one's stopped the run, its batch named
    assert sorted((a["step"], a["anomaly"], a["batch"]["fingerprint"])
                  for a in found if a["kind"] == "anomaly") == [
        (4, kind, host_fingerprint(poisoned(5, row=0)[0])) for kind in kinds]
    said = [r["message"] for r in found
            if r["kind"] == "notice" and "known bad" in r["message"]]
    assert len(said) == 1 and "bad at step 3: gradient_nonfinite, loss_nonfinite" in said[0]
    assert anomaly["batch"]["fingerprint"] in said[0]
    assert [e["step"] for e in read_ledger(str(run / "bad_batches.jsonl"))] == [3, 4]


def test_under_gradient_accumulation_the_batch_is_the_steps_whole(tmp_path):
    """Two micro-batches a step: the identity is their union's, so the run resumed with the
    micro-batches in the other order (and shuffled within) meets the same batch."""
    run = tmp_path / "run"
    bad = [GOOD[2], poisoned(3)]
    assert train(run, [[GOOD[0], GOOD[1]], bad, [GOOD[4], GOOD[5]]])[0] == [1, 2]
    assert {a["batch"]["fingerprint"] for a in records(run, "anomaly")} == {
        host_fingerprint(GOOD[2][0], poisoned(3)[0])}
    again = [[shuffled(poisoned(3)), shuffled(GOOD[2], seed=1)], [GOOD[4], GOOD[5]],
             [GOOD[6], GOOD[7]]]
    ran, after = train(run, again, resume=True)
    assert ran == [1, 2, 3]
    assert bitwise_equal(after[0], after[1])
    steps = [r for r in segment(run) if r["kind"] == "step"]
    assert [s.get("skip_reason") for s in steps] == ["known_bad_batch", None, None]
    assert not [a for a in segment(run) if a["kind"] == "anomaly"]


def test_skip_batches_names_another_runs_ledger_and_a_healthy_run_writes_none(tmp_path):
    train(tmp_path / "first", [[GOOD[0]], [poisoned(1)]])
    ledger = tmp_path / "first" / "bad_batches.jsonl"
    assert json.loads(ledger.read_text().splitlines()[0])["step"] == 2
    ran, _ = train(tmp_path / "second", [[poisoned(1)], [GOOD[2]], [GOOD[3]]],
                   skip_batches=str(ledger))
    assert ran == [1, 2, 3]
    assert [s.get("skip_reason") for s in records(tmp_path / "second", "step")] == [
        "known_bad_batch", None, None]
    train(tmp_path / "healthy", [[GOOD[0]], [GOOD[1]]])
    assert not (tmp_path / "healthy" / "bad_batches.jsonl").exists()


def test_a_replays_forward_is_no_batch_of_the_next_step(tmp_path):
    """A withheld step is computed again (replay) on its own batch: that forward is left
    out, so the next step's batch is its own."""
    skip = {"loss_nonfinite": "skip", "gradient_nonfinite": "skip"}
    ran, _ = train(tmp_path, [[poisoned(1)], [poisoned(2)], [GOOD[3]]], on_anomaly=skip)
    assert ran == [1, 2, 3]
    assert [r["step"] for r in records(tmp_path, "replay")] == [1, 2]
    assert {(a["step"], a["batch"]["fingerprint"]) for a in records(tmp_path, "anomaly")} == {
        (1, host_fingerprint(poisoned(1)[0])), (2, host_fingerprint(poisoned(2)[0]))}
    # the second is a new batch, entered too; neither was withheld as a known one
    assert [e["step"] for e in read_ledger(str(tmp_path / "bad_batches.jsonl"))] == [1, 2]
    assert not [s for s in records(tmp_path, "step") if s.get("skip_reason")]


# -- under the trainers: each run a process of its own (trainer_stop_script.py) ---------------
SCRIPT = Path(__file__).with_name("trainer_stop_script.py")
POISONED_SAMPLE = 9         # every training forward whose batch holds it has a NaN loss


def trainer_run(trainer, run, *options, poisoned=(POISONED_SAMPLE,)):
    poisons = [word for sample in poisoned for word in ("--poison-sample", str(sample))]
    done = subprocess.run([sys.executable, str(SCRIPT), trainer, str(run), str(run) + "_out",
                           *poisons, *options],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    return done.returncode, done.stdout + done.stderr


def stopped_then_restarted(trainer, run, *options, again=(), poisoned=(POISONED_SAMPLE,)):
    """The run stopped by the bad sample's batch, then started again in the same directory
    with resume=True (from scratch, or as ``again`` says), its data the same unless
    ``again`` says otherwise. Returns the second's exit status and its segment's records."""
    status, said = trainer_run(trainer, run, *options, poisoned=poisoned)
    assert status == 42, said[-3000:]
    status, said = trainer_run(trainer, run, *options, *again, "--settings",
                               '{"resume": true}', poisoned=poisoned)
    return status, said, segment(run)


def forwards(run, n):
    """Each training forward's samples (found by content) in the n-th run in ``run``."""
    path = Path(str(run) + "_out") / f"forwards{n}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def anomalies_of(found):
    """The step and the batch of each anomaly among ``found``, once per step."""
    return sorted({(a["step"], json.dumps(a["batch"])) for a in found
                   if a["kind"] == "anomaly"})


def withheld_by_itself(found, step):
    steps = {r["step"]: r for r in found if r["kind"] == "step"}
    assert (steps[step]["skipped"], steps[step]["skip_reason"]) == (True, "known_bad_batch")
    assert [s for s, r in steps.items() if r.get("skip_reason")] == [step]
    said = [r["message"] for r in found if r["kind"] == "notice" and "known bad" in
            r["message"]]
    assert len(said) == 1 and f"step {step}: its update was withheld" in said[0]
    return steps


def test_hf_trainer_withholds_a_known_batch_when_the_run_comes_back(tmp_path):
    run = tmp_path / "run"
    status, said, found = stopped_then_restarted("hf", run)
    assert status == 0, said[-3000:]
    [entry] = read_ledger(str(run / "bad_batches.jsonl"))
    first = records(run)[:records(run).index(found[0])]
    assert {(a["step"], a["batch"]["fingerprint"]) for a in first
            if a["kind"] == "anomaly"} == {(entry["step"], entry["fingerprint"])}
    # the 10th batch of the Trainer's seeded permutation, as the model saw it
    assert entry["step"] == 10 and entry["indices"] == forwards(run, 1)[9]
    assert POISONED_SAMPLE in entry["indices"] and len(entry["indices"]) == 4
    steps = withheld_by_itself(found, entry["step"])
    assert sorted(steps) == list(range(1, 13))          # trained on to the last step
    assert not [a for a in found if a["kind"] == "anomaly"]
    assert [e["reason"] for e in records(run, "end")] == ["stopped", "completed"]


def test_hf_trainer_under_accumulation_knows_the_steps_whole_batch(tmp_path):
    """Two micro-batches a step: the same two again are the known batch; the bad sample in
    the next epoch, beside another micro-batch, is a new batch, which stops the run."""
    run = tmp_path / "run"
    status, said, found = stopped_then_restarted("hf", run, "--accumulate", "2")
    assert status == 42, said[-3000:]
    ledger = read_ledger(str(run / "bad_batches.jsonl"))
    assert [e["step"] for e in ledger] == [5, 10]
    assert ledger[0]["fingerprint"] != ledger[1]["fingerprint"]
    # a step's samples are its two micro-batches', in order: the first run's 9th and 10th
    # forwards, the second's 19th and 20th (the bad sample beside another micro-batch)
    first, second = forwards(run, 1), forwards(run, 2)
    assert ledger[0]["indices"] == first[8] + first[9]
    assert ledger[1]["indices"] == second[18] + second[19]
    assert POISONED_SAMPLE in ledger[1]["indices"] and len(ledger[1]["indices"]) == 8
    withheld_by_itself(found, 5)
    assert {(a["step"], a["batch"]["fingerprint"]) for a in found
            if a["kind"] == "anomaly"} == {(10, ledger[1]["fingerprint"])}


def test_lightning_withholds_a_known_batch_when_the_run_comes_back(tmp_path):
    run = tmp_path / "run"
    status, said, found = stopped_then_restarted("lightning", run)
    assert status == 0, said[-3000:]
    [entry] = read_ledger(str(run / "bad_batches.jsonl"))
    # the batch Lightning hands its callback, (x, y), samples 8 to 11 (batches of 4)
    x = torch.randn(48, 8, generator=torch.Generator().manual_seed(1))[8:12]
    assert (entry["step"], entry["fingerprint"]) == (
        3, fingerprint(host_numbers([x.numpy(), (x[:, :1] * 0.5).numpy()])))
    assert entry["indices"] == [8, 9, 10, 11]
    steps = withheld_by_itself(found, 3)
    assert sorted(steps) == list(range(1, 13))
    assert not [a for a in found if a["kind"] == "anomaly"]


# the Trainer's seeded sampler (accelerate's SeedableRandomSampler, seed 0): the same
# permutation of the 48 samples for the first epoch on every run, batches of 4
HF_ORDER = torch.randperm(48, generator=torch.Generator().manual_seed(0)).tolist()
HF_BATCHES = [HF_ORDER[i:i + 4] for i in range(0, 48, 4)]


def test_hf_resumed_from_a_checkpoint_skips_the_batches_trained_on_and_names_the_rest(tmp_path):
    """resume_from_checkpoint=checkpoint-4: the Trainer skips the epoch's first 4 batches
    in a new loader (get_resumed_dataloader), watched too; the known batch comes at its
    step again, withheld by itself; the next new one (a second bad sample, in the 11th
    batch) stops the run, its samples named."""
    run = tmp_path / "run"
    second = HF_BATCHES[10][0]
    assert HF_BATCHES[9].count(POISONED_SAMPLE) == 1
    status, said, found = stopped_then_restarted(
        "hf", run, "--save-steps", "4", poisoned=(POISONED_SAMPLE, second),
        again=("--resume-from", str(run) + "_out/checkpoint-4"))
    assert status == 42, said[-3000:]
    assert forwards(run, 1) == HF_BATCHES[:10]
    assert forwards(run, 2) == HF_BATCHES[4:11]        # the batches after checkpoint-4
    ledger = read_ledger(str(run / "bad_batches.jsonl"))
    assert [(e["step"], e["indices"]) for e in ledger] == [(10, HF_BATCHES[9]),
                                                          (11, HF_BATCHES[10])]
    steps = withheld_by_itself(found, 10)
    assert sorted(steps) == list(range(5, 12))
    assert [step for step, _ in anomalies_of(found)] == [11]
    assert json.loads(anomalies_of(found)[0][1])["indices"] == HF_BATCHES[10]


def test_hf_resumed_with_its_data_in_another_order_withholds_the_batch_at_its_new_step(
        tmp_path):
    """ignore_data_skip: the epoch starts over at step 5 (the same seeded permutation),
    so the bad batch, the 10th, comes at step 14: withheld by itself there; the next new
    one (a second bad sample, in the 12th batch, which the first run never reached) stops
    the run at step 16, its samples named."""
    run = tmp_path / "run"
    second = HF_BATCHES[11][0]
    status, said, found = stopped_then_restarted(
        "hf", run, "--save-steps", "4", "--max-steps", "16",
        poisoned=(POISONED_SAMPLE, second),
        again=("--resume-from", str(run) + "_out/checkpoint-4", "--ignore-data-skip"))
    assert status == 42, said[-3000:]
    assert forwards(run, 2) == HF_BATCHES            # the epoch over again, from step 5
    ledger = read_ledger(str(run / "bad_batches.jsonl"))
    assert [(e["step"], e["indices"]) for e in ledger] == [(10, HF_BATCHES[9]),
                                                          (16, HF_BATCHES[11])]
    steps = withheld_by_itself(found, 14)
    assert sorted(steps) == list(range(5, 17))
    assert [step for step, _ in anomalies_of(found)] == [16]


def test_lightning_with_its_batches_dealt_in_another_order_knows_the_batch_by_itself(
        tmp_path):
    """A batch sampler of fixed batches (a bucketing sampler's) dealt in an order drawn
    with a seed: the run restarted with another seed meets the bad batch at another step,
    its samples in another order, and withholds it by itself; a second bad sample, which
    the first run never reached, stops it. The indices are the batches' as dealt."""
    run = tmp_path / "run"
    # seed 1 deals the bad batch 4th and the second bad sample's 5th; seed 2, 9th and 12th
    status, said, found = stopped_then_restarted(
        "lightning", run, "--bucket-seed", "1", poisoned=(POISONED_SAMPLE, 30),
        again=("--bucket-seed", "2"))
    assert status == 42, said[-3000:]
    first, second = forwards(run, 1), forwards(run, 2)
    assert sorted(first[3]) == sorted(second[8]) and first[3] != second[8]
    ledger = read_ledger(str(run / "bad_batches.jsonl"))
    assert [(e["step"], e["indices"]) for e in ledger] == [(4, first[3]), (12, second[11])]
    assert POISONED_SAMPLE in first[3] and 30 in second[11]
    steps = withheld_by_itself(found, 9)
    assert sorted(steps) == list(range(1, 13))
    assert [step for step, _ in anomalies_of(found)] == [12]
    assert json.loads(anomalies_of(found)[0][1])["indices"] == second[11]


def test_a_compiled_model_given_to_protect_names_its_batches(tmp_path):
    """protect(model=compiled): the hook is the wrapper's, outside the compiled graph (the
    eager backend: the wrapper is the same, its compiling quick)."""
    model = tiny_model()
    compiled = torch.compile(model, backend="eager")
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None)
    optimizer = monitor.protect(torch.optim.AdamW(compiled.parameters()), model=compiled)
    for step, (x, y) in enumerate([GOOD[0], poisoned(1)], start=1):
        monitor.backward(nn.functional.mse_loss(compiled(x), y))
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close(exit=False)
    assert {(a["step"], a["batch"]["fingerprint"]) for a in records(tmp_path, "anomaly")} == {
        (2, host_fingerprint(poisoned(1)[0]))}


def test_a_known_batch_is_withheld_whatever_it_does_now_and_not_computed_again(tmp_path):
    """A batch another run's ledger names (a spike there) trains healthily here: withheld
    all the same, before it is applied, and not replayed (a replay would tell nothing, and
    a healthy one on a device that is not deterministic would pass for a transient fault)."""
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(json.dumps({"fingerprint": host_fingerprint(GOOD[1][0]), "step": 7,
                                  "kinds": ["loss_spike"]}) + "\n")
    ran, after = train(tmp_path / "run", [[GOOD[0]], [GOOD[1]], [GOOD[2]]],
                       skip_batches=str(ledger))
    assert ran == [1, 2, 3] and bitwise_equal(after[1], after[2])
    assert [s.get("skip_reason") for s in records(tmp_path / "run", "step")] == [
        None, "known_bad_batch", None]
    assert not records(tmp_path / "run", "replay")
    assert not records(tmp_path / "run", "anomaly")
    [said] = [r["message"] for r in records(tmp_path / "run", "notice")
              if "known bad" in r["message"]]
    assert "bad at step 7: loss_spike" in said


def test_a_loop_that_knows_its_samples_names_them(tmp_path):
    """A plain loop with its own sampler gives the step's indices (``batch_indices``): the
    anomaly and the ledger name the samples beside the fingerprint."""
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None)
    optimizer = monitor.protect(torch.optim.AdamW(model.parameters(), lr=1e-2), model=model)
    for step, (x, y) in enumerate([GOOD[0], poisoned(1)], start=1):
        monitor.backward(lambda x=x, y=y: nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step, batch_indices=range(8 * step - 8, 8 * step))
        if monitor.stop_requested:
            break
    monitor.close(exit=False)
    [anomaly] = [r for r in records(tmp_path) if r["kind"] == "anomaly"][:1]
    assert anomaly["batch"] == {"fingerprint": host_fingerprint(poisoned(1)[0]),
                                "indices": list(range(8, 16))}
    assert [e["indices"] for e in read_ledger(str(tmp_path / "bad_batches.jsonl"))] == \
        [list(range(8, 16))]


def test_the_hooks_numbers_are_the_hosts_for_every_kind_of_input():
    """Token ids (int64, above float32's exact integers too), a bool mask, int8, and float
    inputs with NaN and Inf: the forward pre-hook's fingerprint is host_numbers' (the
    integers' values taken in float32 as the host takes them)."""
    from mindwatch.torch.reading.batch import BatchReading

    model = nn.Linear(1, 1)
    reading = BatchReading(model, model)
    generator = torch.Generator().manual_seed(5)
    floats = torch.randn(4, 6, generator=generator)
    floats[1, 2], floats[3, 0] = float("nan"), float("inf")
    inputs = [torch.randint(0, 50_000, (4, 16), generator=generator),
              torch.tensor([[2 ** 24 + 1, -(2 ** 31)]], dtype=torch.int64),
              torch.rand(4, 16, generator=generator) > 0.5,
              torch.randint(-100, 100, (4, 3), generator=generator, dtype=torch.int8),
              floats, floats.to(torch.float64)]
    for tensors in ([inputs[0]], inputs):
        reading._add(list(tensors), 4)
        batch = reading.take()
        assert batch.identity()["fingerprint"] == fingerprint(
            host_numbers([t.numpy() for t in tensors])), [t.dtype for t in tensors]
