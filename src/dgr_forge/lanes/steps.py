"""The steps of one lane's build: configure, compile, collect; none reads or writes
state.json (the builder, `lanes.lane_build.LaneBuilder`, does)."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, MutableMapping
from pathlib import Path
from typing import IO

from msgspec import Struct

from dgr_forge.attest.records import Artifact
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_text
from dgr_forge.core.output import Reporter
from dgr_forge.host import cmake_options as options
from dgr_forge.lanes import cmake_api, logs
from dgr_forge.lanes.collect import collect_artifacts
from dgr_forge.lanes.plan import LanePlan
from dgr_forge.lanes.stamps import RACY_NS

NINJA_STATUS = r"^\[(\d+)/(\d+)\]\s*(.*)$"
NO_WORK = "ninja: no work to do."
NINJA_LOG = ".ninja_log"  # one line per output of each edge Ninja ran: start end mtime path hash
_LOG_TAIL = 64 << 20  # bytes of Ninja's log read after a run (its own, in the build directory)


class Ran(Struct, frozen=True):
    code: int
    lines: list[str]
    seconds: float
    steps: int = 0  # Ninja's last `[done/total]`
    # Ninja wrote a file: an output of an edge it ran is newer than the run's start. An
    # always-run step (llama.cpp's llama-ui-assets: a custom target with no outputs,
    # whose byproducts are rewritten only when different) runs at every build, writing none
    wrote: bool = True


def error_lines(lines: list[str], limit: int = 40) -> list[str]:
    """The part of a failed build worth showing: Ninja's FAILED block(s) or CMake Errors."""
    start = next((i for i, line in enumerate(lines) if line.startswith("FAILED:")), None)
    if start is None:  # else CMake's first error, else the last lines
        last = max(0, len(lines) - limit)
        start = next((i for i, line in enumerate(lines) if "CMake Error" in line), last)
    return [line for line in lines[start:] if not line.startswith("ninja: build stopped")][:limit]


def configure(cmd: list[str], build_dir: Path, log: IO[str], env: dict[str, str]) -> Ran:
    """CMake, with a File API query first; `--fresh` over an older configure (inputs
    changed: no stale cache entries survive)."""
    t = time.monotonic()
    cmake_api.write_query(build_dir)
    full = [cmd[0], "--fresh", *cmd[1:]] if (build_dir / "CMakeCache.txt").exists() else cmd
    code, lines = logs.run_logged(full, log, env)
    return Ran(code, lines, time.monotonic() - t)


def refuse_unused(forge: Forge, plan: LanePlan, lines: list[str], log: Path) -> None:
    """Exit 2 for a recipe option CMake never read (it would change nothing). A variable
    the forge set itself (CMAKE_C_FLAGS on a project without C, the toolchain's settings)
    is not the user's to act on: CMake's list stays in the log, no warning is printed."""
    own = set(plan.recipe.cmake_options)
    if unused := [n for n in options.unused_variables(lines) if n in own]:
        raise BadInput(
            f"{plan.lane}: CMake did not use recipe option(s) {', '.join(unused)}: "
            "the project never reads them, so they would change nothing",
            hint=f"remove them from {forge.rel(plan.recipe.path)}, or fix their names",
            details={"lane": plan.lane, "unused": unused, "log": str(log)},
        )


def ninja_targets(plan: LanePlan) -> list[str]:
    """The recipe's targets (none: Ninja's default), then the `[certify]` programs the
    configured build declares: a worker adds upstream EXCLUDE_FROM_ALL, so its default
    builds none of them, and the suite runs only what this build made."""
    named = list(plan.recipe.cmake.targets)
    suite = plan.recipe.certify.targets if plan.recipe.certify else ()
    if not suite:
        return named
    declared = {t.name for t in cmake_api.read_reply(plan.build_dir).targets}
    wanted = [t for t in suite if t in declared and t not in named]
    return [*(named or ["all"]), *wanted] if wanted else named


def compile_lane(
    plan: LanePlan,
    out: Reporter,
    jobs: int | None,
    log: IO[str],
    env: dict[str, str],
    on_work: Callable[[], None] | None = None,
    targets: list[str] | None = None,
) -> Ran:
    """Ninja on the recipe's targets (or `targets`), its progress shown as it goes;
    `on_work` is called once, at Ninja's first step (never on a no-op)."""
    lane = plan.lane
    t = time.monotonic()
    cmd = [plan.ninja, "-C", str(plan.build_dir)]
    if jobs:
        cmd += ["-j", str(jobs)]
    cmd += ninja_targets(plan) if targets is None else targets
    steps = [0]
    offset = 0
    with contextlib.suppress(OSError):
        offset = os.stat(plan.build_dir / NINJA_LOG).st_size
    since = time.time_ns() - RACY_NS  # a coarse clock may date a write before this read
    started: list[bool] = []
    with out.progress() as sink:
        task = sink.add(f"{lane}: compile", total=None)

        def on_line(line: str) -> None:
            if match := re.match(NINJA_STATUS, line):
                done, total = int(match.group(1)), int(match.group(2))
                if on_work is not None and not started:
                    started.append(True)
                    on_work()
                steps[0] = done
                sink.update(task, done, total, f"{lane}: {match.group(3)}")

        code, lines = logs.run_logged(cmd, log, env, on_line)
    idle = code == 0 and any(line.strip() == NO_WORK for line in lines)
    wrote = not idle and wrote_since(plan.build_dir, offset, since)
    return Ran(code, lines, time.monotonic() - t, steps[0], wrote)


