import builtins
import io
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
