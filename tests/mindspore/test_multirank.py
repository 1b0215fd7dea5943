"""Two real ranks under msrun on the CPU: one log each, one stop for all, stragglers.

The scenarios that end by themselves run one after another in one msrun job (one cluster
start-up for all: ``job``); each test reads its own scenario's run. Each test has a hard
timeout, so a hang fails fast instead of blocking CI."""
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from multirank_trainer import HANG_TIMEOUT_S, SLOWDOWN_STEP, STALL_STEP
from test_overheat_e2e import heating_npu_smi

from bad_batch_scenario import BAD_STEP, NEW_BAD_STEP
from mindwatch import batch_fingerprint
from mindwatch.runlog import read_rank_log, read_run
from ms_helpers import regression_arrays
from msrun_env import assert_ranks_ran_this_mindspore, free_port, msrun_environment
from webhook_service import Webhook

# the first test of the job waits for the whole job (a few minutes on a loaded host)
pytestmark = [pytest.mark.msrun, pytest.mark.timeout(420)]
HERE = Path(__file__).resolve().parent
TRAINER = HERE / "multirank_trainer.py"
# The job's scenarios, in this order; every one ends by itself (the SIGTERM tests' "long"
# is ended by its test, in a job of its own).
SCENARIOS = ["healthy", "nudge_rank1", "nan_rank1", "spike_rank1_skip", "spike_rank1_rewind",
             "overheat_rank0", "hang_rank1", "straggler_rank1", "slowdown_rank1",
             "loop_signal_rank1", "bad_batch_rank1", "bad_batch_rank1_again",
             "bad_batch_fit_rank1", "bad_batch_fit_rank1_again", "bad_batch_loop_rank1",
             "bad_batch_loop_rank1_again"]


def _msrun_command(root, *scenarios):
    return [sys.executable, "-m", "mindspore.parallel.cluster.run", "--worker_num=2",
            "--local_worker_num=2", f"--master_port={free_port()}",
            f"--log_dir={root / 'msrun_logs'}", "--join=True", str(TRAINER), str(root),
            *scenarios]


def _wait_for_steps(process, log_dir, *, ranks, steps, timeout=120):
    """The worker pids (from each rank's run record) once every rank logged ``steps``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        paths = [log_dir / f"rank_{rank}.jsonl" for rank in range(ranks)]
        if all(p.exists() and p.read_bytes().count(b'"kind":"step"') >= steps for p in paths):
            return [read_rank_log(str(p)).run["pid"] for p in paths]
        if process.poll() is not None:
            raise AssertionError(f"msrun ended early:\n{process.stderr.read()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"the ranks never logged {steps} steps each")


def _wait_for_ends(process, log_dir, *, ranks, timeout=120):
    """Until every rank's log holds its ``end`` record (or msrun ends). msrun itself takes
    ~25 s more to notice a worker that died of a signal and tear the job down, which the
    caller does not wait for."""
    deadline = time.monotonic() + timeout
    paths = [log_dir / f"rank_{rank}.jsonl" for rank in range(ranks)]
    while time.monotonic() < deadline and process.poll() is None:
        if all(p.exists() and b'"kind":"end"' in p.read_bytes() for p in paths):
            return
        time.sleep(0.05)


class Job:
    """The msrun job of SCENARIOS: its root folder, msrun's result, the webhook's posts."""

    def __init__(self, root, result, posts):
        self.root, self.result, self.posts = root, result, posts

    def said(self):
        logs = "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in sorted((self.root / "msrun_logs").glob("worker_*.log")))
        return f"msrun: exit status {self.result.returncode}\n{self.result.stderr[-3000:]}\n{logs}"


@pytest.fixture(scope="module")
def job(tmp_path_factory, npu_smi_fixtures):
    """Every scenario of SCENARIOS in one msrun job of two ranks. Rank 0's npu-smi is a fake
    one whose card heats up (read by overheat_rank0 alone: the others sample no hardware),
    and overheat_rank0 alone posts its alerts to a webhook service."""
    root = tmp_path_factory.mktemp("multirank")
    fake = root / "fake_npu"
    fake.mkdir()
    heating_npu_smi(fake, npu_smi_fixtures)
    hook = Webhook()
    try:
        result = subprocess.run(_msrun_command(root, *SCENARIOS),
                                env=msrun_environment(FAKE_NPU_DIR=str(fake),
                                                      ALERT_WEBHOOK=hook.url),
                                capture_output=True, text=True, timeout=400, cwd=root)
    finally:
        hook.close()
    return Job(root, result, hook.posts)


def msrun(job, scenario):
    """``scenario``'s run log and the folder of the weights its ranks ended with, once both
    ranks finished it."""
    where = job.root / scenario
    assert all((where / f"done_rank{rank}").exists() for rank in (0, 1)), job.said()
    run = read_run(str(where / "run"))
    assert [log.rank for log in run.ranks] == [0, 1]
    assert_ranks_ran_this_mindspore(run)
    return run, where / "out"


def test_the_job_ran_every_scenario_and_ended_cleanly(job):
    assert job.result.returncode == 0, job.said()
    for scenario in SCENARIOS:
        if scenario.endswith("_again"):         # written into its first run's directory
            assert all((job.root / scenario / f"done_rank{rank}").exists()
                       for rank in (0, 1)), job.said()
        else:
            msrun(job, scenario)


def same_weights_on_both_ranks(out):
    """Asserts that both ranks ended with identical weights (data parallel), bit for bit;
    returns rank 0's, by name."""
    weights = [np.load(out / f"weights_rank{r}.npz") for r in (0, 1)]
    assert weights[0].files == weights[1].files
    for name in weights[0].files:
        assert np.array_equal(weights[0][name], weights[1][name]), name
    return {name: weights[0][name] for name in weights[0].files}


def test_healthy_two_ranks_agree(job):
    run, out = msrun(job, "healthy")
    first, second = run.ranks
    assert first.run["world_size"] == second.run["world_size"] == 2
    assert [s["step"] for s in first.steps] == [s["step"] for s in second.steps] == \
        list(range(1, 25))
    # The norm is measured on the reduced gradients: identical on both ranks.
    assert [s["grad_norm"] for s in first.steps] == [s["grad_norm"] for s in second.steps]
    assert [s["loss"] for s in first.steps] != [s["loss"] for s in second.steps]  # own data
    assert first.end["reason"] == second.end["reason"] == "completed"
    assert not run.anomalies
    same_weights_on_both_ranks(out)


def test_a_replica_nudged_on_one_rank_is_a_mismatch_that_stops_both(job):
    """One weight element moved on rank 1 before step 6; the replicas are compared every 4
    steps (healthy at 4): at step 8 both ranks find rank 1 differing from rank 0 in that
    weight, and stop; only rank 0, the side kept, writes the checkpoint."""
    run, _ = msrun(job, "nudge_rank1")
    name = "inp.weight"
    for log in run.ranks:
        assert [s["step"] for s in log.steps] == list(range(1, 9)), log.rank
        assert log.end["reason"] == "stopped"
        [found] = log.anomalies
        assert (found["anomaly"], found["step"], found["value"]) == ("replica_mismatch", 8, 1.0)
        assert found["message"] == (
            f"rank 1's weights and optimizer state differ from rank 0's at step 8 (first in "
            f"{name}); with two ranks the majority is unknown: rank 0's are kept")
    first, second = (log.anomalies[0] for log in run.ranks)
    assert first["actions"] == ["checkpoint", "stop"] and os.path.exists(first["checkpoint"])
    assert second["actions"] == ["stop"] and second["checkpoint"] is None


