"""Which releases of a framework mindwatch is tested with, and what to say about another.

Framework-free: each adapter's ``compat`` module names its framework's tested release series
(``ReleaseTable("MindSpore", ("2.7", "2.8", "2.9", "2.10"))``) and hands the ``Release`` it
finds to the core (``FrameworkHooks.versions`` and ``untested``), which says an untested one
once and trains on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# "2.7.0", "2.7.0rc1", "2.10.0.post1", "1.8.0.dev20251201": the leading numbers are what count
_RELEASE = re.compile(r"^\s*(\d+)\.(\d+)")


def release_series(version: str | None) -> str | None:
    """``"2.7"`` for ``"2.7.1"`` or ``"2.7.0rc1"``; None for what is no version number."""
    match = _RELEASE.match(version) if isinstance(version, str) else None
    return f"{int(match[1])}.{int(match[2])}" if match else None


@dataclass(frozen=True)
class Release:
    """One framework package as this process has it: ``key`` in the run record's
    ``versions``, its version, and the line to say once when it is not tested (None)."""

    key: str
    version: str | None
    untested: str | None = None


@dataclass(frozen=True)
class ReleaseTable:
    """``package``'s release series mindwatch is tested with (each ``"major.minor"``)."""

    package: str
    series: tuple[str, ...]
    # What pairs with what, for the message (e.g. "1.6, 1.7 and 1.8 with MindSpore 2.7").
    detail: str = ""

    def __post_init__(self) -> None:
        for entry in self.series:
            if release_series(entry) != entry:
                raise ValueError(f"ReleaseTable.series takes 'major.minor' entries; got "
                                 f"{entry!r}")

    def release(self, key: str, version: str | None) -> Release:
        return Release(key, version, self.untested(version))

    def supports(self, version: str | None) -> bool:
        return release_series(version) in self.series

    def untested(self, version: str | None) -> str | None:
        """None for a tested version; else one line naming the tested ones (the run goes on
        with whatever works)."""
        if self.supports(version):
            return None
        tested = ", ".join(self.series)
        detail = f" ({self.detail})" if self.detail else ""
        return (f"{self.package} {version} is not a version mindwatch is tested with; tested: "
                f"{self.package} {tested}{detail}. Training goes on; a part that does not "
                f"work with this version says so (docs/versions.md)")
