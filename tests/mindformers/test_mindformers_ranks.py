"""Two data-parallel ranks under MindFormers' Trainer, started by msrun the way a user starts
`run_mindformer.py`: one mindwatch log per rank, and one stop for all of them. The runs go
one after another in one msrun job (one cluster start-up: ``runs``), each test reading its
own."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from mf_config import (
    HERE,
    MINDWATCH_CELL,
    batch_result,
    data_parallel,
    mf_config,
    mf_steps,
    run_msrun_batch,
)

from mindwatch.runlog import read_run
from msrun_env import assert_ranks_ran_this_mindspore

# the first test waits for the job of all three runs
pytestmark = [
    pytest.mark.mindformers, pytest.mark.msrun, pytest.mark.timeout(420)]
STEPS = 10           # each rank's shard: 20 samples in batches of 2


def _stop(where):
    return data_parallel(mf_config(where, callbacks=[
        {"type": "StopAtStep", "step": 4, "rank": 1}]))


def _nan(where):
    return data_parallel(mf_config(where, callbacks=[
        {"type": "NanAtStep", "step": 6, "rank": 1}]))


def _nan_skipped(where):
    return data_parallel(mf_config(
        where, cell=MINDWATCH_CELL, callbacks=[{"type": "NanAtStep", "step": 6, "rank": 1}],
        monitor={"on_anomaly": {"loss_nonfinite": "skip", "gradient_nonfinite": "skip"}}))


BAD = 6


def _bad_batch(where):
    """Rank 1's step BAD NaN, undone before the monitor's step end (NanAtStep listed before
    it): the checkpoint holds the clean state after step BAD - 1; without a replay the
    withheld batch enters the ledger unchecked (test_mindformers_bad_batches.py's way)."""
    return data_parallel(mf_config(where, cell=MINDWATCH_CELL, monitor={"replay": False},
                                   callbacks=[{"type": "NanAtStep", "step": BAD, "rank": 1}]))


def _bad_batch_again(where):
    """_bad_batch's data again, from the start, the monitor resumed on its directory. (The
    report's advice, MindFormers' own resume_training, cannot run here: with several ranks
    it waits in a PyNative barrier, which MindSpore's CPU lacks; its pick of the checkpoint
    is checked below with MindFormers' own functions.)"""
    return data_parallel(mf_config(where, cell=MINDWATCH_CELL, monitor={
        "log_dir": str(where.parent / "bad_batch" / "mw"), "resume": True}))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each run's folder once the job of all the runs ended, and msrun's result."""
    root = tmp_path_factory.mktemp("ranks")
    configs = {}
    for name, make in (("stop", _stop), ("nan", _nan), ("nan_skipped", _nan_skipped),
                       ("bad_batch", _bad_batch), ("bad_batch_again", _bad_batch_again)):
        (root / name).mkdir()
        configs[name] = make(root / name)
    return root, run_msrun_batch(root, configs)


def _run(runs, name):
    """The run's folder and the updates each rank's optimizer applied."""
    root, result = runs
    return root / name, batch_result(result, root / name)


def test_the_job_of_the_three_runs_ended_cleanly(runs):
    assert runs[1].returncode == 0, runs[1].stderr[-3000:]


def test_a_stop_asked_on_one_rank_ends_both_after_that_step(runs):
    tmp_path, applied = _run(runs, "stop")
    run = read_run(str(tmp_path / "mw"))
    assert [log.rank for log in run.ranks] == [0, 1]
    assert_ranks_ran_this_mindspore(run, mindformers=True)
    for log in run.ranks:
        assert log.run["world_size"] == 2 and log.records[0]["total_steps"] == STEPS
        assert [s["step"] for s in log.steps] == [1, 2, 3, 4]
        theirs = mf_steps(tmp_path, log.rank)          # each rank's own loss, as MF logs it
        for step in log.steps:
            mf = theirs[step["step"]]
            assert step["loss"] == pytest.approx(mf["loss"], abs=mf["loss_abs"])
        assert log.end["reason"] == "stopped"
        assert log.end["stopped_by"] == {"anomaly": "user_request", "step": 4, "rank": 1}
    assert run.ranks[0].steps[0]["loss"] != run.ranks[1].steps[0]["loss"]   # two shards
    [peer] = run.ranks[0].anomalies
    assert peer["anomaly"] == "peer_stop" and peer["step"] == 4 and "rank 1" in peer["message"]
    assert applied == [4, 4]


def test_nan_on_one_rank_stops_both_at_that_step_with_the_last_good_weights(runs):
    import mindspore as ms
    tmp_path, applied = _run(runs, "nan")
    first, second = read_run(str(tmp_path / "mw")).ranks
    for log in (first, second):
        assert [s["step"] for s in log.steps] == [1, 2, 3, 4, 5, 6]
        assert log.steps[-1]["skipped"] is True      # MindFormers dropped the update
        assert log.end["reason"] == "stopped"
    # Rank 0's batch was fine: its loss is finite, but the reduced gradients are NaN.
    assert np.isfinite(first.steps[-1]["loss"]) and np.isnan(second.steps[-1]["loss"])
    assert {a["anomaly"] for a in second.anomalies} >= {"loss_nonfinite"}
    assert "gradient_nonfinite" in {a["anomaly"] for a in first.anomalies}
    assert applied == [5, 5]
    # data parallelism (model_parallel 1): the ranks hold the same state, so the job's one
    # checkpoint is rank 0's (issue #43), and it holds the last good weights
    [path] = {a["checkpoint"] for a in first.anomalies if a["checkpoint"]}
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]
    assert all(a["checkpoint"] is None and a["report"] is None for a in second.anomalies)
    for name, value in ms.load_checkpoint(path).items():
        if "adam" in name or "global_step" in name or name.startswith("mindwatch"):
            continue
        assert np.isfinite(value.asnumpy()).all(), name


def test_mindwatchs_cell_withholds_one_ranks_nan_on_both_and_names_that_rank(runs):
    """MindWatchTrainOneStepCell on two data-parallel ranks, a NaN embedding on rank 1 at
    step 6, under "skip": both ranks withhold step 6 and train on, with the same weights;
    each rank's own gradient norm before the reduction names rank 1."""
    tmp_path, applied = _run(runs, "nan_skipped")
    run = read_run(str(tmp_path / "mw"))
    assert_ranks_ran_this_mindspore(run, mindformers=True)
    for log in run.ranks:
        assert [s["step"] for s in log.steps] == list(range(1, STEPS + 1))
        assert [s["step"] for s in log.steps if s["skipped"]] == [6]
        assert log.end["reason"] == "completed"
        local = [s["local_grad_norm"] for s in log.steps]
        assert all(np.isfinite(v) for i, v in enumerate(local) if i != 5)
        assert np.isnan(local[5]) == (log.rank == 1)
        gradient = next(a for a in log.anomalies if a["anomaly"] == "gradient_nonfinite")
        assert gradient["step"] == 6 and gradient["origin_rank"] == 1
    assert applied == [STEPS - 1, STEPS - 1]
    # the replicas stayed one model: the same loss at every later step of the same shard
    # is not given (two shards), but the same weights are: the same global norm
    first, second = run.ranks
    assert [s["grad_norm"] for s in first.steps[6:]] == [s["grad_norm"] for s in second.steps[6:]]


def test_started_again_both_ranks_withhold_rank_1s_bad_batch_by_itself(runs):
    """Issue #46 under MindFormers' data parallelism: rank 1's bad batch stops the job and
    enters the ledger as rank 1's; the job started again on that directory withholds that
    step on both ranks by itself (no anomaly, no stop) and trains to the end, one model."""
    _run(runs, "bad_batch")
    _, applied = _run(runs, "bad_batch_again")
    log_dir = runs[0] / "bad_batch" / "mw"
    ledger = [json.loads(line) for line in (log_dir / "bad_batches.jsonl").read_text()
              .splitlines()]
    assert [(e["step"], e["origin_rank"], e["reproduced"]) for e in ledger] == [(BAD, 1, None)]
    run = read_run(str(log_dir))
    norms = []
    for log in run.ranks:
        again = log.records[max(i for i, r in enumerate(log.records) if r["kind"] == "run"):]
        steps = {r["step"]: r for r in again if r["kind"] == "step"}
        assert sorted(steps) == list(range(1, STEPS + 1)), log.rank
        assert [(s, r.get("skip_reason")) for s, r in steps.items() if r["skipped"]] == [
            (BAD, "known_bad_batch")], log.rank
        assert not [r for r in again if r["kind"] == "anomaly"], log.rank
        assert again[-1]["kind"] == "end" and again[-1]["reason"] == "completed"
        norms.append([steps[s]["grad_norm"] for s in sorted(steps)])
    assert norms[0] == norms[1]                         # one model
    assert applied == [STEPS - 1, STEPS - 1]            # every step's update but BAD's


def test_the_jobs_one_checkpoint_resumes_every_rank_from_its_own_folder(runs):
    """Data parallelism: the stop's checkpoint is rank 0's alone (issue #43), and MindFormers'
    resume_training has each rank load from its own rank_<R>/ of the folder the advice names
    (rank 0 counts those folders and picks a step every one holds): each rank's folder
    links the one checkpoint, which MindFormers' own pick finds for both ranks."""
    _run(runs, "bad_batch")
    log_dir = runs[0] / "bad_batch" / "mw"
    [checkpoint] = (log_dir / "checkpoints").iterdir()
    resume_dir = log_dir / "mindformers_resume"
    assert sorted(p.name for p in resume_dir.iterdir()) == ["rank_0", "rank_1"]
    picked = json.loads(subprocess.run(
        [sys.executable, "-c", MINDFORMERS_PICK, str(HERE), str(resume_dir)],
        capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()[-1])
    name = f"mindwatch_rank_0-1_{BAD - 1}.ckpt"
    assert picked["meta"] == [1, BAD - 1, name]
    for rank in (0, 1):
        chosen = os.path.basename(picked["ranks"][rank])
        assert chosen == f"mindwatch_rank_{rank}-1_{BAD - 1}.ckpt"
        assert os.path.samefile(resume_dir / f"rank_{rank}" / chosen, checkpoint)


# MindFormers' own pick of the checkpoint to resume from, rank 0's (the newest step every
# rank folder holds) and then each rank's file, as resume_training makes it (its barrier
# between the two left out)
MINDFORMERS_PICK = """
import json, sys
sys.path.insert(0, sys.argv[1])
import hyper_parallel_standin
hyper_parallel_standin.install()
import inspect
from mindformers.tools.resume_ckpt import get_info_from_meta, get_resume_ckpt_list
# MindFormers 1.6 finds the rank folders itself; later releases are told how many there are
counted = "rank_dir_num" in inspect.signature(get_info_from_meta).parameters
epoch, step, name = get_info_from_meta(sys.argv[2], *([2] if counted else []))
print(json.dumps({"meta": [epoch, step, name],
                  "ranks": [get_resume_ckpt_list(sys.argv[2], name, rank, 2)[-1]
                            for rank in (0, 1)]}))
"""
