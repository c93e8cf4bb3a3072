"""Benchmark: `dgr-forge bump` (bisection) vs the naive one-replay-per-commit search.

Builds an upstream with FILES source files and a series of PATCHES patches (one file
each), then COMMITS first-parent commits after the pin: each touches one unpatched file,
except one that takes a patch upstream (a third of the way: the patch becomes empty) and
one that rewrites a patched line (at BREAK: that patch conflicts from there on). Times:

* bump: `dgr-forge bump --dry-run` end to end (CLI: fetch of the range, scratch setup,
  the bisection's dry-run replays, the verifying canary replay, the report)
* naive: the same replay engine, one replay per first-parent commit, oldest first, until
  the first one that breaks (the least a search without bisection must do), plus the
  same fixed costs (everything bump does but its dry-run replays)
* by hand: `dgr-forge rebase --onto C --dry-run` per commit (timed on a few, extrapolated)
* raw: the bisection a person scripts with the raw tool on the same data (a copy of the
  patched workspace): the range fetch, then `git rebase --onto C PIN` of the series per
  probed commit (the target first, then halving; a stop is "broken", then
  `git rebase --abort`), and `git format-patch` of the answer. Target: bump <= 1.5x raw.

Run from the repository root (dgr-forge importable: `pip install -e .[test]`, or
PYTHONPATH=src):

    python -m bench.bump [--commits 300] [--files 500] [--patches 10] [--break-at 201]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.git import Upstream
from tests.support.roots import CANONICAL, Edit, make_root

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("DGR_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@invalid",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@invalid",
    "PYTHONPATH": str(SRC),
    "NO_COLOR": "1",
}


def git(cwd: Path, *args: str, date: int = 0) -> str:
    env = dict(ENV)
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"@{date} +0000"
    proc = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {proc.stderr}")
    return proc.stdout.strip()


def forge(root: Path, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "dgr_forge", "--root", str(root), "--json", *args],
        env=ENV,
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - started
    if proc.returncode not in ok:
        raise SystemExit(f"dgr-forge {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return took, json.loads(proc.stdout)


def path_of(i: int) -> str:
    return f"src/m{i // 100}/f{i}.c"


def source(i: int) -> str:
    return "".join(f"int f{i}_{j}(void) {{ return {j}; }}\n" for j in range(40))


def build(
    tmp: Path, files: int, patches: int, commits: int, break_at: int
) -> tuple[Path, list[str]]:
    up = tmp / "upstream"
    up.mkdir()
    git(up, "init", "-q")
    for i in range(files):
        (up / path_of(i)).parent.mkdir(parents=True, exist_ok=True)
        (up / path_of(i)).write_text(source(i))
    git(up, "add", "-A")
    when = 1_700_000_000
    git(up, "commit", "-q", "-m", "initial", date=when)
    pin = git(up, "rev-parse", "HEAD")
    step = files // patches
    patched = [i * step for i in range(patches)]

    def edit(text: str) -> str:
        return text.replace("return 20;", "return 20 + 1; /* dgr */")

    edits = [Edit({path_of(i): edit}, f"dgr: patch file {i}") for i in patched]
    root = make_root(
        tmp / "forge", Upstream(up, [pin]), edits, flags=CANONICAL, names="git", trees=False
    ).root
    forge(root, "patch")
    forge(root, "export")
    taken_at = commits // 3
    churn = [i for i in range(files) if i not in patched]
    after = []
    for n in range(1, commits + 1):
        if n == taken_at:  # upstream takes patch 2: it becomes empty, dropped
            f = up / path_of(patched[1])
            f.write_text(edit(f.read_text()))
        elif n == break_at:  # upstream rewrites the line patch 1 changes: a conflict
            f = up / path_of(patched[0])
            f.write_text(f.read_text().replace("return 20;", "return 20 - 0; /* upstream */"))
        else:
            f = up / path_of(churn[n % len(churn)])
            f.write_text(f.read_text() + f"/* upstream change {n} */\n")
        git(up, "commit", "-q", "-am", f"upstream: change {n}", date=when + 60 * n)
        after.append(git(up, "rev-parse", "HEAD"))
    return root, after


def naive_replays(root: Path, after: list[str]) -> tuple[int, float]:
    """One TreeReplay (bump's own replay engine) per commit, oldest first, until the
    first that breaks; in-process, after the same fetch and scratch setup."""
    sys.path.insert(0, str(SRC))
    from dgr_forge.core.forge import Forge
    from dgr_forge.core.gitutil import out
    from dgr_forge.core.output import Reporter
    from dgr_forge.upstream import manifest
    from dgr_forge.upstream.patches import ensure_patched
    from dgr_forge.upstream.rebase.bump import TreeReplay
    from dgr_forge.upstream.rebase.gitops import ensure_history
    from dgr_forge.upstream.series_journal import borrow_objects

    quiet = Reporter(quiet=True)
    f = Forge.locate(root, None)
    m = manifest.load(f.upstream_manifest, f.root)
    patched = ensure_patched(f, m, quiet)
    src = patched.src_dir
    olds = out(src, "rev-list", "--reverse", f"{m.commit}..{patched.head_commit}").split()
    ensure_history(src, m.url, m.commit, after[-1], quiet, to=after[-1])
    replay_repo = root.parent / "naive-replay"
    borrow_objects(src, replay_repo, quiet)
    series = [(e.file, o) for e, o in zip(m.series, olds, strict=True)]
    probe = TreeReplay(replay_repo, m.commit, series)
    started = time.perf_counter()
    runs = 0
    with probe.engine:
        for commit in after:
            runs += 1
            if probe(commit) is not None:
                break
    return runs, time.perf_counter() - started


def raw_bisect(root: Path, url: str, pin: str, after: list[str], work: Path) -> tuple[int, float]:
    """The raw bisection (module doc) in a copy of the patched workspace: its replays and
    wall time."""
    shutil.copytree(root / ".dgr" / "src" / "llama.cpp", work, symlinks=True)
    git(work, "status", "-s")  # a copy's index has stale stat data: refresh it
    started = time.perf_counter()
    head = git(work, "rev-parse", "HEAD")
    since = git(work, "log", "-1", "--format=%ct", pin)
    git(work, "fetch", "-q", "--no-tags", f"--shallow-since={since}", url, after[-1])
    replays = 0

    def clean(i: int) -> bool:
        nonlocal replays
        replays += 1
        proc = subprocess.run(
            ["git", "rebase", "-q", "--onto", after[i], pin, head],
            cwd=work, env=ENV, capture_output=True,
        )  # fmt: skip
        if proc.returncode != 0:
            git(work, "rebase", "--abort")
        git(work, "checkout", "-q", "--detach", head)
        return proc.returncode == 0

    lo, hi = -1, len(after) - 1
    if clean(hi):
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if clean(mid) else (lo, mid)
    if lo >= 0:
        git(work, "rebase", "-q", "--onto", after[lo], pin, head)
        git(work, "format-patch", "-q", "-o", str(work.parent / "raw-out"), f"{after[lo]}..HEAD")
    return replays, time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--patches", type=int, default=10)
    ap.add_argument("--break-at", type=int, default=201)
    ap.add_argument("--by-hand", type=int, default=3, help="rebase --dry-run runs to time")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dgr-bench-bump-"))
    try:
        root, after = build(tmp, args.files, args.patches, args.commits, args.break_at)
        bump_s, data = forge(root, "bump", "--dry-run", ok=(0, 3))
        assert data["newest_clean"] == after[args.break_at - 2], data
        replays = int(str(data["replays"]))
        naive_n, naive_probe_s = naive_replays(root, after)
        # bump's per-replay probe cost, measured the same way, for the fixed-cost split
        probe_s = naive_probe_s / naive_n
        fixed = bump_s - (replays - 1) * probe_s  # all of bump but its dry-run probes
        naive_s = fixed + naive_probe_s
        pin = git(root / ".dgr" / "src" / "llama.cpp", "rev-parse", "refs/dgr/pin")
        raw_n, raw_s = raw_bisect(root, (tmp / "upstream").as_uri(), pin, after, tmp / "raw")
        hand = [forge(root, "rebase", "--onto", c, "--dry-run")[0] for c in after[: args.by_hand]]
        hand_each = sum(hand) / len(hand)
        n = args.commits
        print(
            f"history: {n} first-parent commits after the pin, {args.patches} patches on "
            f"{args.files} files; a patch upstreamed at {n // 3}, the series breaks at "
            f"{args.break_at}"
        )
        print(
            f"bump --dry-run (bisection):  {bump_s:7.2f} s  {replays} replays "
            f"(budget ceil(log2 {n}) + 2 = {math.ceil(math.log2(n)) + 2})"
        )
        print(
            f"naive, one replay per commit: {naive_s:7.2f} s  {naive_n} replays "
            f"({probe_s * 1000:.0f} ms each, same engine, same fixed costs)"
        )
        print(
            f"naive by hand (rebase --onto C --dry-run per commit): {hand_each:.2f} s each, "
            f"~{hand_each * naive_n:.0f} s for {naive_n} commits"
        )
        print(
            f"raw bisection (git rebase per probe + format-patch): {raw_s:7.2f} s  {raw_n} "
            f"replays; ratio bump / raw {bump_s / raw_s:.2f} (target <= 1.5)"
        )
        print(
            f"ratio naive/bump: {naive_s / bump_s:.1f}x (replays {naive_n / replays:.1f}x); "
            f"by hand/bump: {hand_each * naive_n / bump_s:.0f}x"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
