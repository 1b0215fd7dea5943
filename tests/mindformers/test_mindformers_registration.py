"""How MindFormers finds mindwatch's names: ``import mindwatch.mindformers`` registers the
callback and both cells; ``python -m mindwatch.mindformers`` prints the --register_path folder
alone, without importing MindFormers. Each in a fresh interpreter, as a user's script runs."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mf_config import REGISTER_PATH

pytestmark = [pytest.mark.mindformers, pytest.mark.timeout(120)]

HERE = Path(__file__).parent

REGISTERED = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
import hyper_parallel_standin
hyper_parallel_standin.install()
from mindformers.tools.register import MindFormerModuleType, MindFormerRegister
before = MindFormerRegister.is_exist(MindFormerModuleType.WRAPPER, "MindWatchPipelineCell")
import mindwatch.mindformers
print("before", before)
for kind, name in ((MindFormerModuleType.CALLBACK, "MindWatchMonitor"),
                   (MindFormerModuleType.WRAPPER, "MindWatchTrainOneStepCell"),
                   (MindFormerModuleType.WRAPPER, "MindWatchPipelineCell")):
    print(name, MindFormerRegister.is_exist(kind, name))
"""


def test_importing_the_package_registers_the_callback_and_both_cells():
    result = subprocess.run([sys.executable, "-c", REGISTERED], capture_output=True,
                            text=True, timeout=100)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if re.match(r"\w+ (True|False)$", line)]
    assert lines == ["before False", "MindWatchMonitor True", "MindWatchTrainOneStepCell True",
                     "MindWatchPipelineCell True"]


def test_the_register_path_command_prints_one_line_and_imports_no_mindformers():
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "mindwatch.mindformers"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [str(Path(REGISTER_PATH).resolve())]
    assert (Path(result.stdout.strip()) / "mindwatch_callback.py").is_file()
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "mindwatch.mindformers" in {name.strip() for name in imported}
    assert not {name for name in imported if name.split(".")[0] in ("mindformers", "mindspore")}


AFTER_A_FAILED_IMPORT = f"""
import importlib.util, sys
# MindFormers 2.0 without hyper_parallel: importing the package fails inside MindFormers
# (1.6 to 1.9 need no hyper_parallel: there it simply works)
import mindwatch.mindformers.compat
sys.path.insert(0, {str(HERE)!r})
import hyper_parallel_standin
hyper_parallel_standin.install()
from mindformers.trainer.base_trainer import BaseTrainer
from mindwatch.mindformers import MindWatchMonitor
print("kept", BaseTrainer._reset_wrapper_for_grad_accu.__dict__.get("mindwatch_keeps_type"))
"""


def test_a_failed_import_of_mindformers_leaves_nothing_half_imported():
    """Where MindFormers does not import, the package imports all the same and leaves no
    half-imported MindFormers behind, so that MindFormers imports later in the process."""
    result = subprocess.run([sys.executable, "-c", AFTER_A_FAILED_IMPORT],
                            capture_output=True, text=True, timeout=100)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "kept True" in result.stdout.splitlines()
