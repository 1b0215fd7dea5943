"""mindwatch's own error for a YAML entry that names one of its classes without the
``auto_register`` that registers it, in place of MindFormers' "Can't find class type wrapper
class name MindWatchTrainOneStepCell in class registry", which says nothing of the fix.

Why each entry needs its own: MindFormers' Trainer builds ``runner_wrapper`` before
``callbacks:`` (``BaseTrainer.training_process``, in every tested release), and only an
entry's own ``auto_register`` registers before it is built. So ``MindWatchMonitor``'s entry,
whose import registers the cells too, comes too late for ``runner_wrapper``.

Where it can be said: only in a process where code of mindwatch's runs before the Trainer
builds the entries, without registering mindwatch's names (``import mindwatch.mindformers``
registers them all, and the entries then work without ``auto_register``). Under
``run_mindformer.py`` alone nothing of mindwatch's runs that early: MindFormers' message
stands there (docs/mindformers.md quotes it with the fix). ``mindwatch_cpu_trial.py``
installs this, so that a YAML tried on the CPU fails here as it would under
``run_mindformer.py``, with the line to add. Standard library only, until ``install``.
"""
from __future__ import annotations

import functools
import os
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
FILE = "mindwatch_callback"          # the module auto_register names (this folder's)
# MindFormers' registry types (MindFormerModuleType.WRAPPER, .CALLBACK) -> the YAML's entry
SECTIONS = {"wrapper": "runner_wrapper", "callback": "callbacks"}
CLASSES = {"wrapper": ("MindWatchTrainOneStepCell", "MindWatchPipelineCell"),
           "callback": ("MindWatchMonitor",)}


class UnregisteredEntry(ValueError):
    """A ValueError, as MindFormers' own lookup error is: a caller that catches that catches
    this one too."""


def message(module_type: str, name: str) -> str | None:
    """What to say when MindFormers finds no ``name`` of ``module_type``; None for a name
    that is not mindwatch's."""
    if name not in CLASSES.get(module_type, ()):
        return None
    section = SECTIONS[module_type]
    where = f"the {section} entry" if section == "runner_wrapper" else \
        f"its entry in {section}:"
    return (f"{section}: type {name} is not registered with MindSpore Transformers: add "
            f"`auto_register: {FILE}.{name}` to {where}, and pass run_mindformer.py "
            f"`--register_path {HERE}` (the folder `python -m mindwatch.mindformers` prints; "
            "REGISTER_PATH is now "
            f"{os.environ.get('REGISTER_PATH') or 'unset'}). Each entry naming a class of "
            "mindwatch's needs its own: MindFormers builds runner_wrapper before callbacks:, "
            "so MindWatchMonitor's auto_register comes too late for it "
            "(docs/mindformers.md#the-yaml-entry)")


def install() -> None:
    """MindFormers' registry lookup says ``message`` for mindwatch's names it cannot find
    (imports MindFormers; once a process)."""
    from mindformers.tools.register import MindFormerRegister
    original = MindFormerRegister.__dict__["get_cls"].__func__
    if getattr(original, "mindwatch_entries", False):
        return

    @functools.wraps(original)
    def get_cls(cls: Any, module_type: Any, class_name: Any = None) -> Any:
        try:
            return original(cls, module_type, class_name)
        except ValueError as exc:
            said = message(str(module_type), str(class_name))
            if said is None:
                raise
            raise UnregisteredEntry(said) from exc

    get_cls.mindwatch_entries = True            # type: ignore[attr-defined]
    MindFormerRegister.get_cls = classmethod(get_cls)
