"""SIGTERM and SIGINT during training: the current step finishes, a checkpoint is written,
the log ends with reason "signal", then the signal takes its usual course. Real processes,
real signals."""
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import mindspore as ms
import pytest

from mindwatch.runlog import read_rank_log

HERE = Path(__file__).resolve().parent
TRAINER = HERE / "signal_trainer.py"
pytestmark = pytest.mark.timeout(180)


def _start(log_dir, scenario):
    # A crash in native code (MindSpore's runtime) then leaves the Python stack on stderr,
    # instead of an exit status alone.
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen([sys.executable, str(TRAINER), str(log_dir), scenario],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    return process, log_dir / "rank_0.jsonl"


def _outcome(process, out, err):
    """The child's exit status, stdout and stderr (their last 3000 characters), for a
    failure message."""
    status = process.returncode
    if status is not None and status < 0:
        status = f"{status} ({signal.Signals(-status).name})"
    return f"exit status {status}\n--- stdout ---\n{out[-3000:]}\n--- stderr ---\n{err[-3000:]}"


def _steps_logged(log_path):
    return log_path.read_bytes().count(b'"kind":"step"') if log_path.exists() else 0


def _wait_for_steps(process, log_path, count, timeout=120):
    """None once ``count`` step records are in the log; the outcome if the trainer ended
    before that."""
    deadline = time.monotonic() + timeout
    while _steps_logged(log_path) < count:
        if process.poll() is not None:
            return _outcome(process, *process.communicate())
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the trainer never wrote {count} step records:\n"
                                 + _outcome(process, *process.communicate()))
        time.sleep(0.02)
    return None


def _start_training(tmp_path, scenario, steps):
    """The trainer, once it has logged ``steps`` step records: its signal handlers are in
    place before its first record, so a signal sent now meets them. A trainer killed by a
    signal before that, when no test has sent one (a native crash, the OOM killer), says
    nothing about signal handling: it is started once more, in a new log directory, and its
    outcome kept as a warning. Any other early end (a traceback, an exit status) fails."""
    for attempt in (1, 2):
        process, log_path = _start(tmp_path / f"attempt{attempt}", scenario)
        ended = _wait_for_steps(process, log_path, steps)
        if ended is None:
            return process, log_path
        message = (f"the trainer ended after {_steps_logged(log_path)} of {steps} step "
                   f"records, before any signal was sent:\n{ended}")
        if process.returncode >= 0 or attempt == 2:
            raise AssertionError(message)
        warnings.warn(f"started the trainer again: {message}", stacklevel=2)
    raise AssertionError("unreachable")


def _finish(process, timeout=60):
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
    return out, err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_the_run_cleanly_then_takes_its_course(tmp_path, signum):
    process, log_path = _start_training(tmp_path, "plain", 5)
    process.send_signal(signum)
    out, err = _finish(process)
    outcome = _outcome(process, out, err)
    assert "training returned" not in out, outcome
    log = read_rank_log(str(log_path))
    end = log.end
    assert end is not None and end["reason"] == "signal", (outcome, log.records[-3:])
    last = log.steps[-1]["step"]
    assert end["steps"] == last and end["stopped_by"] == {"anomaly": "signal", "step": last,
                                                          "rank": 0}
    notice = [r for r in log.of_kind("notice") if r.get("source") == "signal"]
    assert len(notice) == 1
    # MindSpore's dataset engine replaces the SIGINT handler while it feeds data and answers
    # SIGINT with a SIGTERM to the process (MindSpore 2.10): the run then ends as on SIGTERM.
    received = signal.SIGTERM if notice[0]["message"].startswith("SIGTERM") else signum
    assert notice[0]["message"].startswith(f"{signal.Signals(received).name} received")
    assert process.returncode == -received, outcome       # as the signal alone would have
    checkpoint = log_path.parent / "checkpoints" / f"signal_step{last}_rank0.ckpt"
    assert str(checkpoint) in notice[0]["message"]
    weights = ms.load_checkpoint(str(checkpoint))
    assert "inp.weight" in weights                                # a loadable checkpoint
    assert not list(checkpoint.parent.glob("*.tmp-*"))


def test_a_second_signal_exits_at_once(tmp_path):
    process, log_path = _start_training(tmp_path, "slow", 1)      # ~2 s per step
    process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    outcome = _outcome(process, *_finish(process, timeout=30))
    assert process.returncode == -signal.SIGTERM, outcome
    assert time.monotonic() - sent < 1.5                          # not after the step
    assert read_rank_log(str(log_path)).end is None               # no time for the end


def test_a_users_own_handler_is_chained_not_lost(tmp_path):
    process, log_path = _start_training(tmp_path, "chained", 5)
    process.send_signal(signal.SIGTERM)
    out, err = _finish(process)
    outcome = _outcome(process, out, err)
    # The user's handler runs once, after the clean stop, and decides: it lets training
    # return and the script end normally.
    assert process.returncode == 0, outcome
    assert out.count(f"users handler got {int(signal.SIGTERM)}") == 1, outcome
    assert "training returned" in out, outcome
    assert out.index("users handler got") < out.index("training returned"), outcome
    end = read_rank_log(str(log_path)).end
    assert end is not None and end["reason"] == "signal", outcome


def test_signals_are_left_alone_off_the_main_thread(tmp_path, quiet):
    import threading

    from mindwatch import Monitor
    outcome = {}

    def run():
        monitor = Monitor(str(tmp_path), stream=quiet, hardware_interval_s=None)
        monitor.observe(step=1, loss=1.0)
        monitor.close()
        outcome["handler"] = signal.getsignal(signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert outcome["handler"] == before
    notices = read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("notice")
    assert any("main thread" in n["message"] for n in notices)
    assert os.getpid()                                            # this process is untouched
