"""Running one block of the docs as docs_table.py says, in the calling test's venv: its
stand-ins, the block itself (compiled under its file's name and lines, so a traceback points
into the doc), the entry's checks, then how its run logs ended."""
from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docs_markdown import Block, blocks, doc_files
from docs_table import BLOCKS, Run


def python_blocks() -> dict[str, Block]:
    return {block.key: block for path in doc_files() for block in blocks(path)
            if block.lang == "python"}


def runs_of(suite: str) -> list[str]:
    """The keys of the blocks this suite runs."""
    return [key for key, entry in BLOCKS.items()
            if isinstance(entry, Run) and entry.suite == suite]


def records(run_dir: str, kind: str | None = None, rank: int = 0) -> list[dict[str, Any]]:
    """The latest run segment's records of ``run_dir``'s rank log (of ``kind``)."""
    lines = (Path(run_dir) / f"rank_{rank}.jsonl").read_text().splitlines()
    found = [json.loads(line) for line in lines if line.strip()]
    starts = [i for i, record in enumerate(found) if record["kind"] == "run"]
    latest = found[starts[-1]:] if starts else found
    return [record for record in latest if kind is None or record["kind"] == kind]


def run_block(key: str, stand_ins: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """Runs block ``key`` in the current directory, with ``stand_ins(name)`` giving the names
    its entry's stand-ins define; returns its namespace. Fails (AssertionError) when its
    checks or its run logs say otherwise than the entry."""
    block, entry = python_blocks()[key], BLOCKS[key]
    assert isinstance(entry, Run), entry
    # a module of its own, as a user's script is __main__: MindSpore's graph compiler looks
    # a function's globals up by importing its __module__
    module = types.ModuleType("docs_block")
    namespace = module.__dict__
    if entry.stand_ins:
        namespace.update(stand_ins(entry.stand_ins))
    sys.modules[module.__name__] = module
    try:
        # blank lines first: the block's lines keep their numbers in the file, which is
        # where a traceback and MindSpore's compiler (inspect.getsource) read them
        exec(compile("\n" * block.line + block.code, str(block.path), "exec"), namespace)
    finally:
        del sys.modules[module.__name__]
    if entry.then:
        exec(compile(entry.then, f"docs_table.py: {key} then", "exec"),
             {**namespace, "os": os, "records": records})
    for run_dir, (reason, last_step) in entry.logs.items():
        [end] = records(run_dir, "end")
        steps = records(run_dir, "step")
        assert (end["reason"], steps[-1]["step"]) == (reason, last_step), \
            f"{key}: {run_dir} ended {end['reason']!r} after step {steps[-1]['step']}, " \
            f"not {reason!r} after {last_step}"
    return namespace
