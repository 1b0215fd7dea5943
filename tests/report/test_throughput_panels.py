"""The report's tokens/s and MFU panels: drawn for runs that logged them, and only then."""
import io
import json
import re

import pytest

from mindwatch import Monitor
from mindwatch.report.html import render_html
from mindwatch.runlog import read_run


def _panels(directory, clock, **settings):
    monitor = Monitor(str(directory), clock=clock, stream=io.StringIO(), batch_size=8,
                      hardware_interval_s=None, **settings)
    for step, seconds in enumerate((0.25, 0.5, 0.25), start=1):   # 32, 16, 32 samples/s
        clock.advance(seconds)
        monitor.observe(step=step, loss=1.0, grad_norm=1.0)
    monitor.close()
    page = render_html(read_run(str(directory)))
    block = re.search(r'<script type="application/json" id="mw-data">(.*?)</script>', page, re.S)
    return {panel["id"]: panel for panel in json.loads(block.group(1))["panels"]}


def test_tokens_per_s_and_mfu_in_percent(tmp_path, clock):
    panels = _panels(tmp_path, clock, tokens_per_sample=128, flops_per_token=6e6,
                     peak_tflops=0.1)
    assert list(panels)[4:7] == ["throughput", "tokens", "mfu"]
    assert [line["y"] for line in panels["tokens"]["lines"]] == [[4096.0, 2048.0, 4096.0]]
    mfu = panels["mfu"]["lines"][0]
    assert mfu["y"] == pytest.approx([24.576, 12.288, 24.576])     # 4096 * 6e6 / 1e11
    assert mfu["text"][0] == "24.58%"


def test_tokens_without_mfu_and_neither(tmp_path, clock):
    panels = _panels(tmp_path / "a", clock, tokens_per_sample=128)
    assert "tokens" in panels and "mfu" not in panels
    panels = _panels(tmp_path / "b", clock)
    assert "tokens" not in panels and "mfu" not in panels