def test_nan_on_one_rank_stops_both_after_the_same_step(job):
    run, out = msrun(job, "nan_rank1")
    first, second = run.ranks
    assert [s["step"] for s in first.steps] == [s["step"] for s in second.steps] == \
        [1, 2, 3, 4, 5]
    assert first.end["reason"] == second.end["reason"] == "stopped"
    kinds = {log.rank: {a["anomaly"] for a in log.anomalies} for log in run.ranks}
    assert "loss_nonfinite" in kinds[1]
    assert kinds[0] & {"gradient_nonfinite", "peer_stop"}   # the reduced gradient is NaN
    for log in run.ranks:
        assert all(a["step"] == 5 for a in log.anomalies)
    # DATA_PARALLEL: the ranks hold the same state, so the job's report and checkpoint are
    # rank 0's alone (issue #43); rank 1 logs its findings, naming them rank 0's
    root = job.root / "nan_rank1" / "run"
    assert sorted(os.listdir(root / "checkpoints")) == ["anomaly_step5_rank0.ckpt"]
    reports = os.listdir(root / "anomalies")
    assert reports and all(name.startswith("step5_rank0") for name in reports), reports
    assert all(a["report"] is None and a["checkpoint"] is None for a in second.anomalies)
    assert all(a["message"].endswith("rank 0's (every rank holds the same training state)")
               for a in second.anomalies)
    with open(next(a["report"] for a in first.anomalies if a["report"])) as handle:
        assert json.load(handle)["job"]["by_kind"]["loss_nonfinite"] == "1"
    # The bad update was withheld on both ranks, which still hold identical weights.
    for array in same_weights_on_both_ranks(out).values():
        assert np.isfinite(array).all()
    # Each rank's own gradient norm, before the reduction, in every step record; the
    # reduced gradients' anomaly names rank 1, its host and device, on both ranks.
    local = {log.rank: {s["step"]: s["local_grad_norm"] for s in log.steps} for log in run.ranks}
    assert all(math.isfinite(v) for step, v in local[1].items() if step < 5)
    assert math.isfinite(local[0][5]) and math.isnan(local[1][5])
    for log in run.ranks:
        [grads] = [a for a in log.anomalies if a["anomaly"] == "gradient_nonfinite"]
        # trained on the CPU: no device to name (on Ascend, its local rank's)
        assert (grads["origin_rank"], grads["origin_host"], grads["origin_device"]) == (
            1, socket.gethostname(), None), log.rank
        assert f"it came from rank 1 (host {socket.gethostname()}):" in grads["message"]
        # computed again on both ranks together: rank 1's batch fails the same way
        [replay] = log.of_kind("replay")
        assert (replay["step"], replay["reproduced"]) == (5, True), log.rank


def test_a_loss_spike_on_one_rank_is_skipped_on_every_rank(job):
    run, out = msrun(job, "spike_rank1_skip")
    first, second = run.ranks
    for log in run.ranks:
        assert [s["step"] for s in log.steps if s["skipped"]] == [15], log.rank
        assert log.end["reason"] == "completed" and len(log.steps) == 24
    [spike] = [a for a in second.anomalies if a["anomaly"] == "loss_spike"]
    assert spike["step"] == 15 and spike["actions"] == ["skip"]
    assert not [a for a in first.anomalies if a["anomaly"] == "loss_spike"]
    same_weights_on_both_ranks(out)


def test_a_loss_spike_on_one_rank_rewinds_every_rank_to_the_same_snapshot(job):
    run, out = msrun(job, "spike_rank1_rewind")
    first, second = run.ranks
    for log in run.ranks:
        [rewind] = log.of_kind("rewind")
        assert (rewind["step"], rewind["to_step"], rewind["anomaly"], rewind["origin_rank"]) \
            == (15, 10, "loss_spike", 1), log.rank
        assert log.end["reason"] == "completed" and len(log.steps) == 24
    [spike] = [a for a in second.anomalies if a["anomaly"] == "loss_spike"]
    assert spike["step"] == 15 and spike["actions"] == ["rewind"]
    # The reduced gradient spikes on both ranks (grad_spike, warn); the loss on rank 1 only.
    assert not [a for a in first.anomalies if a["anomaly"] == "loss_spike"]
    # Both ranks went back to the same state and trained on in step: identical weights.
    same_weights_on_both_ranks(out)


