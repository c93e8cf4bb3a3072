"""The compiler cache a lane build uses: which tool, which backend, which mode.

`select()` is the one place that decides; `build` passes `CacheSetup.launcher` to CMake as
the compiler launcher and `CacheSetup.env` to the configure and build processes, and the
report records `CacheSetup.record()`. (Today: ccache, else sccache, when on PATH, in
read-write mode with their default local storage; issue 16 fills in the rest.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dgr_forge.lanes.doctor import Doctor

CHOICES = ("auto", "ccache", "sccache", "off")
MODES = ("rw", "ro")


@dataclass(frozen=True)
class CacheSetup:
    tool: str | None = None  # "ccache" | "sccache" | None (no cache)
    launcher: str | None = None  # absolute path of the launcher binary
    version: str = ""
    backend: str = "none"  # "local", or the remote backend without credentials
    mode: str = "off"  # "rw" | "ro" | "off"
    env: dict[str, str] = field(default_factory=dict)  # for configure and build processes

    def record(self) -> dict[str, Any]:
        """What the signed report says about the cache (never a credential)."""
        return {
            "tool": self.tool,
            "version": self.version,
            "backend": self.backend,
            "mode": self.mode,
        }


OFF = CacheSetup()


def select(doctor: Doctor, choice: str = "auto", mode: str = "rw") -> CacheSetup:
    """The cache for this build: `choice` is auto|ccache|sccache|off, `mode` rw|ro."""
    if choice == "off":
        return OFF
    names = ("ccache", "sccache") if choice == "auto" else (choice,)
    for name in names:
        if name in doctor.probes.tools:
            result = doctor.tool(name)
            if result.found and result.path:
                return CacheSetup(
                    tool=name,
                    launcher=result.path,
                    version=doctor.version(name) or "",
                    backend="local",
                    mode=mode,
                )
    return OFF
