"""The MindSpore (and framework-free) Python blocks of README.md and docs/*.md run as written,
each in a fresh namespace in a temporary directory, with docs_table.py's stand-ins for the
model and data they leave out; the signatures they show are the methods'. In PYNATIVE mode,
which compiles only what the blocks compile themselves (jit_step): the whole file takes a
few seconds."""
import ast
import importlib
import inspect

import docs_stand_ins_ms as docs_stand_ins
import pytest

from docs_exec import python_blocks, run_block, runs_of
from docs_table import BLOCKS, Run, Signature


def _case(key):
    entry = BLOCKS[key]
    marks = [pytest.mark.xfail(strict=True, reason=entry.bug)] if entry.bug else []
    return pytest.param(key, id=key, marks=marks)


@pytest.mark.parametrize("key", [_case(key) for key in runs_of("mindspore")])
def test_the_block_runs_as_written(key, tmp_path, monkeypatch, pynative_mode):
    monkeypatch.chdir(tmp_path)
    assert isinstance(BLOCKS[key], Run)
    run_block(key, lambda name: getattr(docs_stand_ins, name)())


def _shown(block_code):
    """The parameters a signature block shows (``monitor.wrap(a, b, *, c=None)``), as a
    function's: (name, kind, default)."""
    call = block_code.strip()
    arguments = call[call.index("(") + 1:call.rindex(")")]
    [function] = ast.parse(f"def shown({arguments}): pass").body
    args = function.args
    shown = [(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty)
             for a in args.args]
    shown += [(a.arg, inspect.Parameter.KEYWORD_ONLY, ast.literal_eval(default))
              for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    return shown


SIGNATURES = [key for key, entry in BLOCKS.items()
              if isinstance(entry, Signature) and entry.suite == "mindspore"]


@pytest.mark.parametrize("key", SIGNATURES)
def test_a_signature_shown_is_the_methods(key):
    module, _, name = BLOCKS[key].target.partition(":")
    method = importlib.import_module(module)
    for part in name.split("."):
        method = getattr(method, part)
    actual = [(p.name, p.kind, p.default)
              for p in inspect.signature(method).parameters.values() if p.name != "self"]
    assert _shown(python_blocks()[key].code) == actual