def test_overheat_on_rank0_stops_rank1_too(job):
    run, _ = msrun(job, "overheat_rank0")
    first, second = run.ranks
    overheat = [a for a in first.anomalies if a["anomaly"] == "overheat"]
    assert len(overheat) == 1 and overheat[0]["value"] == 90.0
    [peer] = [a for a in second.anomalies if a["anomaly"] == "peer_stop"]
    assert "rank 0" in peer["message"] and "overheat" in peer["message"]
    assert peer["step"] == overheat[0]["step"]
    assert first.steps[-1]["step"] == second.steps[-1]["step"] == peer["step"] < 200
    assert first.end["reason"] == second.end["reason"] == "stopped"
    assert second.end["stopped_by"] == {"anomaly": "overheat", "step": peer["step"], "rank": 0}
    # the ranks hold the same state: rank 0's checkpoint is the job's, rank 1 writes none
    assert os.path.exists(overheat[0]["checkpoint"]) and peer["checkpoint"] is None
    assert peer["report"] is None and "rank 0's" in peer["message"]
    # One stop, told once: by rank 0, which found it; rank 1 only followed (each rank closed
    # its run log after draining its alerts, so every post has arrived).
    assert [(p["body"]["event"], p["body"]["rank"], p["body"]["anomaly"]) for p in job.posts] \
        == [("anomaly", 0, "overheat"), ("end", 0, "overheat")]


def test_a_rank_stalled_in_its_data_source_hangs_both_and_summary_names_them(job):
    run, _ = msrun(job, "hang_rank1")
    for log in run.ranks:
        [hang] = log.anomalies
        # Rank 1 waits for its batch, rank 0 for rank 1 in the step's collective.
        assert hang["anomaly"] == "hang" and hang["step"] == STALL_STEP - 1, log.rank
        assert hang["threshold"] == HANG_TIMEOUT_S and hang["value"] >= HANG_TIMEOUT_S
        assert hang["where"] and log.end["reason"] == "completed" and len(log.steps) == 12
    assert "__next__ (iterators.py:" in run.ranks[1].anomalies[0]["where"]
    report = (job.root / "hang_rank1" / "run" / "anomalies" / f"hang_step{STALL_STEP - 1}_rank1.md")
    assert "in a_data_source_that_stalls" in report.read_text()
    summary = subprocess.run([sys.executable, "-m", "mindwatch.cli", "summary",
                              str(job.root / "hang_rank1" / "run")], capture_output=True, text=True,
                             timeout=60)
    assert summary.returncode == 1
    # the job's answer: one hang of the job at one step, found on both ranks, is one
    # anomaly, and it names the rank the job waits for (issue #44), from the heartbeats
    assert summary.stdout.splitlines()[0].endswith(": 1 ANOMALY, HUNG ON RANK 1")
    [hung] = [line for line in summary.stdout.splitlines() if line.startswith("  hung: ")]
    assert hung.startswith(f"  hung: after step {STALL_STEP - 1}: the job waits for rank 1 "
                           f"(host {socket.gethostname()}): in its data loader before step "
                           f"{STALL_STEP}: "), hung
    assert hung.endswith(f"; 1 rank (0) waits in step {STALL_STEP} (the step's collectives)")
    assert run.ranks[0].anomalies[0]["origin_rank"] == 1
    assert [log.anomalies[0]["answered_by"] for log in run.ranks] == [0, 0]


def test_slow_data_pipeline_rank_is_a_straggler(job):
    run, _ = msrun(job, "straggler_rank1")
    first, second = run.ranks
    stragglers = [a for a in second.anomalies if a["anomaly"] == "straggler"]
    assert len(stragglers) == 1 and stragglers[0]["actions"] == ["warn"]
    assert f"rank 1 (host {socket.gethostname()}) is a straggler" in stragglers[0]["message"]
    assert stragglers[0]["cause"] == "data"
    # The 100 ms sleep partly overlaps the step (the dataset prefetches in its own thread,
    # measured 9-60 ms left); what is left still dwarfs rank 0's wait for its batch.
    from statistics import median
    fast = median(s["data_time_s"] for s in first.steps[1:])
    assert stragglers[0]["value"] > 2 * fast
    assert not [a for a in first.anomalies if a["anomaly"] == "straggler"]
    assert first.end["reason"] == second.end["reason"] == "completed"
    assert [s["step"] for s in second.steps] == list(range(1, 41))


