"""Bad values for every option of every command: exit 2 and one line on stderr that names the
option, never a traceback (property-based, in-process), and `demo` never gets as far as
importing MindSpore for them. Real-process checks of the same are in test_cli_processes.py."""
import builtins
import contextlib
import io
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindwatch import Monitor
from mindwatch.cli import MAX_DEMO_STEPS, MAX_POINTS, MAX_SEED, main

FUSE = "TRAINING WOULD START HERE"
SETTINGS = settings(max_examples=80, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@contextlib.contextmanager
def _no_mindspore():
    """Importing MindSpore (the demo's training) fails loudly instead of starting."""
    real_import = builtins.__import__

    def guarded(name, *args, **kwargs):
        if "mindspore" in name.split("."):      # also cli's `from .mindspore.demo.run ...`
            raise AssertionError(FUSE)
        return real_import(name, *args, **kwargs)
    builtins.__import__ = guarded
    try:
        yield
    finally:
        builtins.__import__ = real_import


def run_cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _no_mindspore():
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:               # argparse's usage errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def assert_rejected(argv, *names):
    code, _, err = run_cli(argv)
    assert code == 2, (argv, code, err)
    assert err.endswith("\n") and err.count("\n") == 1, (argv, err)
    assert "Traceback" not in err and FUSE not in err, (argv, err)
    assert any(name in err for name in names), (argv, err)
    return err


def _int_ok(text, low, high):
    try:
        return low <= int(text) <= high
    except ValueError:
        return False


def _float_ok(text, low, high, low_open=False):
    try:
        value = float(text)
    except ValueError:
        return False
    return (low < value if low_open else low <= value) and value <= high


NUMBERISH = st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400", "",
                             " ", "1.5", "0x10", "1e3", "10**3", "½", "٣٣", "-0", "--1",
                             "1_000_000_000_000", "9" * 5000, "ten", "\uff11"])   # full-width 1


def bad_ints(low, high):
    return st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1),
                     st.text(max_size=20), NUMBERISH).map(str).filter(
        lambda t: not _int_ok(t, low, high))


def bad_floats(low, high, low_open=False):
    return st.one_of(st.floats(max_value=low), st.floats(min_value=high, exclude_min=True),
                     st.floats(allow_nan=True).filter(lambda v: v != v), st.text(max_size=20),
                     NUMBERISH).map(str).filter(lambda t: not _float_ok(t, low, high, low_open))


NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"),
                min_size=1, max_size=40).filter(lambda n: n not in (".", ".."))


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """A real run, a plain file, an empty directory, a directory holding a run log."""
    root = tmp_path_factory.mktemp("places")
    run = root / "run"
    monitor = Monitor(str(run), stream=io.StringIO(), hardware_interval_s=None)
    monitor.observe(step=1, loss=1.0)
    monitor.close()
    (root / "file.txt").write_text("not a directory")
    (root / "empty").mkdir()
    return root


def bad_paths(root, *, kinds):
    """Paths that do not exist (unicode names), files, paths under a file, names too long."""
    options = {
        "missing": NAMES.map(lambda n: str(root / "missing" / n)),
        "file": st.just(str(root / "file.txt")),
        "under_file": NAMES.map(lambda n: str(root / "file.txt" / n)),
        "too_long": st.integers(256, 600).map(lambda k: str(root / ("x" * k))),
        "empty": st.just(""),
        "dir": st.just(str(root / "empty")),
        "run": st.just(str(root / "run")),
    }
    return st.one_of(*(options[k] for k in kinds))


# -- demo -----------------------------------------------------------------------------------
@SETTINGS
@given(value=bad_ints(1, MAX_DEMO_STEPS))
def test_demo_steps(value):
    assert_rejected(["demo", "--steps", value], "--steps")


@SETTINGS
@given(value=bad_ints(0, MAX_SEED))
def test_demo_seed(value):
    assert_rejected(["demo", "--seed", value, "--steps", "5"], "--seed")


