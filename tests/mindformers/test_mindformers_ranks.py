"""Two data-parallel ranks under MindFormers' Trainer, started by msrun the way a user starts
`run_mindformer.py`: one mindwatch log per rank, and one stop for all of them. The three
runs go one after another in one msrun job (one cluster start-up: ``runs``), each test
reading its own."""

import os

import numpy as np
import pytest
from mf_config import (
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


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each run's folder once the job of all three ended, and msrun's result."""
    root = tmp_path_factory.mktemp("ranks")
    configs = {}
    for name, make in (("stop", _stop), ("nan", _nan), ("nan_skipped", _nan_skipped)):
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
