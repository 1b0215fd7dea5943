"""Without MindSpore Transformers (make test-compat's MindSpore 2.8 pair has none to pair
with) these modules are not collected: they import PyYAML and the launcher's helpers, which
come with it. (Asked of the installed distributions: ``find_spec("mindformers")`` finds this
folder, a namespace package once ``tests/`` is on ``sys.path``.)"""
import importlib.metadata


def _installed(name):
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


collect_ignore_glob = [] if _installed("mindformers") else ["test_*.py"]
