"""What a hostile log, name or network must not achieve: markup in the report, code run from
disk, files outside log_dir, metrics served beyond this machine by default."""
import ast
import io
import os
import re
import socket
import urllib.request
from pathlib import Path

import pytest

import mindwatch
from mindwatch import Monitor, records
from mindwatch.basics.run_dir import anomaly_report_stem, checkpoint_path, rank_log_path
from mindwatch.report.html import write_html
from mindwatch.runlog import read_run

PAYLOAD = '"><script>alert("x&y")</script><img src=x onerror=alert(1)>&amp;'


# -- the HTML report ---------------------------------------------------------------------------
def test_log_and_path_strings_are_escaped_in_the_report(tmp_path):
    run_dir = tmp_path / 'run<script>alert("dir")&'          # "/" cannot be in a name
    monitor = Monitor(run_dir, stream=io.StringIO(), hardware_interval_s=None)
    monitor.start(host=PAYLOAD, log_path=str(run_dir / PAYLOAD.replace("/", "_")),
                  mode=PAYLOAD, argv=[PAYLOAD])
    for step in range(1, 6):
        monitor.observe(step=step, loss=1.0 / step, lr=1e-3, grad_norm=1.0)
    monitor.notice(PAYLOAD)
    monitor.close()
    with open(monitor.log_path, "a", encoding="utf-8") as log:
        log.write(records.encode({
            "kind": "anomaly", "rank": 0, "time": 1.0, "anomaly": "loss_spike", "step": 3,
            "value": 9.0, "threshold": 6.0, "message": PAYLOAD, "actions": ["warn"],
            "checkpoint": None, "report": str(run_dir / "anomalies" / "x<script>.json")}) + "\n")
    page_path = write_html(read_run(str(run_dir)), str(tmp_path / "report.html"))
    page = Path(page_path).read_text(encoding="utf-8")
    # the data reached the page, escaped
    assert page.count("&quot;&gt;&lt;script&gt;alert(&quot;x&amp;y&quot;)&lt;/script&gt;") >= 3
    assert "x&lt;script&gt;.md" in page and "run&lt;script&gt;alert(&quot;dir&quot;)&amp;" in page
    # and none of it is markup: only the page's own three script elements remain
    assert len(re.findall(r"<script\b", page, re.I)) == 3
    assert PAYLOAD not in page and "<img" not in page and 'alert("x&y")' not in page
    data = re.search(r'<script type="application/json" id="mw-data">(.*?)</script>', page, re.S)
    assert PAYLOAD.replace('"', '\\"').replace("<", "\\u003c") in data.group(1)
    assert "<" not in data.group(1)                   # the data block cannot close itself


# -- nothing read from disk is executed -----------------------------------------------------------
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "dill", "shelve", "marshal", "cloudpickle",
                     "joblib"}
FORBIDDEN_CALLS = {"eval", "exec", "__import__"}


