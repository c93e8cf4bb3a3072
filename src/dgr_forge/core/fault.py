"""The one fault-injection hook, for the crash tests:
``DGR_FAULT=<point>[:<action>][@<n>][,...]``. Unset, a point costs one environment lookup; it
never weakens a check (docs/architecture.md, 'Fault injection').
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time

from msgspec import Struct

from dgr_forge.core.errors import BadInput, OperationFailed

ACTIONS = ("kill", "enospc", "fail", "pause")
_MAX_SPECS = 64


class Spec(Struct, frozen=True):
    point: str
    action: str = "kill"
    nth: int = 1


_parsed: tuple[str, tuple[Spec, ...]] | None = None
_hits: dict[str, int] = {}


def parse(raw: str) -> tuple[Spec, ...]:
    """A malformed `DGR_FAULT` is bad input, not a silent no-op."""
    specs: list[Spec] = []
    for item in raw.split(",")[: _MAX_SPECS + 1]:
        item = item.strip()
        if not item:
            continue
        nth = 1
        if "@" in item:
            item, _, count = item.rpartition("@")
            if not count.isdigit() or not 0 < int(count) < 1_000_000:
                raise BadInput(
                    f"DGR_FAULT: {count!r} is not a hit count (1..999999)",
                    hint="write e.g. DGR_FAULT=patch.applied@2",
                )
            nth = int(count)
        action = "kill"
        head, sep, tail = item.rpartition(":")
        if sep and tail in ACTIONS:
            item, action = head, tail
        if not item or any(c.isspace() or ord(c) < 32 for c in item):
            raise BadInput(
                f"DGR_FAULT: {item!r} is not a fault point name",
                hint="write DGR_FAULT=<point>[:kill|enospc|fail|pause][@n]",
            )
        specs.append(Spec(item, action, nth))
    if len(specs) > _MAX_SPECS:
        raise BadInput(f"DGR_FAULT names more than {_MAX_SPECS} points")
    return tuple(specs)


def point(name: str, detail: str = "") -> None:
    """A named state transition; acts only when DGR_FAULT names it (see module doc)."""
    global _parsed
    if (raw := os.environ.get("DGR_FAULT")) is None:
        return
    if _parsed is None or _parsed[0] != raw:
        _parsed = (raw, parse(raw) if raw else ())
        _hits.clear()
    where = f"{name}:{detail}" if detail else name
    for spec in _parsed[1]:
        if spec.point not in (name, where):
            continue
        _hits[spec.point] = _hits.get(spec.point, 0) + 1
        if _hits[spec.point] == spec.nth:
            _act(spec.action, where)


def _act(action: str, where: str) -> None:
    if action == "kill":
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # SIGKILL is not instant on every platform; never run on
    if action == "enospc":
        raise OSError(errno.ENOSPC, f"No space left on device (DGR_FAULT at {where})")
    if action == "fail":
        raise OperationFailed(f"injected failure at {where} (DGR_FAULT)")
    if action == "pause":
        sys.stderr.write(f"DGR_FAULT: paused at {where}\n")
        sys.stderr.flush()
        time.sleep(3600)
