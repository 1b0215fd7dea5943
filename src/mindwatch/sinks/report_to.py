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


# An option whose name holds one of these is a credential: the run record shows it hidden.
SECRET_WORDS = ("key", "token", "password", "secret", "credential")


def redacted_report_to(value: Any) -> Any:
    """``value`` as the ``run`` record keeps it: parsed (name -> options), credentials hidden
    (an option named like one, a URL's user and password); as given when it does not parse
    (the settings' check then refuses it)."""
    try:
        parsed = parse_report_to(value)
    except (TypeError, ValueError):
        return value
    return {name: {key: _hidden(key, option) for key, option in options.items()}
            for name, options in parsed.items()} or None


def _hidden(key: str, option: Any) -> Any:
    if any(word in key.lower() for word in SECRET_WORDS) and option is not None:
        return "***"
    if isinstance(option, str) and "@" in option and "://" in option:
        scheme, rest = option.split("://", 1)
        host = rest.rsplit("@", 1)[1] if "@" in rest.split("/", 1)[0] else rest
        return f"{scheme}://{host}"
    return option
