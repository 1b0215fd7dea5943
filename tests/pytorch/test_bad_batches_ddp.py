"""Issue #46 end to end under DDP (two ranks under torchrun, gloo on the CPU), for the plain
loop, Hugging Face's Trainer and Lightning: a job stops on a poisoned batch, which enters
bad_batches.jsonl as its origin rank's; the job restarted in the same directory
(``resume=True``) with its data in another order withholds that batch by itself on both
ranks (``skip_reason: known_bad_batch``, one notice, no anomaly, no stop) and stops on the
next new one, the ledger's second line its origin rank's. The single-rank tests:
test_bad_batches_torch.py; the job resumed with its data in the same order, and the plain
loop's DistributedSampler: test_ddp.py."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from test_ddp import exit_statuses, torchrun  # noqa: E402

from torch_helpers import records  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torchrun")]


def segment_of(log_dir: Path, rank: int) -> list[dict]:
    """The last run segment's records of ``rank``."""
    found = records(log_dir, rank=rank)
    return found[max(i for i, r in enumerate(found) if r["kind"] == "run"):]


def ledger_of(log_dir: Path) -> list[dict]:
    return [json.loads(line) for line in
            (log_dir / "bad_batches.jsonl").read_text().splitlines()]


def known_then_new(found: list[dict], rank: int, known: int, new: int, *, first: int = 1,
                   origins: tuple[int, int] = (1, 0), named: bool = True) -> None:
    """A restarted job's segment on ``rank``: steps ``first`` to ``new``, the ``known``
    step withheld for its known bad batch (``origins[0]``'s: the notice of this rank's own
    batch there, another rank's elsewhere), the ``new`` one withheld as anomalous, whose
    anomalies alone are said (the loss's on its origin ``origins[1]`` only; the reduced
    gradients' on both, naming that rank where ``named``: DDP's local norms); the job
    stopped there."""
    steps = [r for r in found if r["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(first, new + 1)), rank
    assert [(s["step"], s.get("skip_reason")) for s in steps if s["skipped"]] == [
        (known, "known_bad_batch"), (new, None)], rank
    anomalies = [r for r in found if r["kind"] == "anomaly"]
    assert {a["step"] for a in anomalies} == {new}, rank
    kinds = {a["anomaly"] for a in anomalies}
    assert kinds == ({"loss_nonfinite", "gradient_nonfinite"} if rank == origins[1] else
                     {"gradient_nonfinite"}), (rank, kinds)
    gradient = next(a for a in anomalies if a["anomaly"] == "gradient_nonfinite")
    assert gradient.get("origin_rank") == (origins[1] if named else None), (rank, gradient)
    said = [r["message"] for r in found if r["kind"] == "notice" and "known bad" in
            r["message"]]
    assert len(said) == 1 and (f"step {known}: its update was withheld, its batch being"
                               if rank == origins[0] else
                               f"step {known}: its update was withheld on every rank, "
                               "another rank's batch") in said[0], (rank, said)
    (end,) = [r for r in found if r["kind"] == "end"]
    assert end["reason"] == "stopped", rank


def replicas_identical(log_dir: Path) -> bool:
    weights = [torch.load(log_dir / f"weights_rank{rank}.pt") for rank in (0, 1)]
    return all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_a_plain_loop_restarted_with_its_data_dealt_anew_withholds_the_known_batch(tmp_path):
    """Rank 1's poisoned batch (its 6th) stops the job at step 6: the ledger's line is rank
    1's. Restarted with resume=True, each rank's batches dealt in another order and each
    one's rows shuffled (ddp_trainer.DEALT), that batch comes at step 3: withheld on both
    ranks by itself (the shared verdict), no anomaly, no replay; rank 0's poisoned batch,
    which the first run never reached, stops the job at step 8 and enters the ledger as rank
    0's."""
    from ddp_trainer import DEALT, POISONED, fixed_batches

    from mindwatch.basics.batch_identity import fingerprint, host_numbers
    assert DEALT.index(POISONED[1]) + 1 == 3 and DEALT.index(POISONED[0]) + 1 == 8
    torchrun(tmp_path, "bad_batches_dealt", fails=True)
    [first] = ledger_of(tmp_path)
    assert (first["step"], first["origin_rank"]) == (6, 1)
    torchrun(tmp_path, "bad_batches_dealt", "resume", fails=True)
    assert exit_statuses(tmp_path) == ["42", "42"]
    for rank in (0, 1):
        found = segment_of(tmp_path, rank)
        known_then_new(found, rank, known=3, new=8)
        # the new step only computed again (a replay), never the known one
        assert [(r["step"], r["reproduced"]) for r in found if r["kind"] == "replay"] == [
            (8, True)], rank
    # the ledger: each poisoned batch once, its origin rank's line, named by its content
    # (the model's input x), whatever the order of its rows
    batches = {rank: fixed_batches(rank)[POISONED[rank]][0] for rank in (0, 1)}
    assert [(e["step"], e["origin_rank"], e["fingerprint"], e["indices"])
            for e in ledger_of(tmp_path)] == [
        (step, rank, fingerprint(host_numbers([batches[rank].numpy()])), None)
        for step, rank in ((6, 1), (8, 0))]
    (new,) = {a["batch"]["fingerprint"] for a in records(tmp_path, "anomaly", 0)
              if a["step"] == 8}
    assert new == ledger_of(tmp_path)[1]["fingerprint"]
    assert replicas_identical(tmp_path)


BAD_BATCH = Path(__file__).with_name("bad_batch_ddp.py")


def trainer_job(trainer: str, run: Path, *options: str, poisoned: tuple[int, ...]) -> None:
    """bad_batch_ddp.py's two ranks under ``trainer``, the ``poisoned`` samples' losses NaN
    wherever they come: the job stops (stop_exit_code)."""
    poisons = [word for sample in poisoned for word in ("--poison-sample", str(sample))]
    torchrun(trainer, run, f"{run}_out", *poisons, *options, script=BAD_BATCH, fails=True)


def forwards_of(run: Path, n: int, rank: int) -> list[list[int]]:
    """Each training forward's samples (found by content) of ``rank`` in the n-th job."""
    path = Path(f"{run}_out") / f"forwards{n}_rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def batch_of(found: list[dict], step: int) -> dict:
    """The batch the anomalies of ``step`` name (the same in each)."""
    (batch,) = {json.dumps(r["batch"]) for r in found if r["kind"] == "anomaly"
                and r["step"] == step}
    return json.loads(batch)


# HF's Trainer under DDP: accelerate shards the seeded sampler's batches (seed 0, batches of
# 4 a rank) over the ranks, rank r taking every other one from the r-th: the same
# permutation every run for the first epoch, 12 steps of the 96 samples
HF_ORDER = torch.randperm(96, generator=torch.Generator().manual_seed(0)).tolist()
HF_BATCHES = [HF_ORDER[i:i + 4] for i in range(0, 96, 4)]


def test_hf_trainer_restarted_with_its_epoch_over_again_withholds_the_known_batch(tmp_path):
    """Rank 1's poisoned sample stops the job at step 5 (rank 1's line, its own samples);
    the job restarted with resume=True from checkpoint-4, ignore_data_skip: the epoch starts
    over at step 5, so that batch comes at step 9, withheld on both ranks by itself; rank 0's
    poisoned sample, which the first job never reached, stops it at step 11, rank 0's line.
    The Trainer's DDP measures no local norm (mindwatch is handed the bare model): the
    gradients' anomaly names no rank, and the healthy rank's batch stays out of the ledger
    (the loss is each rank's own)."""
    run = tmp_path / "run"
    first, second = HF_BATCHES[2 * 4 + 1], HF_BATCHES[2 * 6]        # rank 1's 5th, rank 0's 7th
    poisoned = (first[0], second[0])
    trainer_job("hf", run, "--save-steps", "4", poisoned=poisoned)
    [entry] = ledger_of(run)
    assert (entry["step"], entry["origin_rank"], entry["indices"]) == (5, 1, first)
    trainer_job("hf", run, "--save-steps", "4", "--settings", '{"resume": true}',
                "--resume-from", f"{run}_out/checkpoint-4", "--ignore-data-skip",
                poisoned=poisoned)
    for rank in (0, 1):
        assert forwards_of(run, 1, rank) == HF_BATCHES[rank::2][:5], rank
        assert forwards_of(run, 2, rank) == HF_BATCHES[rank::2][:7], rank   # from step 5
        known_then_new(segment_of(run, rank), rank, known=9, new=11, first=5, named=False)
    # each step's batch is its rank's own: the ledger's lines, their origin ranks'
    stopped = records(run, "anomaly", 1)[:2]
    again = {rank: segment_of(run, rank) for rank in (0, 1)}
    assert batch_of(again[1], 11)["indices"] == HF_BATCHES[13]      # rank 1's own, healthy
    assert [(e["step"], e["origin_rank"], e["indices"], e["fingerprint"])
            for e in ledger_of(run)] == [
        (5, 1, first, batch_of(stopped, 5)["fingerprint"]),
        (11, 0, second, batch_of(again[0], 11)["fingerprint"])]
    assert batch_of(again[1], 11)["fingerprint"] != ledger_of(run)[1]["fingerprint"]
    assert replicas_identical(run)
    # the Trainer's own checkpoint of each stop
    assert all((Path(f"{run}_out") / f"checkpoint-{step}" / "trainer_state.json").exists()
               for step in (5, 11))


def test_lightning_ddp_with_each_ranks_batches_dealt_anew_withholds_the_known_batch(tmp_path):
    """Lightning's "ddp" strategy, each rank's loader a batch sampler of its own fixed
    batches (bad_batch_ddp.rank_buckets, as a bucketing sampler's) dealt in an order drawn
    with a seed. use_distributed_sampler=False: Lightning would otherwise put a
    DistributedSampler in the loader, which deals the samples to the ranks anew and so
    changes each batch's composition with the order: a batch known by its content is a
    batch kept whole. Seed 1 deals rank 1's poisoned batch 3rd: the job stops at step 3
    (rank 1's line); restarted with resume=True and seed 2, it comes 7th, withheld on both
    ranks by itself, and rank 0's, which seed 1 dealt 12th, stops the job at step 8."""
    from bad_batch_ddp import rank_buckets

    from mindwatch.basics.batch_identity import fingerprint, host_numbers
    run = tmp_path / "run"
    dealt = {(rank, seed): list(rank_buckets(rank, seed)) for rank in (0, 1) for seed in (1, 2)}
    fixed = {rank: rank_buckets(rank, 0).batches for rank in (0, 1)}
    bad = {1: fixed[1][6], 0: fixed[0][7]}

    def step_of(rank, seed):
        return [sorted(b) for b in dealt[rank, seed]].index(sorted(bad[rank])) + 1
    assert [step_of(1, 1), step_of(0, 1), step_of(1, 2), step_of(0, 2)] == [3, 12, 7, 8]
    poisoned = (bad[1][0], bad[0][0])
    trainer_job("lightning", run, "--bucket-seed", "1", poisoned=poisoned)
    [entry] = ledger_of(run)
    assert (entry["step"], entry["origin_rank"]) == (3, 1)
    trainer_job("lightning", run, "--bucket-seed", "2", "--settings", '{"resume": true}',
                poisoned=poisoned)
    for rank in (0, 1):
        assert forwards_of(run, 1, rank) == dealt[rank, 1][:3], rank
        assert forwards_of(run, 2, rank) == dealt[rank, 2][:8], rank
        known_then_new(segment_of(run, rank), rank, known=7, new=8)
    # the batch Lightning hands the callback, (x, y): its content, whatever its order
    x = torch.randn(96, 8, generator=torch.Generator().manual_seed(1))

    def content(samples):
        rows = x[samples]
        return fingerprint(host_numbers([rows.numpy(), (rows[:, :1] * 0.5).numpy()]))
    assert [(e["step"], e["origin_rank"], e["indices"], e["fingerprint"])
            for e in ledger_of(run)] == [
        (3, 1, dealt[1, 1][2], content(bad[1])), (8, 0, dealt[0, 2][7], content(bad[0]))]
    assert dealt[1, 1][2] != dealt[1, 2][6]             # the samples in another order
    assert replicas_identical(run)
    own = sorted(p.name for p in (run / "checkpoints").glob("lightning_*"))
    assert own == ["lightning_step3.ckpt", "lightning_step8.ckpt"]