def wrote_since(build_dir: Path, offset: int, since_ns: int) -> bool:
    """Whether an output Ninja logged after `offset` of its log (the whole log when Ninja
    compacted it) was written at or after `since_ns`. An unreadable log says it wrote:
    the report is then decided by the subjects' bytes alone."""
    try:  # non-blocking, a regular file only: a FIFO swapped in is no wait
        fd = os.open(build_dir / NINJA_LOG, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return True
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return True
        fh.seek(offset if st.st_size >= offset else 0)  # recompacted: all of it again
        data = fh.read(_LOG_TAIL)
    for line in data.splitlines():
        if len(fields := line.split(b"\t")) != 5 or line.startswith(b"#"):
            continue
        out = Path(os.fsdecode(fields[3]))
        try:
            if os.stat(out if out.is_absolute() else build_dir / out).st_mtime_ns >= since_ns:
                return True
        except OSError:
            continue  # a symbolic output (a custom target's), never a file
    return False


class Found(Struct, frozen=True):
    reply: cmake_api.Reply
    artifacts: list[Artifact]
    stats: dict[str, list[int]]  # path -> stat record when it hashed true


def collect(forge: Forge, plan: LanePlan, changed: list[Path], out: Reporter) -> Found:
    """Artifacts through the File API reply, hashed; exit 1 when an artifact found
    changed on disk was not rebuilt by Ninja. Another version of a shipped library that an
    earlier build left beside it is removed, and said: no file in the build tree looks
    current that this build did not make."""
    reply = cmake_api.read_reply(plan.build_dir)
    extra = tuple(plan.recipe.certify.targets) if plan.recipe.certify else ()
    shipped = cmake_api.shipped_artifacts(reply, plan.recipe.cmake.targets, extra)
    for path in cmake_api.stale_siblings(reply, shipped):
        path.unlink()
        out.info(f"{plan.lane}: removed {forge.rel(path)}: an earlier build's, not this one's")
    artifacts, stats = collect_artifacts(shipped)
    if gone := [p for p in changed if not p.is_file()]:
        raise OperationFailed(
            f"{plan.lane}: {', '.join(forge.rel(p) for p in gone)} changed on disk and "
            "Ninja did not rebuild it: no report can say what it is",
            hint=f"delete {forge.rel(plan.build_dir)} and build again",
            details={"lane": plan.lane, "artifacts": [str(p) for p in gone]},
        )
    return Found(reply, artifacts, stats)


# ----------------------------------------------------------------------------- git's view
# The view of git a lane build's own processes get (issue 20): canonical, and still true.
# Upstreams compile git's answers in (llama.cpp's build-info: `rev-parse --short HEAD`,
# `rev-list --count HEAD`, `describe`), which depend on the workspace, not the source:
# `--short` grows with the object count (8 characters after a rebase, 7 on a depth-1 fetch)
# or a user's `core.abbrev`; `--count` counts whatever history was fetched. So the build
# sees `core.abbrev` pinned (ABBREV, on the command-line scope), the history cut at the
# pinned commit (and a git worker's) as a depth-1 fetch has it (`GIT_SHALLOW_FILE`: `--count`
# is 1 + the patches everywhere), replace refs off and no GIT_DIR-style redirection. The
# commit ids are untouched: the binary embeds the real commit.

ABBREV = 12
VIEW_FILE = "dgr-git-shallow"
# variables that would point git elsewhere or add configuration the view does not pin
_DROPPED = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_CONFIG_PARAMETERS",
    "GIT_REPLACE_REF_BASE",
    "GIT_GRAFT_FILE",
)


def write_git_view(build_dir: Path, commits: Iterable[str]) -> Path:
    """The shallow file (one commit id a line) in the lane's build directory; rewritten
    only when it changes (a no-op build writes nothing)."""
    path = build_dir / VIEW_FILE
    text = "".join(f"{c}\n" for c in sorted(set(commits)))
    with contextlib.suppress(OSError):
        if path.read_text() == text:
            return path
    build_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path


def see_git_through(env: MutableMapping[str, str], view: Path) -> None:
    for name in list(env):
        if name in _DROPPED or name.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")):
            del env[name]
    env["GIT_CONFIG_COUNT"] = "1"
    env["GIT_CONFIG_KEY_0"] = "core.abbrev"
    env["GIT_CONFIG_VALUE_0"] = str(ABBREV)
    env["GIT_SHALLOW_FILE"] = os.fspath(view)
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
