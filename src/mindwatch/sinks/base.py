"""The sink interface: a view of the run that receives every record and decides nothing."""
from __future__ import annotations

from typing import Any, Mapping


class Sink:
    def write(self, record: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass
