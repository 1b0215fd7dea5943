"""The training framework's own memory accounting, through a reader the adapter supplies.

The core never imports a framework: ``mindwatch.mindspore.hardware.memory.mindspore_memory_reader``
(or any callable returning a dict of plain numbers) is handed in from outside.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ..basics.numbers import to_number
from ..basics.once import OnceMessages

Reader = Callable[[], Mapping[str, Any]]


class FrameworkMemoryProbe:
    """``sample()`` returns the reader's dict with every value a float, a string or ``None``.

    Numbers (``numbers.to_number``) become floats; non-finite numbers and other objects
    become ``None`` (the run log never holds a made-up number). When the reader raises, the
    sample is ``None`` and the problem is queued once per exception type for
    ``pop_new_messages``; it is asked again next time, since allocator queries can fail
    transiently (a device being reset). Never raises.
    """

    def __init__(self, reader: Reader, name: str = "framework"):
        if not callable(reader):
            raise TypeError(f"reader must be a callable returning a dict; got "
                            f"{type(reader).__name__}")
        self.reader = reader
        self.name = name
        self._messages = OnceMessages()

    def pop_new_messages(self) -> list[str]:
        return self._messages.pop()

    def _report(self, key: str, message: str) -> None:
        self._messages.report(key, message)

    def sample(self) -> dict[str, Any] | None:
        try:
            raw = self.reader()
            if raw is None:
                return None
            return {str(key): _clean(value) for key, value in dict(raw).items()}
        except Exception as exc:
            self._report(exc.__class__.__name__,
                         f"{self.name} memory reader failed ({exc.__class__.__name__}: {exc}); "
                         "framework memory is null while it fails")
            return None


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return value
    number = to_number(value)
    return number if number is not None and math.isfinite(number) else None
