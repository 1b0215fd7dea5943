"""The MindFormers tests' way to ``hyper_parallel``, MindFormers 2.0's dependency that no
package registry serves: mindwatch's own stand-in for CPU trials
(``mindwatch/mindformers/register/mindwatch_hyper_parallel.py``, which
``mindwatch_cpu_trial.py`` installs for users), loaded from its file as that launcher loads
it, so that these tests run the shipped stand-in. Not through ``mindwatch.mindformers``:
importing that package registers mindwatch's names with MindFormers, which the tests leave to
the YAML's ``auto_register`` entries. ``install()`` before importing MindFormers."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

NAME = "mindwatch_hyper_parallel"


def _shipped():
    if NAME in sys.modules:
        return sys.modules[NAME]
    [package] = importlib.util.find_spec("mindwatch").submodule_search_locations
    path = Path(package) / "mindformers" / "register" / f"{NAME}.py"
    spec = importlib.util.spec_from_file_location(NAME, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    spec.loader.exec_module(module)
    return module


def install() -> None:
    """Make ``import hyper_parallel...`` succeed in this process (idempotent)."""
    _shipped().install()
