"""The tested-releases table and what the core says about an untested framework version."""
import io
import re
from pathlib import Path

import pytest
import tomllib

from mindwatch import FrameworkHooks, Monitor
from mindwatch.basics.versions import ReleaseTable, release_series
from mindwatch.runlog import read_rank_log

ROOT = Path(__file__).resolve().parents[2]
MINDSPORE = ReleaseTable("MindSpore", ("2.7", "2.8", "2.9", "2.10"))


@pytest.mark.parametrize(("version", "series"), [
    ("2.7.0", "2.7"), ("2.7.0rc1", "2.7"), ("2.10.0", "2.10"), ("2.10.0.post1", "2.10"),
    ("1.8.0.dev20251201", "1.8"), (" 2.9.0", "2.9"), ("2", None), ("", None), ("abc", None),
    (None, None), (2.7, None)])
def test_release_series(version, series):
    assert release_series(version) == series


@pytest.mark.parametrize("version", ["2.7.0", "2.7.1", "2.7.2", "2.7.0rc1", "2.8.0", "2.9.0",
                                     "2.10.0", "2.10.3"])
def test_tested_releases_are_supported(version):
    assert MINDSPORE.supports(version)
    assert MINDSPORE.untested(version) is None
    release = MINDSPORE.release("mindspore", version)
    assert (release.key, release.version, release.untested) == ("mindspore", version, None)


@pytest.mark.parametrize("version", ["2.6.0", "2.1.0", "2.11.0", "3.0.0", "unknown", None])
def test_an_untested_release_is_named_with_the_tested_ones(version):
    message = MINDSPORE.untested(version)
    assert message == (f"MindSpore {version} is not a version mindwatch is tested with; "
                       "tested: MindSpore 2.7, 2.8, 2.9, 2.10. Training goes on; a part that "
                       "does not work with this version says so (docs/versions.md)")


def test_a_series_must_be_major_minor():
    with pytest.raises(ValueError, match=r"'major\.minor' entries; got '2\.7\.0'"):
        ReleaseTable("MindSpore", ("2.7.0",))


def test_untested_lines_are_said_once_in_the_first_segment(tmp_path, clock):
    stream = io.StringIO()
    monitor = Monitor(str(tmp_path), clock=clock, stream=stream, hardware_interval_s=None,
                      framework=FrameworkHooks(versions={"mindspore": "2.6.0"},
                                               untested=("MindSpore 2.6.0 is not tested",)))
    for segment in range(2):
        monitor.start()
        monitor.observe(step=segment + 1, loss=1.0)
        monitor.close()
    records = read_rank_log(str(tmp_path / "rank_0.jsonl")).records
    assert [r["kind"] for r in records] == ["run", "notice", "step", "end", "run", "step", "end"]
    assert records[1]["message"] == "MindSpore 2.6.0 is not tested"
    assert records[0]["versions"]["mindspore"] == "2.6.0"
    assert stream.getvalue().count("MindSpore 2.6.0 is not tested") == 1


def test_untested_must_be_a_tuple_of_lines():
    with pytest.raises(TypeError, match=r"FrameworkHooks\.untested must be a tuple of str"):
        FrameworkHooks(untested="MindSpore 2.6.0")


def test_the_package_bounds_are_exactly_the_tested_releases():
    """pyproject.toml's bounds, the compat tables, the locks and docs/versions.md agree."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert "mindspore>=2.7.0,<2.11" in extras["mindspore"]
    assert "mindspore>=2.7.0,<2.11" in extras["all"]
    assert extras["mindformers"] == ["mindformers>=1.6.0,<2.1"]
    mindspore_compat = (ROOT / "src/mindwatch/mindspore/compat.py").read_text()
    assert 'ReleaseTable("MindSpore", ("2.7", "2.8", "2.9", "2.10"))' in mindspore_compat
    mindformers_compat = (ROOT / "src/mindwatch/mindformers/compat.py").read_text()
    assert '("1.6", "1.7", "1.8", "1.9", "2.0")' in mindformers_compat
    pairs = re.search(r"^COMPAT_PAIRS \?= (.*)$", (ROOT / "Makefile").read_text(), re.M)[1]
    tested = {"ms2.10.0-mf2.0.0"} | set(pairs.split())     # make test's pair, then the others
    assert tested == {"ms2.7.0-mf1.6.0", "ms2.7.1-mf1.7.0", "ms2.7.2-mf1.8.0", "ms2.8.0",
                      "ms2.9.0-mf1.9.0", "ms2.10.0-mf2.0.0"}
    table = (ROOT / "docs/versions.md").read_text()
    for pair in pairs.split():
        lock = (ROOT / "compat" / f"{pair}.lock").read_text()
        mindspore, _, mindformers = pair.partition("-")
        assert f"\nmindspore=={mindspore[2:]}\n" in lock
        if mindformers:
            assert f"\nmindformers=={mindformers[2:]}\n" in lock
        row = f"| {mindspore[2:]} | {mindformers[2:] or '-'} |"
        assert row in table, row
    main_lock = (ROOT / "requirements.lock").read_text()
    assert "\nmindspore==2.10.0\n" in main_lock
    assert "| 2.10.0 | 2.0.0 |" in table


def pair_untested(mindformers, mindspore):
    # imported here, not at collection: importing mindwatch.mindformers imports MindFormers
    # (3.5 s of CPU), in every test worker that collects this module
    from mindwatch.mindformers.compat import pair_untested as untested
    return untested(mindformers, mindspore)


# one worker imports MindFormers for these
MINDFORMERS_PAIRS = pytest.mark.xdist_group("mindformers_pairs")


@MINDFORMERS_PAIRS
@pytest.mark.parametrize(("mindformers", "mindspore"), [
    ("1.6.0", "2.7.0"), ("1.7.0", "2.7.1"), ("1.8.0", "2.7.2"), ("1.9.0", "2.9.0"),
    ("2.0.0", "2.10.0")])
def test_the_tested_mindformers_pairs(mindformers, mindspore):
    assert pair_untested(mindformers, mindspore) is None


@MINDFORMERS_PAIRS
def test_a_tested_mindformers_beside_another_mindspore_is_named():
    assert pair_untested("1.8.0", "2.9.0") == (
        "MindSpore Transformers 1.8.0 is tested beside MindSpore 2.7, not 2.9.0; tested "
        "pairs: 1.6, 1.7 and 1.8 with MindSpore 2.7, 1.9 with MindSpore 2.9, 2.0 with "
        "MindSpore 2.10. Training goes on; a part that does not work with this pair says so "
        "(docs/versions.md)")


@MINDFORMERS_PAIRS
def test_an_untested_mindformers_is_named():
    assert pair_untested("2.1.0", "2.11.0").startswith(
        "MindSpore Transformers 2.1.0 is not a version mindwatch is tested with; tested: "
        "MindSpore Transformers 1.6, 1.7, 1.8, 1.9, 2.0 (1.6, 1.7 and 1.8 with MindSpore 2.7")
