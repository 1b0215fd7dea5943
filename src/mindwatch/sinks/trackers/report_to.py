"""The ``report_to`` setting, as Hugging Face users know it: a tracker's name, a list of
names, or a mapping name -> that tracker's options (``{"mlflow": {"experiment": "sft"}}``).
Each tracker also reads its own library's environment variables (``MLFLOW_TRACKING_URI``,
``MLFLOW_EXPERIMENT_NAME``, ...): the options given here win over them."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

TRACKERS = ("mlflow", "swanlab", "wandb")
# What to install for each: mindwatch's extra, which pulls the tracker's own package
EXTRAS = {name: f"pip install 'mindwatch[{name}]'" for name in TRACKERS}


def parse_report_to(value: Any) -> dict[str, dict[str, Any]]:
    """name -> options for every tracker ``value`` asks for (empty: none). Raises TypeError
    or ValueError naming the problem and what is accepted."""
    if value is None or value == "none" or value == []:
        return {}
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        items = [(name, {}) for name in value]
    else:
        raise TypeError(f"report_to must be a tracker name, a list of names or a mapping name "
                        f"-> options, among {', '.join(TRACKERS)}; got {type(value).__name__}")
    found: dict[str, dict[str, Any]] = {}
    for name, options in items:
        if not isinstance(name, str) or name not in TRACKERS:
            raise ValueError(f"report_to: unknown tracker {name!r}; choose among "
                             f"{', '.join(TRACKERS)}")
        if options is None:
            options = {}
        if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
            raise TypeError(f"report_to: the options of {name!r} must be a mapping of names "
                            f"to values; got {type(options).__name__}")
        for key, option in options.items():
            if not _plain(option):
                raise TypeError(f"report_to: option {key!r} of {name!r} must be a string, a "
                                f"finite number, a bool or None; got {option!r}")
        found[name] = dict(options)
    return found


def _plain(value: Any) -> bool:
    """A value the run record can hold as it is (the settings are logged as JSON)."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    return isinstance(value, float) and math.isfinite(value)
