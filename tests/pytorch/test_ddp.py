"""Several ranks under torchrun (DDP, gloo on the CPU): one verdict for all, one stop for
all, the rank a gradient anomaly came from, replicas compared, replays together; a plain
loop, Hugging Face's Trainer and Lightning."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch_helpers import records  # noqa: E402

TRAINER = Path(__file__).with_name("ddp_trainer.py")
TRAINERS = Path(__file__).with_name("trainer_ddp.py")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torchrun")]


def torchrun(*args: str | Path, script: Path = TRAINER, fails: bool = False) -> None:
    """``script``'s two ranks under torchrun, its arguments ``args``; ``fails``: a rank
    exits with a status that is not 0 (``stop_exit_code``), and so does torchrun."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                "MASTER_PORT")}
    environment["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         f"--master_port={port}", str(script), *map(str, args)],
        env=environment, capture_output=True, text=True, timeout=240)
    assert (done.returncode != 0) == fails, done.stdout[-3000:] + done.stderr[-3000:]


def exit_statuses(log_dir: Path) -> list[str | None]:
    """What each rank's ``close`` exited with (ddp_trainer.py), None where it returned."""
    paths = [log_dir / f"exit_rank{rank}" for rank in (0, 1)]
    return [p.read_text() if p.exists() else None for p in paths]


