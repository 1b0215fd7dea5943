"""A stand-in for ``hyper_parallel``, for CPU TRIALS ONLY: it lets MindSpore Transformers 2.0
import where Ascend's ``hyper_parallel`` (``hyper-parallel~=1.0.0``, served by no public
package registry) is not installed, so that a config can be tried on the CPU first.

Why that is enough there: ``import mindformers`` imports its PyNative models, which import
``hyper_parallel``'s distributed-tensor names at module level; only MindFormers' PyNative and
parallel code uses them, and the Trainer/YAML pipeline with a legacy GRAPH-mode model (the
CPU trial of docs/mindformers.md) never calls one. So every ``hyper_parallel.*`` module is
made on demand and every name in it is a placeholder class (usable as a base class, and
callable with any arguments for MindFormers' module-level tables). Nothing of Ascend's
distributed tensors runs: a placeholder's missing attribute says so.

It serves only where the real package is absent (its finder comes last on ``sys.meta_path``),
and says so once on standard error when it first serves. Standard library only, and outside
``mindwatch.mindformers`` (whose import registers with MindFormers): ``mindwatch_cpu_trial.py``
beside it installs it on MindFormers 2.0 (``needed``); the MindFormers tests load this file
too, and install it on every release.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import types

ROOT = "hyper_parallel"
NOTE = ("mindwatch: hyper_parallel is not installed; a stand-in serves MindFormers' imports "
        "of it, for a CPU trial only: nothing of Ascend's distributed tensors runs "
        "(docs/mindformers.md#a-first-run-on-the-cpu)")


class StandInMissing(AttributeError):
    """What a placeholder lacks: an AttributeError, so that ``hasattr`` still answers."""


def _missing(self, name: str):
    raise StandInMissing(f"{type(self).__name__}.{name}: {type(self).__module__} is "
                         "mindwatch's hyper_parallel stand-in, for CPU trials only; install "
                         "hyper_parallel from your Ascend stack for this")


def _accept(self, *args, **kwargs) -> None:
    """Module-level tables build placeholders (``Shard(0)``): accept any arguments."""


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        placeholder = type(name, (), {"__module__": self.__name__, "__init__": _accept,
                                      "__getattr__": _missing,
                                      "__doc__": "hyper_parallel stand-in (CPU trials only)"})
        setattr(self, name, placeholder)
        return placeholder


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    mindwatch_standin = True          # install()'s mark, whichever copy of this file made it

    def __init__(self) -> None:
        self.said = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname == ROOT or fullname.startswith(ROOT + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        if not self.said:
            self.said = True
            print(NOTE, file=sys.stderr, flush=True)
        module = _StandInModule(spec.name)
        module.__path__ = []          # a package: its submodules are made on demand too
        return module

    def exec_module(self, module):
        pass


def needed() -> bool:
    """Whether this process's MindFormers needs a stand-in: 2.0 and later import
    ``hyper_parallel`` as they start; 1.6 to 1.9 start without it (1.9 imports it for its
    optional PyNative models only, which a stand-in would make look present)."""
    try:
        version = importlib.metadata.version("mindformers")
    except importlib.metadata.PackageNotFoundError:
        return False
    major = version.split(".")[0]
    return major.isdigit() and int(major) >= 2 and importlib.util.find_spec(ROOT) is None


def installed() -> bool:
    return any(getattr(finder, "mindwatch_standin", False) for finder in sys.meta_path)


def install() -> None:
    """Let ``import hyper_parallel...`` succeed in this process where the real package is not
    installed (idempotent); the real one, where installed, is found first."""
    if not installed():
        sys.meta_path.append(_Finder())
