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


@pytest.fixture(scope="session")
def launcher(tmp_path_factory):
    """One launcher process for the Trainer runs of every module that uses it
    (mf_config.Launcher). Those modules put their tests in one xdist group, "launcher", so
    that one worker runs them all, module after module, and one process serves them: each
    process of its own spent ~4.5 s of CPU importing MindSpore and MindFormers and exiting,
    the cost of ~200 steps of these runs."""
    from mf_config import Launcher
    serving = Launcher(tmp_path_factory.mktemp("launcher"))
    yield serving
    serving.close()
