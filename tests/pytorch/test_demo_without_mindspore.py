"""``mindwatch demo`` where MindSpore is missing (this venv: torch, no MindSpore) says, in its
one line, what to install, that ``make demo`` sets it all up, and where a PyTorch user's
first run is; it exits 2 and starts nothing."""
import importlib.util
import subprocess
import sys

import pytest

# origin None: tests/mindspore, on sys.path as a namespace package, not MindSpore
if getattr(importlib.util.find_spec("mindspore"), "origin", None) is not None:
    pytest.skip("MindSpore is installed here: the demo would run", allow_module_level=True)


def test_the_demo_without_mindspore_says_what_to_install_and_points_to_a_torch_run(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mindwatch.cli", "demo", "--steps", "5"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("mindwatch demo: the demo trains with MindSpore, which cannot be "
                           "imported here (No module named 'mindspore')")
    assert "pip install 'mindwatch[mindspore]'" in line
    assert "make demo, which creates .venv with MindSpore" in line
    assert "docs/torch.md#a-first-run-on-the-cpu" in line       # test_docs_links: it exists
    assert list(tmp_path.iterdir()) == []                       # no run directory begun
