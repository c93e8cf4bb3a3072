"""Build logs: one file per build, `logs/build-<lane>.log` pointing at the latest.

A report names its build's own log as a byproduct (with its digest), so a log is never
rewritten; old logs are pruned, except any a live report still names.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from dgr_forge.core import proc
from dgr_forge.core.fsutil import refuse_shared
from dgr_forge.core.urls import mask_text

KEEP = 20  # logs kept per lane besides those a live report names


def new_log(logs_dir: Path, lane: str) -> Path:
    logs_dir.mkdir(parents=True, exist_ok=True)
    refuse_shared(logs_dir, "logs directory")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    path = logs_dir / f"build-{lane}-{stamp}.log"
    n = 0
    while path.exists():
        n += 1
        path = logs_dir / f"build-{lane}-{stamp}-{n}.log"
    path.touch(exist_ok=False)
    return path


def point_link(link: Path, target: Path) -> None:
    """Atomically point `link` (a relative symlink) at `target`."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target.name, tmp)
    os.replace(tmp, link)


def prune(logs_dir: Path, lane: str, keep: set[str | None]) -> None:
    kept = {Path(p).name for p in keep if p}
    logs = sorted(logs_dir.glob(f"build-{lane}-*.log"))
    # lane names are plain words; a longer lane sharing the prefix has a letter after "-"
    logs = [p for p in logs if p.name[len(f"build-{lane}-") :][:1].isdigit()]
    for old in logs[:-KEEP]:
        if old.name not in kept:
            old.unlink(missing_ok=True)


def run_logged(
    cmd: list[str], log: IO[str], env: dict[str, str], on_line: Callable[[str], None] | None = None
) -> tuple[int, list[str]]:
    """Run, teeing stdout+stderr into the log; (exit code, all lines)."""
    # exactly re-runnable (flags hold spaces), credentials aside: a log holds no secret
    log.write(mask_text(f"$ {shlex.join(cmd)}") + "\n")
    log.flush()
    lines: list[str] = []

    def each(line: str) -> None:
        line = mask_text(line)  # a child's own words may carry a URL with a token
        log.write(line + "\n")
        lines.append(line)
        if on_line:
            on_line(line)

    code = proc.stream(cmd, each, env=env)
    log.flush()
    return code, lines
