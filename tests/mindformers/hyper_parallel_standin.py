"""A test-only stand-in for ``hyper_parallel``, MindFormers 2.0's dependency that no package
registry serves (``hyper-parallel~=1.0.0``).

``import mindformers`` imports its PyNative models, and those import ``hyper_parallel``'s
distributed-tensor names at module level. Only MindFormers' PyNative and parallel code uses
them; the Trainer/YAML pipeline with a legacy GRAPH-mode model never calls one. So every
``hyper_parallel.*`` module is made on demand, and every name in it is a placeholder class
(usable as a base class, never meant to run). Nothing of mindwatch imports this: the
MindFormers tests install it with ``install()`` before importing MindFormers.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

ROOT = "hyper_parallel"


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        placeholder = type(name, (), {"__module__": self.__name__, "__init__": _accept,
                                      "__doc__": "hyper_parallel stand-in (tests only)"})
        setattr(self, name, placeholder)
        return placeholder


def _accept(self, *args, **kwargs) -> None:
    """Module-level tables build placeholders (``Shard(0)``): accept any arguments."""


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == ROOT or fullname.startswith(ROOT + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []          # a package: its submodules are made on demand too
        return module

    def exec_module(self, module):
        pass


def install() -> None:
    """Make ``import hyper_parallel...`` succeed in this process (idempotent)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
