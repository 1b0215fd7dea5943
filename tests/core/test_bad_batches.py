"""The bad-batch ledger (decisions/bad_batches.py, contract 1.10) through the monitor, as an
adapter feeds it: a batch's fingerprint is its content's, whatever the order of its samples;
a withheld step's batch enters bad_batches.jsonl with its anomalies; a transient fault's never
does; a resumed run (or one given skip_batches) withholds a known batch by itself, with one
notice and no anomaly, and stops on the next new one."""
import io
import json

import numpy as np
import pytest

from mindwatch import Monitor, batch_fingerprint
from mindwatch.basics.batch_identity import fingerprint, host_numbers, identity
from mindwatch.decisions.bad_batches import KNOWN_BAD_BATCH, BadBatches
from mindwatch.observation import StepObservation
from mindwatch.runlog.bad_batches import read_ledger

RNG = np.random.default_rng(0)
GOOD = [RNG.standard_normal((8, 4)).astype(np.float32) for _ in range(6)]
POISONED = GOOD[2].copy()
POISONED[3] = np.nan


def _identity(batch, indices=None):
    return identity(host_numbers([batch, np.arange(len(batch))]), indices)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_fingerprint_is_the_contents_whatever_the_order_of_its_samples():
    batch = GOOD[0]
    shuffled = batch[RNG.permutation(len(batch))]
    assert fingerprint(host_numbers([batch])) == fingerprint(host_numbers([shuffled]))
    assert fingerprint(host_numbers([batch])) != fingerprint(host_numbers([GOOD[1]]))
    # poisoned with NaN, it still has one of its own, equal to itself, unlike a clean batch's
    assert fingerprint(host_numbers([POISONED])) == fingerprint(host_numbers([POISONED.copy()]))
    assert fingerprint(host_numbers([POISONED])) != fingerprint(host_numbers([GOOD[2]]))
    # float32 sums in another order (a device's reduction tree) round to the same digits
    numbers = host_numbers([batch])
    nudged = [value * (1 + 2e-7) for value in numbers]
    assert fingerprint(numbers) == fingerprint(nudged)
    # the public helper that finds a ledger's batch in the data: the same fingerprint
    assert batch_fingerprint(shuffled, np.arange(8)) == _identity(batch)["fingerprint"]
    assert batch_fingerprint(POISONED, np.arange(8)) == _identity(POISONED)["fingerprint"]


def _run(log_dir, batches, *, nan_at=(), known=(), **settings):
    """A protected loop as an adapter drives it: a known batch's update withheld before it is
    applied, a NaN step's withheld by its own verdict; stops when told to."""
    monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                      on_anomaly={"loss_nonfinite": "stop"}, **settings)
    steps = []
    for step, batch in enumerate(batches, start=1):
        batch_id = _identity(batch, indices=list(range(8 * step - 8, 8 * step)))
        is_known = monitor.bad_batches.known(batch_id) is not None
        loss = float("nan") if np.isnan(batch).any() else 1.0 / step
        found = monitor.observe(step=step, loss=loss, grad_norm=1.0, batch=batch_id,
                                skipped=is_known or not np.isfinite(loss),
                                skip_reason=KNOWN_BAD_BATCH if is_known else None)
        steps.append(step)
        if any(a.stops for a in found):
            break
    monitor.close()
    return steps


def test_a_stopped_batch_is_withheld_by_itself_when_the_run_comes_back(tmp_path):
    run = tmp_path / "run"
    assert _run(run, [GOOD[0], GOOD[1], POISONED, GOOD[3]]) == [1, 2, 3]
    [anomaly] = [r for r in _lines(run / "rank_0.jsonl") if r["kind"] == "anomaly"]
    assert anomaly["batch"] == {"fingerprint": _identity(POISONED)["fingerprint"],
                                "indices": list(range(16, 24))}
    [entry] = read_ledger(str(run / "bad_batches.jsonl"))
    assert {k: entry[k] for k in ("fingerprint", "indices", "step", "epoch", "kinds",
                                  "origin_rank", "reproduced")} == {
        "fingerprint": anomaly["batch"]["fingerprint"], "indices": list(range(16, 24)),
        "step": 3, "epoch": None, "kinds": ["loss_nonfinite"], "origin_rank": 0,
        "reproduced": None}
    # the run comes back with its data in another order, the bad batch at step 2 now, its
    # samples shuffled; a new bad batch after it
    second = GOOD[4].copy()
    second[0, 0] = np.nan
    shuffled = POISONED[RNG.permutation(8)]
    assert _run(run, [GOOD[3], shuffled, GOOD[5], second, GOOD[0]], resume=True) == \
        [1, 2, 3, 4]
    records = _lines(run / "rank_0.jsonl")
    segment = records[max(i for i, r in enumerate(records) if r["kind"] == "run"):]
    steps = {r["step"]: r for r in segment if r["kind"] == "step"}
    assert steps[2]["skipped"] is True and steps[2]["skip_reason"] == "known_bad_batch"
    assert "skip_reason" not in steps[4] and steps[4]["skipped"] is True
    # no anomaly and no stop for the known one, one notice; the new one stopped the run
    assert [(a["step"], a["anomaly"]) for a in segment if a["kind"] == "anomaly"] == \
        [(4, "loss_nonfinite")]
    said = [r["message"] for r in segment if r["kind"] == "notice" and "known bad" in
            r["message"]]
    assert len(said) == 1 and "bad at step 3: loss_nonfinite" in said[0]
    assert [e["step"] for e in read_ledger(str(run / "bad_batches.jsonl"))] == [3, 4]


