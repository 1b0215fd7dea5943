"""`mindwatch demo` whose training succeeded but whose report cannot be written: exit 0 and
one line on stderr saying so and why (the log is the result; `mindwatch report` can make the
page later)."""
import os
import subprocess
import sys

from mindwatch.runlog import read_rank_log

MINDWATCH = [sys.executable, "-m", "mindwatch.cli"]


def _demo(out):
    return subprocess.run([*MINDWATCH, "demo", "--out", str(out), "--steps", "3"],
                          capture_output=True, text=True, timeout=300)


def _assert_trained_without_report(result, out, why):
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"run directory: {out}" in result.stdout and "report:" not in result.stdout
    err = result.stderr.strip().splitlines()
    said = [line for line in err if "report could not be written" in line]
    assert len(said) == 1 and why in said[0], result.stderr[-3000:]
    assert said[0].startswith("mindwatch demo: training finished, but the report could not "
                              f"be written to {out / 'report.html'}: ")
    assert "Traceback" not in result.stderr
    log = read_rank_log(str(out / "rank_0.jsonl"))
    assert log.end["reason"] == "completed" and len(log.steps) == 3
    assert not [n for n in os.listdir(out) if ".tmp-" in n]      # no temporary left behind


def test_report_path_taken_by_a_directory(tmp_path):
    out = tmp_path / "run"
    (out / "report.html").mkdir(parents=True)
    (out / "report.html" / "keep").write_text("something of the user's")
    result = _demo(out)
    _assert_trained_without_report(result, out, "Is a directory")
    assert (out / "report.html" / "keep").read_text() == "something of the user's"


def test_full_disk(small_fs):
    """A real full disk: the 256 KiB tmpfs is filled until three pages are left, enough for
    the log (~3 KB) but not for the report (~17 KB)."""
    out = small_fs / "run"
    out.mkdir()
    stat = os.statvfs(small_fs)
    with open(small_fs / "filler", "wb") as handle:
        handle.write(b"\0" * (stat.f_bavail * stat.f_frsize - 3 * 4096))
    result = _demo(out)
    _assert_trained_without_report(result, out, "No space left on device")
    assert not (out / "report.html").exists()
    # With room again, the page can be made from the same run.
    os.remove(small_fs / "filler")
    report = subprocess.run([*MINDWATCH, "report", str(out)], capture_output=True, text=True,
                            timeout=120)
    assert report.returncode == 0 and (out / "report.html").stat().st_size > 10_000
