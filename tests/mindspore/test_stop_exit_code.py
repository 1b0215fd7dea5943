"""``stop_exit_code``: after mindwatch stopped training, the process exits with that status,
on every rank, once the run is complete on disk. Real training processes, real exit codes
(exit_trainer.py), alone and under msrun."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mindwatch.anomaly import (
    LOSS_NONFINITE,
    PEER_STOP,
    SIGNAL_STOP,
    SINK_ERROR,
    USER_STOP,
    Anomaly,
)
from mindwatch.decisions.exit_status import stop_exit_status
from mindwatch.runlog import read_rank_log, read_run
from msrun_env import free_port, msrun_environment

HERE = Path(__file__).resolve().parent
TRAINER = HERE / "exit_trainer.py"
EXITING = "exiting with status 42 (stop_exit_code)"
LATER_CALLBACK = "the callback after mindwatch ended"
pytestmark = pytest.mark.timeout(240)


def _train(tmp_path, scenario, *code):
    result = subprocess.run([sys.executable, str(TRAINER), str(tmp_path / "run"), scenario,
                             *map(str, code)], capture_output=True, text=True, timeout=200,
                            cwd=tmp_path)
    return result, read_rank_log(str(tmp_path / "run" / "rank_0.jsonl"))


def _said(result):
    return f"exit status {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def test_a_nan_stop_exits_with_stop_exit_code_after_the_run_is_complete(tmp_path):
    result, log = _train(tmp_path, "nan", 42)
    assert result.returncode == 42, _said(result)
    assert log.end["reason"] == "stopped"
    assert log.end["stopped_by"] == {"anomaly": LOSS_NONFINITE, "step": 3, "rank": 0}
    [first, *_] = log.anomalies
    assert os.path.exists(first["checkpoint"]) and os.path.exists(first["report"])
    assert f"mindwatch [rank 0]: training stopped by {LOSS_NONFINITE} at step 3; {EXITING}" \
        in result.stderr
    # the callback listed after mindwatch still ended; model.train did not return
    assert LATER_CALLBACK in result.stdout and "training returned" not in result.stdout


def test_without_stop_exit_code_a_stopped_run_exits_as_the_script_does(tmp_path):
    result, log = _train(tmp_path, "nan")
    assert result.returncode == 0, _said(result)
    assert log.end["reason"] == "stopped"
    assert "training returned" in result.stdout and "stop_exit_code" not in result.stderr


def test_an_early_stop_by_another_callback_is_no_failure(tmp_path):
    result, log = _train(tmp_path, "early_stop", 42)
    assert result.returncode == 0, _said(result)
    assert log.end["reason"] == "stopped"
    assert log.end["stopped_by"]["anomaly"] == USER_STOP
    assert "training returned" in result.stdout


def test_a_sigterm_still_ends_its_process_as_the_signal_does(tmp_path):
    process = subprocess.Popen([sys.executable, str(TRAINER), str(tmp_path / "run"), "long",
                                "42"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=tmp_path)
    path = tmp_path / "run" / "rank_0.jsonl"
    deadline = time.monotonic() + 120
    while not (path.exists() and path.read_bytes().count(b'"kind":"step"') >= 3):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == -signal.SIGTERM, (process.returncode, out[-2000:], err[-2000:])
    assert read_rank_log(str(path)).end["reason"] == "signal"
    assert "stop_exit_code" not in err


def _stop(kind, value=None, origin=None):
    return Anomaly(kind, 5, value, None, "", actions=["stop"], origin=origin)


@pytest.mark.parametrize(("stop", "status"), [
    (None, None),                                               # completed
    (_stop(LOSS_NONFINITE), 42),                                # this rank's anomaly
    (_stop(PEER_STOP, 1.0, (1, LOSS_NONFINITE)), 42),           # another rank's
    (_stop(SIGNAL_STOP, float(signal.SIGINT)), 130),            # a signal: 128 + its number
    (_stop(PEER_STOP, 1.0, (1, SIGNAL_STOP)), 143),             # another rank's: SIGTERM's
    (_stop(USER_STOP), None),                                   # request_stop(): no fault
    (_stop(PEER_STOP, 1.0, (1, USER_STOP)), None),
    (_stop(PEER_STOP, 1.0, (1, SINK_ERROR)), None),             # a full disk over there
])
def test_which_stops_exit_with_which_status(stop, status):
    assert stop_exit_status(42, stop) == status
    assert stop_exit_status(None, stop) is None


@pytest.mark.msrun
def test_under_msrun_every_worker_exits_with_stop_exit_code_and_msrun_fails(tmp_path):
    logs = tmp_path / "msrun_logs"
    result = subprocess.run(
        [sys.executable, "-m", "mindspore.parallel.cluster.run", "--worker_num=2",
         "--local_worker_num=2", f"--master_port={free_port()}", f"--log_dir={logs}",
         "--join=True", str(TRAINER), str(tmp_path / "run"), "nan_rank1", "42"],
        # msrun ends once its scheduler gave up on the ranks that exited with an error, which
        # MS_NODE_TIMEOUT seconds without their heartbeat take (by default 30 s, on a loaded
        # host often met)
        env=msrun_environment(MS_NODE_TIMEOUT="10"), capture_output=True, text=True,
        timeout=200, cwd=tmp_path)
    workers = [(logs / f"worker_{rank}.log").read_text(errors="replace") for rank in (0, 1)]
    said = "\n".join(w[-2000:] for w in workers) + result.stderr[-2000:]
    # msrun's own status: 1 (its RuntimeError) whatever the workers' codes; it names the
    # first worker it saw fail, with that worker's code
    assert result.returncode == 1, said
    assert "exit with exception. Error code: 42." in result.stderr, said
    for rank, worker in enumerate(workers):
        assert f"mindwatch [rank {rank}]: training stopped by " in worker, said
        assert EXITING in worker and LATER_CALLBACK in worker, said
        assert "training returned" not in worker
    run = read_run(str(tmp_path / "run"))
    assert [log.rank for log in run.ranks] == [0, 1]
    for log in run.ranks:
        assert log.end["reason"] == "stopped" and log.end["steps"] == 3, log.rank