def test_a_rank_whose_input_slows_down_is_named_by_every_rank(job):
    """From SLOWDOWN_STEP rank 1's batches take SLOWDOWN_S: both ranks' steps slow down (rank 0
    waits in the all-reduce, as compute time), and both name rank 1's data time."""
    run, _ = msrun(job, "slowdown_rank1")
    for log in run.ranks:
        drops = [a for a in log.anomalies if a["anomaly"] == "throughput_drop"]
        # one episode, or two when a fast stretch of rank 1's prefetching ends the first
        assert 1 <= len(drops) <= 2 and all(d["cause"] == "data" for d in drops), drops
        drop = drops[0]
        assert drop["cause"] == "data" and drop["ranks"] == [1], drop
        # the generator runs a batch ahead of the step (prefetch 1), then half of the
        # window of 8 must be slow
        assert SLOWDOWN_STEP + 3 <= drop["step"] <= SLOWDOWN_STEP + 20
        assert drop["value"] > drop["threshold"] and "rank 1" in drop["message"]
        assert log.end["reason"] == "completed"
    late = [s for s in run.ranks[0].steps if s["step"] > SLOWDOWN_STEP + 2]
    assert max(s["data_time_s"] for s in late) < 0.05         # rank 0's own input is fast


@pytest.mark.parametrize("targets", [(1,), (0, 1)], ids=["rank1-only", "every-rank"])
def test_sigterm_stops_every_rank_after_the_same_step(tmp_path, targets):
    log_dir = tmp_path / "long" / "run"
    process = subprocess.Popen(_msrun_command(tmp_path, "long"),
                               env=msrun_environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                               start_new_session=True)
    try:
        pids = _wait_for_steps(process, log_dir, ranks=2, steps=5)
        for rank in targets:                    # a scheduler signals every task; or one dies
            os.kill(pids[rank], signal.SIGTERM)
        _wait_for_ends(process, log_dir, ranks=2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # msrun and any worker still there
        process.communicate(timeout=30)
    run = read_run(str(log_dir))
    ends = [log.end for log in run.ranks]
    assert all(end is not None for end in ends), [log.records[-2:] for log in run.ranks]
    assert [end["reason"] for end in ends] == ["signal", "signal"]
    assert ends[0]["steps"] == ends[1]["steps"]           # the same step on every rank
    step = ends[0]["steps"]
    for log in run.ranks:
        assert log.steps[-1]["step"] == step
        # Both signalled: a rank whose own signal came after the other's was agreed on
        # follows it (a race the scheduler decides), so either rank may be named.
        stopped_by = log.end["stopped_by"]
        assert stopped_by in [{"anomaly": "signal", "step": step, "rank": r} for r in targets]
        if stopped_by["rank"] != log.rank:
            assert "peer_stop" in [a["anomaly"] for a in log.anomalies]
    # the ranks hold the same state: the signal's checkpoint is rank 0's, though only rank
    # 1 was signalled (issue #43)
    signalled = log_dir / "checkpoints" / f"signal_step{step}_rank0.ckpt"
    assert signalled.exists()
    if targets == (1,):
        [peer] = [a for a in run.ranks[0].anomalies if a["anomaly"] == "peer_stop"]
        assert peer["step"] == step and peer["actions"] == ["checkpoint", "stop"]
        assert peer["checkpoint"] == str(signalled)
        assert not (log_dir / "checkpoints" / f"signal_step{step}_rank1.ckpt").exists()


def test_a_custom_loop_stops_every_rank_after_the_step_one_rank_was_signalled(job):
    """docs/pipelines.md's loop (jit_step, observe, stop_requested): rank 1's own SIGTERM
    during step 20 stops both ranks after step 20, as under Model.train; rank 0 learns of it
    in observe's exchange (before, it trained on into step 21's collective and hung there)."""
    from custom_loop_scenario import SIGNAL_STEP
    run, out = msrun(job, "loop_signal_rank1")
    for log in run.ranks:
        assert log.steps[-1]["step"] == SIGNAL_STEP, log.rank
        assert log.end["reason"] == "signal" and log.end["steps"] == SIGNAL_STEP
        assert log.end["stopped_by"] == {"anomaly": "signal", "step": SIGNAL_STEP, "rank": 1}
    [peer] = [a for a in run.ranks[0].anomalies if a["anomaly"] == "peer_stop"]
    assert peer["step"] == SIGNAL_STEP and "rank 1" in peer["message"]
    # the signal took its course on rank 1 alone, once its run was on disk
    assert [(out / f"interrupted_rank{r}").read_text() for r in (0, 1)] == ["False", "True"]
    same_weights_on_both_ranks(out)


def _segments(path):
    """A rank log's records, one list per run segment."""
    found = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == "run":
            found.append([])
        found[-1].append(record)
    return found


def _batch_fingerprint(rank, step):
    x, y = regression_arrays(8 * 12, seed=rank, nan_at=step)
    return batch_fingerprint(x[8 * step - 8: 8 * step], y[8 * step - 8: 8 * step])


@pytest.mark.parametrize("first", ["bad_batch_rank1", "bad_batch_fit_rank1",
                                   "bad_batch_loop_rank1"], ids=["train", "fit", "loop"])
def test_a_bad_batch_of_one_rank_is_withheld_on_every_rank_when_the_job_comes_back(job, first):
    """Issue #46 under data parallelism (Model.train, Model.fit, the functional loop: the
    scenarios of bad_batch_scenario.py): rank 1's NaN batch stops the job and enters the
    ledger as rank 1's; the job started again in that directory (resume=True), its data in
    another order, withholds the batch's update on both ranks by itself (the ranks'
    exchange counts the rank that withheld it on purpose: no anomaly on either) and stops
    on the next new bad batch, rank 0's."""
    msrun(job, first)
    assert all((job.root / f"{first}_again" / f"done_rank{rank}").exists()
               for rank in (0, 1)), job.said()
    root = job.root / first / "run"
    segments = [_segments(root / f"rank_{rank}.jsonl") for rank in (0, 1)]
    ledger = [json.loads(line) for line in (root / "bad_batches.jsonl").read_text().splitlines()]
    assert [(e["step"], e["origin_rank"], e["fingerprint"]) for e in ledger] == [
        (BAD_STEP, 1, _batch_fingerprint(1, BAD_STEP)),
        (NEW_BAD_STEP, 0, _batch_fingerprint(0, NEW_BAD_STEP))]
    for rank, (before, after) in enumerate(segments):
        steps = [{r["step"]: r for r in segment if r["kind"] == "step"}
                 for segment in (before, after)]
        assert sorted(steps[0]) == list(range(1, BAD_STEP + 1)), rank
        assert sorted(steps[1]) == list(range(1, NEW_BAD_STEP + 1)), rank
        assert [(s, r.get("skip_reason")) for s, r in steps[1].items() if r["skipped"]] == [
            (2, "known_bad_batch"), (NEW_BAD_STEP, None)], rank
        assert {a["step"] for a in after if a["kind"] == "anomaly"} == {NEW_BAD_STEP}, rank
        [said] = [r["message"] for r in after
                  if r["kind"] == "notice" and "known bad" in r["message"]]
        assert ("its batch being a known bad one" if rank == 1 else "another rank's batch") \
            in said, (rank, said)
        assert [r["reason"] for r in after if r["kind"] == "end"] == ["stopped"]
    same_weights_on_both_ranks(job.root / f"{first}_again" / "out")
