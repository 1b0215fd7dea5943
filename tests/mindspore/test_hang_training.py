"""The hang watchdog under Model.train: a data source that blocks is reported while it blocks
(warn: training then completes) or ends the process with status 75 (abort). Real MindSpore
training, real dataset threads, a real subprocess."""
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import mindspore as ms
import pytest
from hang_trainer import HANG_TIMEOUT_S, STALL_BATCH
from mindspore import dataset as ds
from mindspore import nn

from mindwatch.mindspore import TrainMonitor
from mindwatch.policy import ABORT_EXIT_STATUS
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.timeout(180), pytest.mark.waits]


def _hang_records(log_path):
    return [r for r in map(json.loads, log_path.read_text().splitlines())
            if r["kind"] == "anomaly" and r["anomaly"] == "hang"]


class Batches:
    """Eight batches; fetching batch ``stall_at`` (1-based) blocks until the log holds a hang
    record. Sized: MindSpore iterates a bare generator once to count it."""

    def __init__(self, log_path, stall_at, seen):
        self.x, self.y = regression_arrays(64)
        self.log_path, self.stall_at, self.seen = log_path, stall_at, seen

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i + 1 == self.stall_at:
            self.seen["records"] = block_until_the_hang_is_logged(self.log_path)
        return self.x[8 * i: 8 * i + 8], self.y[8 * i: 8 * i + 8]


def _dataset(log_path, stall_at, seen):
    return ds.GeneratorDataset(Batches(log_path, stall_at, seen), ["x", "y"], shuffle=False)


def block_until_the_hang_is_logged(log_path, deadline_s=60.0):
    """The data source blocks until the log holds a hang record (read while still blocked)."""
    deadline = time.monotonic() + deadline_s
    while not _hang_records(log_path):
        if time.monotonic() > deadline:
            return []
        time.sleep(0.05)
    return _hang_records(log_path)


def test_a_blocking_data_source_is_reported_while_it_blocks(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    others = set(threading.enumerate())       # left by monitors of earlier tests
    log_path = tmp_path / "rank_0.jsonl"
    net = make_regressor()
    timeout = 1.0
    monitor = TrainMonitor(str(tmp_path), print_interval=1000, hardware_interval_s=0.2,
                           hang_timeout_s=timeout)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()))
    model = ms.train.Model(step)
    seen = {}
    # The first step compiles the graph: within the first-step allowance, no hang.
    model.train(1, _dataset(log_path, STALL_BATCH, seen), callbacks=[monitor],
                dataset_sink_mode=False)
    [hang] = seen["records"]
    # The batches before the stall were prefetched: the training thread stops after them.
    assert hang["step"] == STALL_BATCH - 1 and hang["threshold"] == timeout
    assert hang["value"] >= timeout and hang["actions"] == ["warn"]
    assert "__next__ (iterators.py:" in hang["where"]      # waiting for the next batch
    report = json.loads(Path(hang["report"]).read_text())
    stacks = {t["name"]: [f["function"] for f in t["stack"]] for t in report["threads"]}
    assert "train" in stacks[threading.current_thread().name]
    # The data source's own frame, in MindSpore's dataset thread.
    assert any("block_until_the_hang_is_logged" in functions and "__getitem__" in functions
               for functions in stacks.values())
    assert report["hardware"] is not None
    # Between two model.train calls, and after the last, nothing watches.
    time.sleep(4 * timeout)
    model.train(1, _dataset(log_path, None, seen), callbacks=[monitor],
                dataset_sink_mode=False)
    time.sleep(4 * timeout)
    assert not [t for t in threading.enumerate()
                if t.name.startswith("mindwatch-hang") and t not in others]
    log = read_rank_log(str(log_path))
    assert [a["anomaly"] for a in log.anomalies] == ["hang"]
    assert [e["reason"] for e in log.of_kind("end")] == ["completed", "completed"]
    assert len(log.steps) == 16


def test_abort_ends_the_process_with_its_status_and_a_complete_log(tmp_path):
    log_dir = tmp_path / "run"
    result = subprocess.run([sys.executable, str(HERE / "hang_trainer.py"), str(log_dir)],
                            capture_output=True, text=True, timeout=150)
    assert result.returncode == ABORT_EXIT_STATUS, result.stderr[-3000:]
    assert "training returned" not in result.stdout
    log = read_rank_log(str(log_dir / "rank_0.jsonl"))
    [hang] = log.anomalies
    last = log.steps[-1]
    assert last["step"] == hang["step"] == STALL_BATCH - 1
    assert hang["actions"] == ["abort"] and hang["value"] >= HANG_TIMEOUT_S
    end = log.records[-1]
    assert end["kind"] == "end" and end["reason"] == "aborted"
    assert end["stopped_by"] == {"anomaly": "hang", "step": last["step"], "rank": 0}
    # Out within the timeout plus a few seconds of the last step end, not after the hour
    # the data source sleeps.
    assert end["time"] - last["time"] < HANG_TIMEOUT_S + 5
    report = (log_dir / "anomalies" / f"hang_step{last['step']}_rank0.md").read_text()
    assert "in a_mount_that_never_answers" in report
