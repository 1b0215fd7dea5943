"""Bad command lines in real processes: exit 2, one line on stderr naming the option, no
traceback; `demo` refuses them before importing MindSpore (a stand-in package that exits 99
on import proves it); `watch` on a directory without logs exits at once."""
import os
import subprocess
import sys
import time

import pytest

MINDWATCH = [sys.executable, "-m", "mindwatch.cli"]


@pytest.fixture
def no_mindspore(tmp_path):
    """An environment where `import mindspore` ends the process with status 99."""
    fake = tmp_path / "fake" / "mindspore"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import os\nos._exit(99)\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path / "fake"), os.environ.get("PYTHONPATH", "")]))


def _run(argv, env=None, timeout=60):
    return subprocess.run([*MINDWATCH, *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _rejected(result, name):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.count("\n") == 1 and name in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("argv, name", [
    (["--steps", "0"], "--steps"), (["--steps", "nan"], "--steps"),
    (["--steps", "10000000000"], "--steps"), (["--seed", "-3"], "--seed"),
    (["--seed", str(2**32)], "--seed"), (["--inject", "explode@301"], "--inject"),
    (["--steps", "40", "--inject", "nan@41"], "--inject"), (["--inject", "melt@5"], "KIND@STEP"),
    (["--out", ""], "--out"), (["--out", "x" * 300], "--out"), (["--out", "✓\n✗"], "--out"),
])
def test_demo_refuses_before_importing_mindspore(tmp_path, no_mindspore, argv, name):
    if argv[:1] == ["--out"] and argv[1] == "✓\n✗":
        (tmp_path / "✓\n✗").write_text("a file")
        argv = ["--out", str(tmp_path / "✓\n✗")]
    _rejected(_run(["demo", *argv], env=no_mindspore), name)


def test_the_stand_in_would_catch_an_import(no_mindspore, tmp_path):
    result = _run(["demo", "--steps", "2", "--out", tmp_path / "run"], env=no_mindspore)
    assert result.returncode == 99          # valid options: the demo went on to MindSpore


@pytest.mark.parametrize("command", ["summary", "report", "watch"])
def test_run_dir_problems(tmp_path, command):
    (tmp_path / "a file").write_text("x")
    for path, name in [(tmp_path / "nope ✓", "RUN_DIR"), (tmp_path / "a file", "RUN_DIR"),
                       (tmp_path / "a file" / "sub", "RUN_DIR"), ("", "RUN_DIR")]:
        _rejected(_run([command, path]), name)


def test_watch_without_logs_exits_2_at_once_or_after_wait(tmp_path):
    started = time.monotonic()
    result = _run(["watch", tmp_path])
    _rejected(result, "RUN_DIR")
    assert "no rank_<R>.jsonl run logs" in result.stderr and result.stdout == ""
    assert time.monotonic() - started < 10
    started = time.monotonic()
    result = _run(["watch", tmp_path / "later", "--wait", "1.5", "--refresh", "0.1"])
    took = time.monotonic() - started
    _rejected(result, "RUN_DIR")
    assert "after waiting 1.5 s" in result.stderr and 1.5 <= took < 10


def test_report_options_in_a_real_process(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "f").write_text("x")
    _rejected(_run(["report", run, "--max-points", "-1"]), "--max-points")
    _rejected(_run(["report", run, "--max-points", "1e9"]), "--max-points")
    _rejected(_run(["report", run, "-o", tmp_path]), "-o/--output")
    _rejected(_run(["report", run, "--png", tmp_path / "f"]), "--png")
    _rejected(_run(["watch", run, "--refresh", "nan"]), "--refresh")
    _rejected(_run(["watch", run, "--wait", "inf"]), "--wait")
    _rejected(_run(["summary", run, "--json", "extra"]), "extra")


def test_the_views_import_no_numpy_and_no_framework(tmp_path):
    """`summary`, `report`, `watch` and `compare` read logs: a process whose address space is
    capped (tests/report/test_torn_logs.py) has no room for numpy's BLAS buffers, and a
    laptop reading a run's logs need not have MindSpore."""
    code = ("import sys, mindwatch.cli; heavy = {'numpy', 'mindspore', 'torch', 'mindformers'};"
            " print(sorted(heavy & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result
