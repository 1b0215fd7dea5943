"""Without MindSpore Transformers (make test-compat's MindSpore 2.8 pair has none to pair
with) these modules are not collected: they import PyYAML and the launcher's helpers, which
come with it. (Asked of the installed distributions: ``find_spec("mindformers")`` finds this
folder, a namespace package once ``tests/`` is on ``sys.path``.)"""
import importlib.metadata

import pytest


def _installed(name):
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


collect_ignore_glob = [] if _installed("mindformers") else ["test_*.py"]


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    """One launcher process for the module's Trainer runs (mf_config.Launcher). The modules
    that use it keep their tests on one xdist worker (an xdist_group of their own), so that
    one process serves them all, in the module's order."""
    from mf_config import Launcher
    serving = Launcher(tmp_path_factory.mktemp("launcher"))
    yield serving
    serving.close()
