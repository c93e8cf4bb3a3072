"""Benchmark: `dgr-forge rebase --onto` and `--continue` vs the raw tools on the same data:
`git rebase --onto` plus `git format-patch` of the result (the series as files, as the
forge writes it), in a clone of the same commits.

Builds an upstream with FILES source files, a series of PATCHES patches (one file each),
then moves upstream on by one commit that shifts the lines of every other patched file
(so half the series is "refreshed", half "unchanged") and, with `--conflict`, rewrites the
line the first patch changes. Times, runs interleaved (load hits both alike):

* raw: `git rebase --onto NEW OLD` + `git format-patch NEW..` (with `--conflict`: the
  rebase up to its stop, then, after the same resolution, `git rebase --continue` +
  `git format-patch`)
* dgr-forge: `dgr-forge rebase --onto NEW` (replay + re-export + verify round trip +
  manifest + report; with `--conflict` up to its stop, then `rebase --continue`), the
  workspace already patched at the old pin, as in real use. Target: <= 1.5x raw.
* floor (with `--conflict`): `python -c "import typer"` beside the raw `--continue`: what
  any Python CLI pays before it does anything (a raw `--continue` on a small series costs
  about as much, so no Python tool reaches 1.5x of it there)

Run from the repository root (dgr-forge importable: `pip install -e .[test]`, or
PYTHONPATH=src):

    python -m bench.rebase [--files 2000] [--patches 50] [--runs 5] [--keep] [--overlap]
                           [--conflict] [--conflict-at N] [--no-bytecode] [--baseline SRC]

`--conflict-at N` puts the conflict on patch N (0-based; default 0, the first): the rebase
then replays N patches before it stops, as a real series' conflict mid-way does.
By default the forge runs from compiled bytecode, as an installed package does
(`--no-bytecode` keeps PYTHONDONTWRITEBYTECODE as set: every start compiles the sources).

`--overlap` makes the series look like a long-lived real one: every patch also edits its
own function in one shared file that upstream changes too, so no patch can be replayed in
the engine's one merge for many (upstream/replay.py) and each takes the per-patch merge.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.git import Upstream
from tests.support.roots import CANONICAL, Edit, make_root

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"  # for the CLI processes the bench starts

ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("DGR_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@invalid",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@invalid",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z",
    "PYTHONPATH": str(SRC),
    "NO_COLOR": "1",
}


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {proc.stderr}")
    return proc.stdout.strip()


def source(i: int) -> str:
    return "".join(f"int f{i}_{j}(void) {{ return {j}; }}\n" for j in range(40))


def forge(root: Path, *args: str, ok: tuple[int, ...] = (0,), src: Path = SRC) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "dgr_forge", "--root", str(root), *args],
        env={**ENV, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
    )
    if proc.returncode not in ok:
        raise SystemExit(f"dgr-forge {' '.join(args)} failed:\n{proc.stderr}")
    return time.perf_counter() - started


def timed(cwd: Path, *commands: list[str]) -> float:
    """The wall time of raw git commands run one after the other (a rebase's stop allowed)."""
    started = time.perf_counter()
    for cmd in commands:
        proc = subprocess.run(cmd, cwd=cwd, env={**ENV, "GIT_EDITOR": "true"}, capture_output=True)
        if proc.returncode not in (0, 1) or (proc.returncode and cmd[1] != "rebase"):
            raise SystemExit(f"{' '.join(cmd)}: {proc.stderr.decode()}")
    return time.perf_counter() - started


def resolve(repo: Path, path: str) -> None:
    """The same resolution for both: upstream's side, plus one line of the patch's."""
    git(repo, "checkout", "-q", "--ours", "--", path)
    with (repo / path).open("a") as f:
        f.write("/* dgr: resolved */\n")
    git(repo, "add", "--", path)


def _patched(text: str) -> str:
    return text.replace("return 20;", "return 20 + 1; /* dgr */")


SHARED = "src/shared.c"  # --overlap: the file every patch and upstream change


def _shared_edit(i: int) -> Callable[[str], str]:
    return lambda text: text.replace(f"return {i};", f"return {i} + 1; /* dgr {i} */")


def paired(ours: list[float], raws: list[float]) -> str:
    """The median of each run's own ratio (forge and raw ran back to back, under the same
    load), with their range: a ratio of two medians mixes runs minutes apart, and the raw
    side's median alone moved 0.15 -> 0.51 s between two sets on a shared machine."""
    ratios = sorted(o / r for o, r in zip(ours, raws, strict=True))
    return f"{statistics.median(ratios):.2f} (runs {ratios[0]:.2f}..{ratios[-1]:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--patches", type=int, default=50)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="keep the directory (for profiling)")
    ap.add_argument("--overlap", action="store_true", help="every patch also edits one shared file")
    ap.add_argument("--conflict", action="store_true", help="upstream rewrites patch 1's line")
    ap.add_argument(
        "--conflict-at", type=int, default=0, metavar="N", help="the patch that conflicts (0-based)"
    )
    ap.add_argument(
        "--no-bytecode",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE as set (every start compiles dgr-forge's sources)",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        metavar="SRC",
        help="another dgr-forge source tree (its src/, e.g. a worktree of the commit before) "
        "timed on the same data, interleaved: before/after figures under the same load",
    )
    args = ap.parse_args()
    if not 0 <= args.conflict_at < args.patches:
        ap.error(f"--conflict-at: 0..{args.patches - 1}")
    tmp = Path(tempfile.mkdtemp(prefix="dgr-bench-rebase-"))
    if not args.no_bytecode:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        ENV["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    try:
        up = tmp / "upstream"
        up.mkdir()
        git(up, "init", "-q")
        for i in range(args.files):
            (up / "src" / f"m{i // 100}").mkdir(parents=True, exist_ok=True)
            (up / "src" / f"m{i // 100}" / f"f{i}.c").write_text(source(i))
        if args.overlap:
            (up / SHARED).write_text(
                "".join(f"int s{j}(void) {{\n    return {j};\n}}\n\n" for j in range(args.patches))
            )
        git(up, "add", "-A")
        git(up, "commit", "-q", "-m", "initial")
        old = git(up, "rev-parse", "HEAD")

        # the series, authored with plain git in a clone, exported with the canonical flags
        step = args.files // args.patches
        patched = [i * step for i in range(args.patches)]
        edits = [
            Edit(
                {
                    f"src/m{i // 100}/f{i}.c": _patched,
                    **({SHARED: _shared_edit(n)} if args.overlap else {}),
                },
                f"dgr: patch file {i}",
            )
            for n, i in enumerate(patched)
        ]
        author = tmp / "author"  # kept: the raw rebase below starts from its commits
        root = make_root(
            tmp / "forge",
            Upstream(up, [old]),
            edits,
            flags=CANONICAL,
            names="git",
            trees=False,
            scratch=author,
        ).root
        forge(root, "patch")
        forge(root, "export")

        # upstream moves on: every other patched file gets two lines on top
        for i in patched[::2]:
            f = up / "src" / f"m{i // 100}" / f"f{i}.c"
            f.write_text("/* upstream */\n\n" + f.read_text())
        if args.overlap:
            (up / SHARED).write_text("/* upstream */\n\n" + (up / SHARED).read_text())
        at = patched[args.conflict_at]
        first = f"src/m{at // 100}/f{at}.c"  # the conflicting patch's file
        if args.conflict:
            f = up / first
            f.write_text(f.read_text().replace("return 20;", "return 20 - 0; /* upstream */"))
        git(up, "commit", "-q", "-am", "upstream: headers")
        new = git(up, "rev-parse", "HEAD")

        raw_base = tmp / "raw"
        git(tmp, "clone", "-q", str(author), str(raw_base))
        git(raw_base, "fetch", "-q", str(up), new)
        # each run rebases fresh copies (not timed), interleaved: load hits all alike
        forges = {"dgr-forge": SRC}
        if args.baseline:
            forges["baseline"] = args.baseline.resolve()
        raws: list[float] = []
        raw_cont: list[float] = []
        ours: dict[str, list[float]] = {name: [] for name in forges}
        our_cont: dict[str, list[float]] = {name: [] for name in forges}
        noops: dict[str, list[float]] = {name: [] for name in forges}
        floors: list[float] = []  # the interpreter start every dgr-forge run pays
        patches = ["git", "format-patch", "-q", "-o", "out", f"{new}..HEAD"]
        for run in range(args.runs):
            raw_repo = tmp / f"raw-{run}"
            shutil.copytree(raw_base, raw_repo, symlinks=True)
            roots = {name: tmp / f"{name}-{run}" for name in forges}
            for run_root in roots.values():
                shutil.copytree(root, run_root, symlinks=True)
            srcs = {name: r / ".dgr" / "src" / "llama.cpp" for name, r in roots.items()}
            for repo in (raw_repo, *srcs.values()):
                git(repo, "status", "-s")  # a copy's index has stale stat data: refresh it
            rebase = ["git", "rebase", "-q", "--onto", new, old]
            raws.append(timed(raw_repo, rebase, *([] if args.conflict else [patches])))
            for name, code in forges.items():
                ours[name].append(
                    forge(
                        roots[name],
                        "rebase",
                        "--onto",
                        new,
                        ok=(3,) if args.conflict else (0,),
                        src=code,
                    )
                )
            if args.conflict:
                resolve(raw_repo, first)
                raw_cont.append(timed(raw_repo, ["git", "rebase", "--continue"], patches))
                floors.append(timed(tmp, [sys.executable, "-c", "import typer"]))
                for name, code in forges.items():
                    resolve(srcs[name], first)
                    our_cont[name].append(forge(roots[name], "rebase", "--continue", src=code))
            for name, code in forges.items():
                noops[name].append(forge(roots[name], "rebase", "--onto", new, src=code))
            if not args.keep:
                for run_root in roots.values():
                    shutil.rmtree(run_root)
        raw = statistics.median(raws)
        shared = f", each also editing {SHARED} (--overlap)" if args.overlap else ""
        what = f"; patch {args.conflict_at + 1} conflicts (--conflict)" if args.conflict else ""
        print(
            f"series: {args.patches} patches on {args.files} files{shared}; upstream moved "
            f"1 commit{what}"
        )
        mode = "sources compiled at every start" if args.no_bytecode else "bytecode"
        print(f"runs: {args.runs} (median; min in brackets); {mode}")
        upto = " (to the stop)" if args.conflict else " + format-patch"
        print(f"raw git rebase --onto{upto}: {raw:7.3f} s  [{min(raws):.3f}]")
        for name in forges:
            mine = statistics.median(ours[name])
            print(
                f"{name} rebase --onto:    {mine:7.3f} s  [{min(ours[name]):.3f}]  "
                f"ratio {paired(ours[name], raws)} (includes re-export, round-trip verify, "
                "manifest, report; target <= 1.5)"
            )
        if args.conflict:
            rc = statistics.median(raw_cont)
            print(f"raw git rebase --continue + format-patch: {rc:7.3f} s  [{min(raw_cont):.3f}]")
            for name in forges:
                oc = statistics.median(our_cont[name])
                print(
                    f"{name} rebase --continue: {oc:7.3f} s  [{min(our_cont[name]):.3f}]  "
                    f"ratio {paired(our_cont[name], raw_cont)} (target <= 1.5)"
                )
            print(
                f"floor, python -c 'import typer': {statistics.median(floors):7.3f} s  "
                f"ratio {paired(floors, raw_cont)} (what any run of a Python CLI costs)"
            )
        for name in forges:
            print(f"{name} rebase (no-op):   {statistics.median(noops[name]):7.3f} s")
        if args.keep:
            print(f"kept: {tmp} (dgr-forge-0 before the rebase: {root}; onto {new})")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
