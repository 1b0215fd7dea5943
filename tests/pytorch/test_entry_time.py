"""Where a DDP rank enters the gradient all-reduce (issue #44, torch/ranks/local_norms.py):
the last bucket's host time against the previous step's end, less the data time; nothing
for CUDA buckets, whose hook runs before the device computed them."""
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from mindwatch.torch.ranks import local_norms  # noqa: E402
from mindwatch.torch.ranks.local_norms import LocalNorms  # noqa: E402


class Clock:
    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def _norms(monkeypatch, clock):
    monkeypatch.setattr(local_norms, "allreduce_hook", lambda state, bucket: "reduced")
    model = SimpleNamespace(register_comm_hook=lambda state, hook: None)
    return LocalNorms(model, clock)


def _bucket(tensor):
    return SimpleNamespace(buffer=lambda: tensor)


def test_the_last_buckets_time_less_the_previous_end_and_the_data_time(monkeypatch):
    norms = _norms(monkeypatch, Clock(10.5, 10.75))
    for _ in range(2):
        assert norms._hook(None, _bucket(torch.ones(4))) == "reduced"
    assert norms.work_since(10.0, 0.25) == pytest.approx(0.5)
    assert norms.work_since(10.0, None) is None          # taken: no bucket since
    assert norms.take() == 8.0                           # the local norm's sum, unchanged


def test_no_work_without_a_mark_or_before_it(monkeypatch):
    norms = _norms(monkeypatch, Clock(5.0, 5.0))
    norms._hook(None, _bucket(torch.ones(1)))
    assert norms.work_since(None, None) is None
    norms._hook(None, _bucket(torch.ones(1)))
    assert norms.work_since(6.0, None) is None


def test_a_cuda_bucket_is_not_timed_on_the_host(monkeypatch):
    norms = _norms(monkeypatch, Clock())
    cuda = SimpleNamespace(is_cuda=True, float=lambda: torch.ones(2))
    norms._hook(None, _bucket(cuda))
    assert norms.work_since(0.0, None) is None