def _problems(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            names = []
        for name in names:
            if name.split(".")[0] in FORBIDDEN_MODULES:
                yield node.lineno, f"imports {name}"
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
            yield node.lineno, f"calls {func.id}()"
        if isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else ""
            keywords = {k.arg: k.value for k in node.keywords}
            if owner == "yaml" and func.attr in ("load", "load_all") and not any(
                    "Safe" in ast.unparse(v) for v in [*node.args[1:], *keywords.values()]):
                yield node.lineno, "yaml.load without a safe loader"
            if owner == "yaml" and func.attr in ("unsafe_load", "full_load", "unsafe_load_all"):
                yield node.lineno, f"yaml.{func.attr}"
            allow = keywords.get("allow_pickle")
            if allow is not None and not (isinstance(allow, ast.Constant) and not allow.value):
                yield node.lineno, "allow_pickle"


def test_the_scan_finds_what_it_looks_for():
    bad = ("import pickle\nfrom shelve import open\nx = eval('1')\nexec('y=2')\n"
           "yaml.load(text)\nyaml.load(text, Loader=yaml.SafeLoader)\n"
           "np.load(p, allow_pickle=True)")
    assert [line for line, _ in _problems(ast.parse(bad))] == [1, 2, 3, 4, 5, 7]


def test_no_pickle_eval_exec_or_unsafe_yaml_in_the_package():
    root = Path(mindwatch.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) > 40
    found = [f"{path.relative_to(root)}:{line}: {what}" for path in files
             for line, what in _problems(ast.parse(path.read_text(encoding="utf-8")))]
    assert found == []


# -- every path stays under log_dir ---------------------------------------------------------------
BAD_INDEX = [-1, True, 1.0, "0", "../0", None, 2**0.5]
BAD_NAME = ["../anomaly", "/etc/passwd", "a/b", "a\\b", "..", "anomaly\x00", "", 7]


@pytest.mark.parametrize("value", BAD_INDEX)
def test_path_builders_refuse_ranks_and_steps_that_are_not_counts(tmp_path, value):
    with pytest.raises(ValueError, match="rank must be a non-negative int"):
        rank_log_path(str(tmp_path), value)
    with pytest.raises(ValueError, match="step must be a non-negative int"):
        anomaly_report_stem(str(tmp_path), value, 0)
    with pytest.raises(ValueError, match="rank must be a non-negative int"):
        anomaly_report_stem(str(tmp_path), 0, value)
    with pytest.raises(ValueError, match="step must be a non-negative int"):
        checkpoint_path(str(tmp_path), value, 0)
    with pytest.raises(ValueError, match="rank must be a non-negative int"):
        checkpoint_path(str(tmp_path), 0, value)


@pytest.mark.parametrize("reason", BAD_NAME)
def test_checkpoint_reason_cannot_leave_the_directory(tmp_path, reason):
    with pytest.raises(ValueError, match=r"reason must be a non-empty name without a path sep"):
        checkpoint_path(str(tmp_path), 1, 0, reason)


def test_good_paths_are_inside_log_dir(tmp_path):
    root = os.path.realpath(tmp_path)
    paths = [rank_log_path(root, 3), anomaly_report_stem(root, 0, 2) + ".json",
             checkpoint_path(root, 12, 1), checkpoint_path(root, 12, 1, "signal")]
    assert [os.path.relpath(p, root) for p in paths] == [
        "rank_3.jsonl", os.path.join("anomalies", "step0_rank2.json"),
        os.path.join("checkpoints", "anomaly_step12_rank1.ckpt"),
        os.path.join("checkpoints", "signal_step12_rank1.ckpt")]


@pytest.mark.parametrize("rank", ["../../escaped", -3, "/tmp/abs"])
def test_a_hostile_rank_writes_nothing_anywhere(tmp_path, rank):
    log_dir = tmp_path / "deep" / "run"
    with pytest.raises(ValueError, match="rank"):
        Monitor(log_dir, rank=rank, stream=io.StringIO(), hardware_interval_s=None)
    assert list(tmp_path.rglob("*")) == []


# -- Prometheus binds loopback unless told otherwise ----------------------------------------------
def _answers(host, port):
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def test_prometheus_binds_loopback_by_default():
    pytest.importorskip("prometheus_client")
    from mindwatch.sinks.prometheus import PrometheusSink
    sink = PrometheusSink(0)
    try:
        assert sink._server.socket.getsockname() == ("127.0.0.1", sink.port)
        with urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/metrics", timeout=5) as page:
            assert b"mindwatch_anomalies_total" in page.read()
        # 127.0.0.2 is this machine too, but not the bound address: a server on 0.0.0.0
        # would answer there (and on every other interface)
        assert not _answers("127.0.0.2", sink.port)
    finally:
        sink.close()
    wide = PrometheusSink(0, host="0.0.0.0")
    try:
        assert wide._server.socket.getsockname()[0] == "0.0.0.0"
        assert _answers("127.0.0.2", wide.port) and wide.url.startswith("http://0.0.0.0:")
    finally:
        wide.close()


@pytest.mark.parametrize("host", ["", "0.0.0.0 ", "a b", None, 0])
def test_prometheus_host_is_checked(host):
    pytest.importorskip("prometheus_client")
    from mindwatch.sinks.prometheus import PrometheusSink
    with pytest.raises((TypeError, ValueError), match="host"):
        PrometheusSink(0, host=host)


def test_monitor_serves_prometheus_on_loopback(tmp_path):
    pytest.importorskip("prometheus_client")
    monitor = Monitor(tmp_path, stream=io.StringIO(), hardware_interval_s=None, prometheus_port=0)
    try:
        assert monitor.settings.prometheus_host == "127.0.0.1"
        [sink] = [s for s in monitor.sinks if type(s).__name__ == "PrometheusSink"]
        assert sink._server.socket.getsockname() == ("127.0.0.1", sink.port)
        assert not _answers("127.0.0.2", sink.port)
    finally:
        monitor.close()


def test_monitor_binds_the_prometheus_host_setting(tmp_path):
    pytest.importorskip("prometheus_client")
    monitor = Monitor(tmp_path, stream=io.StringIO(), hardware_interval_s=None,
                      prometheus_port=0, prometheus_host="127.0.0.2")
    try:
        [sink] = [s for s in monitor.sinks if type(s).__name__ == "PrometheusSink"]
        assert sink._server.socket.getsockname()[0] == "127.0.0.2"
    finally:
        monitor.close()
