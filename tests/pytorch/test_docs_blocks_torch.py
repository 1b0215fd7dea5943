"""The PyTorch Python blocks of README.md and docs/*.md (a plain loop, Hugging Face's
Trainer, Lightning, mindwatch.Monitor with a torch checkpoint) run as written, each in a fresh
namespace in a temporary directory, with docs_table.py's stand-ins for the model and data
they leave out."""
import pytest

pytest.importorskip("torch", reason="the PyTorch blocks run in .venv-torch (make test-torch)")

import docs_stand_ins_torch as docs_stand_ins

from docs_exec import run_block, runs_of
from docs_table import BLOCKS


def _case(key):
    entry = BLOCKS[key]
    marks = [pytest.mark.xfail(strict=True, reason=entry.bug)] if entry.bug else []
    return pytest.param(key, id=key, marks=marks)


@pytest.mark.parametrize("key", [_case(key) for key in runs_of("torch")])
def test_the_block_runs_as_written(key, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_block(key, lambda name: getattr(docs_stand_ins, name)())