def _valid_inject(text, steps):
    match = re.fullmatch(r"(explode|nan|diverge|vanish)@([0-9]+)", text)
    return bool(match) and 1 <= int(match.group(2)) <= steps


@SETTINGS
@given(value=st.one_of(st.text(max_size=30), st.sampled_from(
    ["explode", "explode@", "@5", "explode@0", "explode@-1", "explode@5.0", "explode@nan",
     "EXPLODE@5", "nan@٣", "melt@5", "explode@5@6", " explode@5", "explode@ 5"])).filter(
    lambda t: not _valid_inject(t, 20)))
def test_demo_inject_malformed(value):
    assert_rejected(["demo", "--inject", value, "--steps", "20"], "--inject")


@SETTINGS
@given(steps=st.integers(1, 1000), beyond=st.integers(1, 10**12),
       kind=st.sampled_from(["explode", "nan", "diverge", "vanish"]))
def test_demo_inject_beyond_the_last_step(steps, beyond, kind):
    err = assert_rejected(["demo", "--steps", steps, "--inject", f"{kind}@{steps + beyond}"],
                          "--inject")
    assert "beyond --steps" in err


@SETTINGS
@given(data=st.data())
def test_demo_out(places, data):
    path = data.draw(bad_paths(places, kinds=["file", "under_file", "too_long", "empty",
                                               "run"]))
    assert_rejected(["demo", "--out", path, "--steps", "5"], "--out")


# -- summary, report, watch: RUN_DIR ---------------------------------------------------------
@SETTINGS
@given(data=st.data(), command=st.sampled_from(["summary", "report", "watch"]))
def test_run_dir(places, data, command):
    kinds = ["missing", "file", "under_file", "too_long", "empty", "dir"]
    path = data.draw(bad_paths(places, kinds=kinds))
    err = assert_rejected([command, path], "RUN_DIR", "rank_<R>.jsonl")
    assert err.startswith(f"mindwatch {command}: ")


@pytest.mark.parametrize("argv, name", [
    (["summary"], "RUN_DIR"), (["report"], "RUN_DIR"), (["watch"], "RUN_DIR"),
    (["summary", ".", "--json=yes"], "--json"), (["summary", ".", "--jsn"], "--jsn"),
    (["report", ".", "-o"], "-o"), (["report", ".", "--png"], "--png"),
    (["watch", ".", "--refresh"], "--refresh"), (["demo", "--inject"], "--inject"),
    ([], "command"), (["frobnicate"], "frobnicate"),
])
def test_usage_errors_are_one_line_too(argv, name):
    assert_rejected(argv, name)


# -- report ----------------------------------------------------------------------------------
@SETTINGS
@given(value=bad_ints(10, MAX_POINTS))
def test_report_max_points(places, value):
    assert_rejected(["report", places / "run", "--max-points", value], "--max-points")


@SETTINGS
@given(data=st.data())
def test_report_output(places, data):
    path = data.draw(st.one_of(
        bad_paths(places, kinds=["under_file", "too_long", "empty", "dir", "run"]),
        NAMES.map(lambda n: str(places / "missing" / n / "r.html"))))
    assert_rejected(["report", places / "run", "-o", path], "-o/--output")
    assert not os.path.exists(places / "run" / "report.html")      # nothing was written


@SETTINGS
@given(data=st.data())
def test_report_png(places, data):
    path = data.draw(bad_paths(places, kinds=["file", "under_file", "too_long", "empty"]))
    assert_rejected(["report", places / "run", "--png", path, "-o", places / "r.html"],
                    "--png")
    assert not os.path.exists(places / "r.html")                   # checked before writing


# -- watch -----------------------------------------------------------------------------------
@SETTINGS
@given(value=bad_floats(0, 3600, low_open=True))
def test_watch_refresh(places, value):
    assert_rejected(["watch", places / "run", "--refresh", value], "--refresh")


@SETTINGS
@given(value=bad_floats(0, 86400))
def test_watch_wait(places, value):
    assert_rejected(["watch", places / "run", "--wait", value], "--wait")
