"""The sink interface: a view of the run that receives every record and decides nothing."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Sink:
    @property
    def name(self) -> str:
        """How messages about this sink name it: what it is and where it writes."""
        return type(self).__name__

    def write(self, record: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass
