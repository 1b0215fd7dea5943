"""The settings' argument checks for constructors that promise ``ValueError`` for every bad
argument (the hardware rules, the sampler): a wrong type raises ``ArgumentError``, which is
both the ``TypeError`` that ``MonitorSettings`` raises and the ``ValueError`` those callers
have always caught."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ArgumentError(TypeError, ValueError):
    pass


def checked(check: Callable[..., None], name: str, value: Any, **bounds: Any) -> None:
    """``check(name, value, **bounds)``: ``check_int``, ``check_number`` or ``check_bool`` from
    ``mindwatch.settings``."""
    try:
        check(name, value, **bounds)
    except TypeError as exc:
        raise ArgumentError(str(exc)) from None
