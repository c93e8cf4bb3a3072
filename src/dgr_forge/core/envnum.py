"""Numbers read from environment variables: finite, in range, or exit 2 naming the variable (a plain
``float()`` turns ``DGR_LOCK_TIMEOUT=nan`` into "wait forever": NaN compares false with everything).
"""

from __future__ import annotations

import math
import os
from typing import overload

from dgr_forge.core.errors import BadInput

MAX_TEXT = 64  # a number is short; anything longer is not one (and is not echoed whole)


@overload
def env_number(name: str, default: int, minimum: int, maximum: int) -> int: ...
@overload
def env_number(name: str, default: float, minimum: float, maximum: float) -> float: ...


def env_number(name: str, default: float, minimum: float, maximum: float) -> float:
    """`$name` in [minimum, maximum]; `default` when unset (an int `default`: a whole number)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    whole = isinstance(default, int)
    kind = "a whole number" if whole else "a number"
    shown = raw if len(raw) <= MAX_TEXT else raw[:MAX_TEXT] + "..."
    hint = f"set {name} to {kind} from {minimum} to {maximum}, or unset it (default {default})"
    try:
        value: float = int(raw) if whole else float(raw)
    except ValueError:
        value = math.nan
    finite = isinstance(value, int) or math.isfinite(value)  # (a huge int is no float)
    if not finite or not minimum <= value <= maximum:
        raise BadInput(
            f"{name}={shown!r} is not {kind} from {minimum} to {maximum}",
            hint=hint,
            details={"variable": name, "value": shown},
        )
    return value
