"""Each distinct problem said once: hardware probes report on the sampler thread, the
responder on failed checkpoint and report writes; the monitor pops the new messages on the
training thread and writes them as notices."""
from __future__ import annotations

import threading
from collections.abc import Hashable


class OnceMessages:
    def __init__(self) -> None:
        self._seen: set = set()
        self._new: list[str] = []
        self._lock = threading.Lock()

    def report(self, key: Hashable, message: str) -> None:
        """Queue ``message`` unless a message under ``key`` was queued before; ``key`` names
        the problem when the text carries details that vary from call to call."""
        with self._lock:
            if key not in self._seen:
                self._seen.add(key)
                self._new.append(message)

    def pop(self) -> list[str]:
        with self._lock:
            new, self._new = self._new, []
        return new