def test_skip_batches_names_another_runs_ledger(tmp_path):
    _run(tmp_path / "first", [GOOD[0], POISONED])
    ledger = tmp_path / "first" / "bad_batches.jsonl"
    assert _run(tmp_path / "second", [POISONED, GOOD[1], GOOD[2]],
                skip_batches=str(ledger)) == [1, 2, 3]
    assert [r.get("skip_reason") for r in _lines(tmp_path / "second" / "rank_0.jsonl")
            if r["kind"] == "step"] == ["known_bad_batch", None, None]
    # without it (and without resume) nothing is known
    assert _run(tmp_path / "third", [POISONED, GOOD[1]]) == [1]


def test_a_transient_fault_never_enters_the_ledger(tmp_path):
    batches = BadBatches(log_dir=str(tmp_path), rank=0,
                         replayed=lambda step: {"step": step, "healthy": True})
    from mindwatch.anomaly import Anomaly
    obs = StepObservation(step=4, loss=float("nan"), skipped=True, batch=_identity(POISONED))
    found, said = batches.review(obs, [Anomaly("loss_nonfinite", 4, None, None, "nan")])
    assert said is None and found[0].fields["batch"] == _identity(POISONED)
    assert not (tmp_path / "bad_batches.jsonl").exists() and batches.entries == []


def test_a_replayed_failure_is_reproduced(tmp_path):
    batches = BadBatches(log_dir=str(tmp_path), rank=0,
                         replayed=lambda step: {"step": step, "healthy": False})
    from mindwatch.anomaly import Anomaly
    obs = StepObservation(step=4, loss=float("nan"), skipped=True, batch=_identity(POISONED))
    batches.review(obs, [Anomaly("loss_nonfinite", 4, None, None, "nan")])
    assert [e["reproduced"] for e in read_ledger(str(tmp_path / "bad_batches.jsonl"))] == [True]


def test_under_data_parallelism_the_reduced_gradients_name_no_rank_but_their_origin(
        tmp_path):
    """Two ranks, the reduced gradients NaN on both: without local norms (no origin_rank)
    only the rank whose own loss was bad enters its batch, the healthy rank's stays out;
    with them, the named rank's, whatever its loss."""
    from mindwatch.anomaly import Anomaly

    def entered(rank, kinds, origin=None):
        batches = BadBatches(log_dir=str(tmp_path / f"{rank}{origin}{len(kinds)}"),
                             rank=rank, world_size=2)
        found = [Anomaly(kind, 4, None, None, "nan") for kind in kinds]
        for anomaly in found:
            if anomaly.kind == "gradient_nonfinite":
                anomaly.origin_rank = origin
        obs = StepObservation(step=4, loss=1.0, skipped=True, batch=_identity(GOOD[rank]))
        batches.review(obs, found)
        return [e["kinds"] for e in batches.entries]
    assert entered(0, ["gradient_nonfinite"]) == []
    assert entered(1, ["loss_nonfinite", "gradient_nonfinite"]) == [
        ["gradient_nonfinite", "loss_nonfinite"]]
    assert entered(0, ["gradient_nonfinite"], origin=0) == [["gradient_nonfinite"]]
    assert entered(1, ["gradient_nonfinite"], origin=0) == []


def test_bad_ledgers_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="skip_batches: no file"):
        Monitor(str(tmp_path / "a"), stream=io.StringIO(), skip_batches=str(tmp_path / "x"))
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"fingerprint": "ab"}\n{"fingerp')          # a crash mid-line
    assert [e["fingerprint"] for e in read_ledger(str(torn))] == ["ab"]
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text('not json\n{"fingerprint": "ab"}\n')
    with pytest.raises(ValueError, match=r"garbage\.jsonl:1: not a bad-batch ledger line"):
        Monitor(str(tmp_path / "b"), stream=io.StringIO(), skip_batches=str(garbage))


def test_the_summary_names_the_bad_batches_and_how_to_be_rid_of_them(tmp_path, capsys):
    from mindwatch.cli import main

    run = tmp_path / "run"
    _run(run, [GOOD[0], GOOD[1], POISONED, GOOD[3]])
    assert main(["summary", str(run)]) == 1
    out = capsys.readouterr().out
    fingerprint_ = _identity(POISONED)["fingerprint"]
    assert "bad batches (bad_batches.jsonl): 1 batch; resume=True (or skip_batches= this " \
           "file) withholds them by themselves" in out
    assert f"step 3: loss_nonfinite, samples 16-23, batch {fingerprint_}" in out
    assert "to drop them from the data, leave out the samples named\n" in out
    assert main(["summary", "--json", str(run)]) == 1
    assert json.loads(capsys.readouterr().out)["bad_batches"][0]["fingerprint"] == fingerprint_


def test_without_sample_indices_the_summary_says_how_to_find_the_batch(tmp_path, capsys):
    """A MindSpore dataset gives no indices: the batch is found in the data by its content."""
    from mindwatch.cli import main

    run = tmp_path / "run"
    monitor = Monitor(str(run), stream=io.StringIO(), hardware_interval_s=None,
                      on_anomaly={"loss_nonfinite": "stop"})
    monitor.observe(step=1, loss=float("nan"), grad_norm=1.0, skipped=True,
                    batch=identity(host_numbers([POISONED])))
    monitor.close()
    assert main(["summary", str(run)]) == 1
    out = capsys.readouterr().out
    assert (f"step 1: loss_nonfinite, batch {batch_fingerprint(POISONED)}\n") in out
    assert "where none are, find the batch in the data's order by its content: " \
           "mindwatch.batch_fingerprint(*inputs) gives its fingerprint" in out


def test_the_report_names_the_bad_batches(tmp_path, capsys):
    from mindwatch.cli import main

    run = tmp_path / "run"
    _run(run, [GOOD[0], GOOD[1], POISONED, GOOD[3]])
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    section = page[page.index('<h2 id="bad-batches">Bad batches (1)</h2>'):]
    section = section[:section.index("</table>")]
    assert "withholds their updates by itself" in section
    cells = ["3", "None", "loss_nonfinite", "16-23", _identity(POISONED)["fingerprint"], "0",
             "none ran"]
    assert "".join(f"<td>{cell}</td>" for cell in cells) in section
    # a run without bad batches has no such section
    _run(tmp_path / "healthy", [GOOD[0], GOOD[1]])
    assert main(["report", str(tmp_path / "healthy")]) == 0
    assert "Bad batches" not in (tmp_path / "healthy" / "report.html").read_text()


def test_a_fault_the_lr_or_a_wrecked_state_explains_is_not_the_batchs(tmp_path):
    from mindwatch.anomaly import Anomaly

    batches = BadBatches(log_dir=str(tmp_path), rank=0)

    def step(number, kinds, skipped, batch):
        obs = StepObservation(step=number, loss=1.0, skipped=skipped, batch=_identity(batch))
        batches.review(obs, [Anomaly(kind, number, None, None, kind) for kind in kinds])

    step(5, ["lr_anomaly", "gradient_explode"], True, GOOD[0])    # the LR's, withheld
    step(10, ["lr_anomaly"], False, GOOD[1])                       # an absurd LR went in
    step(12, ["gradient_explode"], True, GOOD[2])                  # the state's, as likely
    step(70, ["loss_nonfinite"], True, POISONED)                   # long after: the batch's
    step(71, ["loss_rising"], True, GOOD[3])                       # no batch's kind
    assert [(e["step"], e["kinds"]) for e in batches.entries] == [(70, ["loss_nonfinite"])]


def test_a_ledger_that_cannot_be_written_costs_a_notice_not_the_run(tmp_path):
    (tmp_path / "bad_batches.jsonl").mkdir()            # where the file should be
    monitor = Monitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None,
                      on_anomaly={"loss_nonfinite": "skip"})
    for step, batch in enumerate([GOOD[0], POISONED, GOOD[1], POISONED], start=1):
        batch_id = _identity(batch)
        known = monitor.bad_batches.known(batch_id) is not None
        monitor.observe(step=step, loss=float("nan") if batch is POISONED else 1.0,
                        skipped=batch is POISONED, batch=batch_id,
                        skip_reason=KNOWN_BAD_BATCH if known else None)
    monitor.close()
    lines = _lines(tmp_path / "rank_0.jsonl")
    said = [r["message"] for r in lines if r["kind"] == "notice"]
    assert len(said) == 2 and "could not be written to" in said[0], said
    # still known to this run: step 4 withheld as the known batch, no anomaly
    assert "known bad one" in said[1]
    assert [(a["step"], a["anomaly"]) for a in lines if a["kind"] == "anomaly"] == \
        [(2, "loss_nonfinite")]
    assert lines[-1]["kind"] == "end" and lines[-1]["reason"] == "completed"