def test_a_nan_on_one_rank_is_withheld_on_both_which_stop_together(tmp_path):
    torchrun(tmp_path, "nan_rank1", fails=True)
    assert exit_statuses(tmp_path) == ["42", "42"]        # stop_exit_code, on every rank
    for rank in (0, 1):
        steps = records(tmp_path, "step", rank)
        assert [s["step"] for s in steps] == list(range(1, 7)), rank
        assert [s["step"] for s in steps if s["skipped"]] == [6], rank
        anomalies = {a["anomaly"]: a for a in records(tmp_path, "anomaly", rank)}
        # the reduced gradients are NaN on both ranks: rank 1's own gradients were
        assert anomalies["gradient_nonfinite"]["origin_rank"] == 1, rank
        (end,) = records(tmp_path, "end", rank)
        assert end["reason"] == "stopped"
    assert "loss_nonfinite" in {a["anomaly"] for a in records(tmp_path, "anomaly", 1)}
    # DDP: the ranks hold the same state, so the job's report and checkpoint are rank 0's
    # alone, its report naming what each rank found (issue #43)
    assert sorted(os.listdir(tmp_path / "anomalies")) == ["step6_rank0.json", "step6_rank0.md"]
    assert os.listdir(tmp_path / "checkpoints") == ["anomaly_step6_rank0.ckpt"]
    for anomaly in records(tmp_path, "anomaly", 1):
        assert anomaly["report"] is None and anomaly["checkpoint"] is None, anomaly
        assert anomaly["message"].endswith("rank 0's (every rank holds the same training "
                                           "state)"), anomaly
    report = json.loads((tmp_path / "anomalies" / "step6_rank0.json").read_text())
    assert report["job"]["by_kind"] == {"loss_nonfinite": "1", "gradient_nonfinite": "0-1"}
    assert report["job"]["origin_rank"] == 1
    # each step record carries this rank's own norm before the reduction
    step5 = [records(tmp_path, "step", rank)[4] for rank in (0, 1)]
    assert step5[0]["local_grad_norm"] != step5[1]["local_grad_norm"]
    assert all(0 < s["local_grad_norm"] < 100 for s in step5)
    # the withheld update left both replicas identical
    weights = [torch.load(tmp_path / f"weights_rank{rank}.pt") for rank in (0, 1)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    # both ranks computed step 6 again, together (their all-reduces paired): the same NaN
    for rank in (0, 1):
        (replay,) = records(tmp_path, "replay", rank)
        assert (replay["step"], replay["reproduced"]) == (6, True), rank


def test_a_fault_that_does_not_come_back_on_one_rank_is_a_transient_fault_naming_it(tmp_path):
    torchrun(tmp_path, "transient_rank1", fails=True)       # gradient_nonfinite stopped it
    assert exit_statuses(tmp_path) == ["42", "42"]
    for rank in (0, 1):
        (replay,) = records(tmp_path, "replay", rank)
        assert (replay["step"], replay["reproduced"], replay["healthy"]) == (6, False, True)
        assert replay["grad_norm"] == "NaN" and 0 < replay["replay_grad_norm"] < 100
        faults = [a for a in records(tmp_path, "anomaly", rank)
                  if a["anomaly"] == "transient_fault"]
        # every rank names rank 1, whose own gradients went bad
        assert [(a["step"], a["origin_rank"]) for a in faults] == [(6, 1)], rank
    replays = [records(tmp_path, "replay", rank)[0] for rank in (0, 1)]
    assert replays[0]["replay_grad_norm"] == replays[1]["replay_grad_norm"]   # reduced alike


def test_a_replica_that_drifts_is_found_at_the_next_comparison(tmp_path):
    torchrun(tmp_path, "replica_rank1", fails=True)
    assert exit_statuses(tmp_path) == ["42", "42"]
    for rank in (0, 1):
        mismatches = [a for a in records(tmp_path, "anomaly", rank)
                      if a["anomaly"] == "replica_mismatch"]
        assert [a["step"] for a in mismatches] == [5], rank
        assert "rank 1" in mismatches[0]["message"]
        # checkpoint_and_stop by default: both ranks stop after the same step
        assert records(tmp_path, "step", rank)[-1]["step"] == 5


def test_a_communication_hook_of_the_users_own_keeps_its_place(tmp_path):
    torchrun(tmp_path, "own_comm_hook")
    for rank in (0, 1):
        steps = records(tmp_path, "step", rank)
        assert len(steps) == 12 and all("local_grad_norm" not in s for s in steps), rank
        notices = [n["message"] for n in records(tmp_path, "notice", rank)]
        assert any(n.startswith("local_grad_norm is not measured: the DDP model has a "
                                "communication hook of its own") for n in notices), notices


def test_a_signal_to_one_rank_of_a_plain_loop_stops_both_after_the_same_step(tmp_path):
    """A cause local to rank 1 (its own SIGTERM during step 6): the loop of docs/torch.md
    (observe, then stop_requested) stops both ranks after step 6; rank 0 learns of it in
    observe's exchange and exits 143, as a signal's stop does under stop_exit_code."""
    torchrun(tmp_path, "signal_rank1", fails=True)
    for rank in (0, 1):
        assert [s["step"] for s in records(tmp_path, "step", rank)] == list(range(1, 7)), rank
        (end,) = records(tmp_path, "end", rank)
        assert end["reason"] == "signal"
        assert end["stopped_by"] == {"anomaly": "signal", "step": 6, "rank": 1}
    (peer,) = [a for a in records(tmp_path, "anomaly", 0) if a["anomaly"] == "peer_stop"]
    assert peer["step"] == 6
    assert exit_statuses(tmp_path) == ["143", "preempted"]
    weights = [torch.load(tmp_path / f"weights_rank{rank}.pt") for rank in (0, 1)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_healthy_ranks_train_to_the_end_with_identical_replicas(tmp_path):
    torchrun(tmp_path, "none")
    assert exit_statuses(tmp_path) == [None, None]
    for rank in (0, 1):
        assert [s["step"] for s in records(tmp_path, "step", rank)] == list(range(1, 13))
        assert records(tmp_path, "anomaly", rank) == []
        (run,) = records(tmp_path, "run", rank)
        assert run["world_size"] == 2


@pytest.mark.parametrize("pipeline", ["HF Trainer", "Lightning"])
def test_under_a_trainer_a_nan_on_one_rank_stops_both_at_the_same_step(tmp_path, pipeline):
    from torch_conformance import BAD_STEP
    torchrun(pipeline, tmp_path / "run", tmp_path / "out", script=TRAINERS)
    for rank in (0, 1):
        steps = records(tmp_path / "run", "step", rank)
        assert [s["step"] for s in steps] == list(range(1, BAD_STEP + 1)), rank
        assert [s["step"] for s in steps if s["skipped"]] == [BAD_STEP], rank
        kinds = {a["anomaly"] for a in records(tmp_path / "run", "anomaly", rank)}
        assert "gradient_nonfinite" in kinds, rank
        (end,) = records(tmp_path / "run", "end", rank)
        assert end["reason"] == "stopped"
    assert "loss_nonfinite" in {a["anomaly"] for a in records(tmp_path / "run", "anomaly", 1)}
    # the trainer's DDP: one checkpoint of mindwatch's for the job, rank 0's (issue #43)
    ours = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("anomaly_*"))
    assert ours == [f"anomaly_step{BAD_STEP}_rank0.ckpt"]
    if pipeline == "Lightning":        # its DDP wrapper is the strategy's, reachable
        for rank in (0, 1):
            anomalies = {a["anomaly"]: a for a in records(tmp_path / "run", "anomaly", rank)}
            assert anomalies["gradient_nonfinite"]["origin_rank"] == 1, rank
        norms = [records(tmp_path / "run", "step", rank)[0]["local_grad_norm"]
                 for rank in (0, 1)]
        assert norms[0] != norms[1] and all(0 < n < 100 for n in norms)
    weights = [torch.load(tmp_path / "run" / f"weights_rank{rank}.pt") for rank in (0, 1)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    # the trainer's own checkpoint of the stop, written by both ranks together (rank 0's file)
    own = (tmp_path / "out" / f"checkpoint-{BAD_STEP}" / "trainer_state.json"
           if pipeline == "HF Trainer" else
           tmp_path / "run" / "checkpoints" / f"lightning_step{BAD_STEP}.ckpt")
    assert own.exists()


def test_a_known_bad_batch_on_one_rank_is_withheld_on_both_when_the_job_comes_back(tmp_path):
    """Rank 1's bad batch stops the job and enters the ledger (rank 1's line); the job
    resumed in the same directory withholds that step on both ranks by itself (the shared
    verdict carries that a rank's batch was a known one): no anomaly, no stop, no replay."""
    torchrun(tmp_path, "bad_batch_rank1", fails=True)
    [entry] = [json.loads(line) for line in
               (tmp_path / "bad_batches.jsonl").read_text().splitlines()]
    assert (entry["step"], entry["origin_rank"]) == (6, 1)
    torchrun(tmp_path, "bad_batch_rank1", "resume")
    for rank in (0, 1):
        found = records(tmp_path, rank=rank)
        found = found[max(i for i, r in enumerate(found) if r["kind"] == "run"):]
        steps = [r for r in found if r["kind"] == "step"]
        assert [s["step"] for s in steps] == list(range(1, 13)), rank
        assert [(s["step"], s.get("skip_reason")) for s in steps if s["skipped"]] == [
            (6, "known_bad_batch")], rank
        assert not [r for r in found if r["kind"] in ("anomaly", "replay")], rank
        said = [r["message"] for r in found if r["kind"] == "notice" and "known bad" in
                r["message"]]
        # rank 1's own batch is the ledger's; rank 0 withheld it for rank 1's
        assert len(said) == 1 and ("bad at step 6" if rank else "another rank's batch") in \
            said[0], (rank, said)
    assert exit_statuses(tmp_path) == ["42", "42"]      # the first run's, left as they were
    weights = [torch.load(tmp_path / f"weights_rank{rank}.pt") for rank in (0, 1)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_the_ledger_names_the_origin_ranks_own_samples(tmp_path):
    """A DataLoader over a DistributedSampler given to protect (data=): the bad sample's
    rank writes the ledger line, naming its own batch's dataset indices, as its sampler
    dealt them (computed here as DistributedSampler does: seed 0, epoch 0)."""
    torchrun(tmp_path, "bad_sample_loader", fails=True)
    order = torch.randperm(2 * 16 * 12, generator=torch.Generator().manual_seed(0)).tolist()
    place = order.index(373)                            # ddp_trainer.BAD_SAMPLE
    rank, step = place % 2, place // 2 // 16 + 1
    assert (rank, step) == (1, 5)
    own = order[rank::2][(step - 1) * 16:step * 16]
    [entry] = [json.loads(line) for line in
               (tmp_path / "bad_batches.jsonl").read_text().splitlines()]
    assert (entry["origin_rank"], entry["step"], entry["indices"]) == (rank, step, own)
