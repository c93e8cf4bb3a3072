"""What one `build` was asked (`BuildOptions`), resolved once and validated."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msgspec import Struct

from dgr_forge.cache import select as cache_mod
from dgr_forge.core.errors import BadInput


class BuildOptions(Struct, frozen=True):
    """What one `build` was asked, resolved once (`resolve`): defaults, then the
    environment (DGR_CACHE, DGR_CACHE_MODE), then the command's options; validated."""

    lanes: tuple[str, ...] = ("cpu",)
    worker: Path | None = None
    jobs: int | None = None
    key: str | None = None
    sign: bool = True
    mirror: str | None = None
    offline: bool = False
    cache: str = "auto"  # auto | ccache | sccache | off
    cache_mode: str = "rw"  # rw | ro
    force: bool = False  # a git worker checkout holding a person's work: save it, then move

    @classmethod
    def resolve(
        cls,
        *,
        cache: str | None = None,
        cache_mode: str | None = None,
        environ: Mapping[str, str] | None = None,
        **given: Any,
    ) -> BuildOptions:
        """`given`: the other fields; a bad value is exit 2 naming its option or variable."""
        env = os.environ if environ is None else environ
        jobs = given.get("jobs")
        if jobs is not None and not 1 <= jobs <= 4096:
            raise BadInput(f"--jobs {jobs}: must be 1 to 4096", hint="e.g. --jobs 2")
        choice = cache or env.get("DGR_CACHE") or "auto"
        mode = cache_mode or env.get("DGR_CACHE_MODE") or "rw"
        cache_mod.check_choice(
            choice,
            mode,
            "--cache" if cache is not None else "DGR_CACHE",
            "--cache-mode" if cache_mode is not None else "DGR_CACHE_MODE",
        )
        given["lanes"] = tuple(given.get("lanes") or ("cpu",))
        return cls(cache=choice, cache_mode=mode, **given)
