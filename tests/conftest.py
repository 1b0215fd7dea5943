import builtins
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Real recorded npu-smi output lives in tests/fixtures/npu-smi (see its README for where each
# recording came from). The fixtures are the point of the tests that use them, so their
# absence fails instead of skipping.
NPU_SMI_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "npu-smi"


class FakeClock:
    """Deterministic time: ``advance`` moves both the wall clock and the monotonic one."""

    def __init__(self, start: float = 1_700_000_000.0):
        self.now = start
        self.perf = 100.0

    def time(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.perf

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.perf += seconds


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def make_clock():
    """For tests that need several independent clocks (one per simulated rank)."""
    return FakeClock


@pytest.fixture
def stream():
    return io.StringIO()


@pytest.fixture(scope="session")
def npu_smi_fixtures() -> Path:
    if not (NPU_SMI_FIXTURES / "README.md").is_file():
        pytest.fail(f"npu-smi fixtures missing: expected them in {NPU_SMI_FIXTURES}")
    return NPU_SMI_FIXTURES


@pytest.fixture
def hide_package(monkeypatch):
    """``hide_package("tensorboardX")``: importing it (or its submodules) now fails, as on a
    machine where it is not installed."""
    real_import = builtins.__import__

    def hide(prefix):
        def guarded(name, *args, **kwargs):
            if name == prefix or name.startswith(prefix + "."):
                raise ImportError(f"No module named {name!r}")
            return real_import(name, *args, **kwargs)
        monkeypatch.setattr(builtins, "__import__", guarded)
    return hide


def _in_mode(mode_name):
    """Run under MindSpore's process-global execution mode, restoring the previous one after."""
    import mindspore as ms
    previous = ms.get_context("mode")
    ms.set_context(mode=getattr(ms, mode_name))
    try:
        yield mode_name
    finally:
        ms.set_context(mode=previous)


@pytest.fixture(params=["GRAPH_MODE", "PYNATIVE_MODE"], ids=["graph", "pynative"])
def mode(request):
    yield from _in_mode(request.param)


@pytest.fixture
def graph_mode():
    yield from _in_mode("GRAPH_MODE")


@pytest.fixture
def pynative_mode():
    yield from _in_mode("PYNATIVE_MODE")


@pytest.fixture
def small_fs(tmp_path):
    """A real 256 KiB tmpfs mounted for this test (CI runs as root), to fill up for real."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs",
                             str(mount_point)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


# Tests marked fresh_process run in a child pytest of their own. MindSpore's SummaryRecord
# forks a writer process; forked from a pytest process that other tests left with threads
# (samplers, HTTP servers, MindSpore's own), the child can deadlock on a lock one of them
# held at the fork (seen: a 300 s hang). A fresh interpreter has no such threads.
_CHILD = "MINDWATCH_TEST_IN_FRESH_PROCESS"


def _without_group(nodeid):
    """The node id as the child pytest knows it: without xdist's ``@<group>``."""
    head, bracket, tail = nodeid.rpartition("]")
    return head + bracket + tail.partition("@")[0] if bracket else nodeid.partition("@")[0]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("fresh_process") is None or os.environ.get(_CHILD):
        return None
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         _without_group(pyfuncitem.nodeid)],
        cwd=pyfuncitem.config.rootpath, env={**os.environ, _CHILD: "1"},
        capture_output=True, text=True, timeout=240)
    if result.returncode != 0:
        pytest.fail(f"failed in a fresh process:\n{result.stdout[-4000:]}\n"
                    f"{result.stderr[-2000:]}", pytrace=False)
    return True


# Under pytest-xdist: the tests that start several processes of their own (msrun's ranks)
# run one after another on one worker, so two jobs of ranks never share this machine's cores
# and their timing stays what the tests expect; the tests marked waits go in one group a
# module. With two or more workers these groups go to the last one (waits_scheduling.py),
# and no test marked waits runs beside an msrun job; every other test goes to whichever
# worker is free. These groups replace any other xdist group of the test's module (that
# module's other tests keep theirs).
_PINNED_GROUP = pytest.StashKey[str]()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("msrun") is not None:
            item.stash[_PINNED_GROUP] = "ranks"
        elif item.get_closest_marker("waits") is not None:
            item.stash[_PINNED_GROUP] = f"waits-{item.module.__name__}"
    if config.getoption("loadgroup", False):      # set by pytest-xdist under --dist loadgroup
        for item in items:
            _join_xdist_group(item)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadgroup``, the last of two or more workers runs the msrun jobs and the
    tests that mostly wait (waits_scheduling.py)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from waits_scheduling import WaitsScheduling
    return WaitsScheduling(config, log)


def _join_xdist_group(item):
    """``--dist loadgroup`` sends the tests whose node id ends in ``@<group>`` to one worker,
    one after another. pytest-xdist 3.8 appends it by setting ``item._nodeid``, which pytest
    9.2 no longer reads (the id is ``item._id``, a NodeId): no xdist_group mark took effect
    (the msrun tests went to either worker, and a module-scoped fixture was set up once on
    each worker that ran one of its tests). This appends it where xdist did not."""
    names = [item.stash[_PINNED_GROUP]] if _PINNED_GROUP in item.stash else sorted(
        {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
         for mark in item.iter_markers("xdist_group")})
    if not names or "@" in item.nodeid.rpartition("]")[2]:
        return
    grouped = f"{item.nodeid}@{'_'.join(names)}"
    try:
        from _pytest.nodeid import NodeId  # pytest 9.2 on
    except ImportError:
        item._nodeid = grouped
    else:
        item._id = NodeId.parse(grouped)


# MindSpore runs a full gc.collect() before every graph it compiles (graph/api.py). In a
# test process that has collected the whole suite and imported MindSpore and MindFormers,
# each one walked ~400k long-lived objects: 0.23 s a compile, about a fifth of the
# in-process tests' time. Frozen once collected, those objects are out of every later
# collection; what the tests allocate is still collected.
#
# MindSpore's CPU kernels run on a pool of 25 threads by default, which spin while they wait
# for work: beside another busy test process on this 2-core host, the conformance matrix took
# 107 s of CPU in make test with them, 93 s with one (as alone: 50 s). One thread a process;
# the tests' numbers do not depend on it (each compares runs of one process, or the run log
# with the framework's own figures).
def pytest_collection_finish(session):
    import gc
    gc.collect()
    gc.freeze()
    if "mindspore" in sys.modules:
        sys.modules["mindspore"].device_context.cpu.op_tuning.threads_num(1)


# The same after each test module (its module-scoped fixtures finalized): what the modules
# before left alive (~120k objects by the end) is out of the collections that the next
# module's compiles run; what a module left as garbage is collected first, not frozen.
@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    if nextitem is None or nextitem.module is not item.module:
        import gc
        gc.collect()
        gc.freeze()
    return result
