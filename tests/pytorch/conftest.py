"""The PyTorch adapter's tests: ``make test-torch`` runs them in .venv-torch (torch,
transformers, lightning; no MindSpore); in .venv, without torch, each module skips and says
so. The folder is not named ``torch``: on sys.path it would pass for the package, as a
namespace package, where torch is missing."""
import pytest

try:
    import torch
except ImportError:
    torch = None


def pytest_collection_modifyitems(items):
    for item in items:
        if "pytorch" in item.nodeid.split("/"):
            item.add_marker(pytest.mark.torch)


if torch is not None:
    torch.set_num_threads(1)      # two xdist workers on two cores
