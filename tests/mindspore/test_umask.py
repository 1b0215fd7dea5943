"""Files of the run directory get the user's umask: 0o644 under umask 022, 0o600 under 077."""
import io
import os
import stat

import mindspore as ms
import pytest
from mindspore import nn

from mindwatch import Monitor
from mindwatch.basics.run_dir import current_umask
from mindwatch.mindspore.checkpoints.checkpoint import save_atomically
from mindwatch.mindspore.sinks.mindinsight import MindInsightSink
from mindwatch.report.html import write_html
from mindwatch.runlog import read_run


@pytest.fixture(params=[(0o022, 0o644), (0o077, 0o600)], ids=["022", "077"])
def expected_mode(request):
    mask, mode = request.param
    previous = os.umask(mask)
    try:
        yield mode
    finally:
        os.umask(previous)


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_umask_is_read_without_changing_it(expected_mode):
    mask = {0o644: 0o022, 0o600: 0o077}[expected_mode]
    assert current_umask() == mask and current_umask() == mask


def test_checkpoint(tmp_path, expected_mode):
    cell = nn.Dense(3, 2)
    bare = str(tmp_path / "bare.ckpt")
    ms.save_checkpoint(cell, bare)
    assert mode_of(bare) == 0o400            # what MindSpore leaves, and why the fix exists
    path = save_atomically(cell, str(tmp_path), 4, 1)
    assert path == str(tmp_path / "checkpoints" / "anomaly_step4_rank1.ckpt")
    assert mode_of(path) == expected_mode
    assert os.listdir(tmp_path / "checkpoints") == ["anomaly_step4_rank1.ckpt"]
    assert set(ms.load_checkpoint(path)) == {"weight", "bias"}


def test_anomaly_report_run_log_and_html(tmp_path, expected_mode):
    monitor = Monitor(tmp_path, stream=io.StringIO(), hardware_interval_s=None,
                      on_anomaly={"gradient_explode": "stop"})
    [anomaly] = monitor.observe(step=1, loss=1.0, grad_norm=1e6)
    monitor.close()
    stem = str(tmp_path / "anomalies" / "step1_rank0")
    assert anomaly.report == stem + ".json"
    html = write_html(read_run(str(tmp_path)), str(tmp_path / "report.html"))
    assert {p: mode_of(p) for p in (stem + ".json", stem + ".md", monitor.log_path, html)} == \
        dict.fromkeys((stem + ".json", stem + ".md", monitor.log_path, html), expected_mode)


def test_mindinsight_summary_file(tmp_path, expected_mode):
    sink = MindInsightSink(str(tmp_path), 2)
    try:
        assert mode_of(sink.path) == expected_mode
    finally:
        sink.close()
