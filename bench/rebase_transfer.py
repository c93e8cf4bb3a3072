"""Benchmark: what `rebase` and `bump` fetch across N upstream commits, vs raw `git`.

Builds (git fast-import) a test upstream with HISTORY commits before the pin, each moving
KB kilobytes of incompressible data (as llama.cpp's history moves vocab files and
kernels), a three-patch series on a shallow (depth-1) workspace, then RANGE commits after
the pin, one of them (halfway) rewriting patch 2's lines, so the replay conflicts and the
conflict report needs the range's history. Served over file:// (protocol v2) by an
upload-pack whose `packObjectsHook` logs every pack it sends. For each way, from a fresh
copy of the same shallow workspace, prints the pack bytes and objects the server sent and
the wall time:

* dgr-forge `rebase --onto NEW --dry-run`, `rebase --onto NEW` (stops at the conflict,
  exit 3, naming the upstream commit), `bump --to NEW --dry-run`
* raw git, the same replay (fetch, then `git rebase --onto NEW PIN`, then `git log
  PIN..NEW -- FILE` for the conflict), fetching the range three ways: `--shallow-since`
  the pin's date (the least git can fetch), `--deepen=64` then `--deepen=1024` until the
  pins connect (what the forge did before issue 29), `--unshallow` (what a user of a
  shallow clone usually types)

Run from the repository root (dgr-forge importable: `pip install -e .[test]`, or
PYTHONPATH=src):

    python -m bench.rebase_transfer [--history 2000] [--range 88] [--kb 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.git import GIT_ENV, make_upstream, sh_git
from tests.support.history import PackLog, add_history, pack_log, range_objects
from tests.support.rebase import SERIES, make_series

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("DGR_")},
    **GIT_ENV,
    "PYTHONPATH": str(SRC),
    "NO_COLOR": "1",
}
CONFLICTED = SERIES[1][1]  # the patch a halfway upstream commit conflicts with


def forge(root: Path, log: PackLog, *args: str) -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "dgr_forge", "--root", str(root), *args],
        env={**ENV, **log.env},
        capture_output=True,
        text=True,
    )
    if proc.returncode not in (0, 3):
        raise SystemExit(f"dgr-forge {' '.join(args)} failed:\n{proc.stderr}")
    return time.perf_counter() - started, proc.returncode


def raw(src: Path, log: PackLog, url: str, pin: str, new: str, how: str) -> float:
    """The same replay with plain git: fetch the range, rebase the series, log the file."""
    env = {**ENV, **log.env}

    def run(*args: str, ok: tuple[int, ...] = (0,)) -> None:
        proc = subprocess.run(["git", *args], cwd=src, env=env, capture_output=True, text=True)
        if proc.returncode not in ok:
            raise SystemExit(f"git {' '.join(args)}: {proc.stderr}")

    started = time.perf_counter()
    run("fetch", "-q", "--depth=1", "--", url, new)
    if how == "since":
        since = sh_git(src, "log", "-1", "--format=%ct", pin)
        run("fetch", "-q", f"--shallow-since={since}", "--", url, new)
    elif how == "deepen":  # the forge before issue 29: 64, then 1,024, until connected
        for step in ("--deepen=64", "--deepen=1024", "--unshallow"):
            run("fetch", "-q", step, "--", url, new)
            connected = ["git", "merge-base", pin, new]
            if subprocess.run(connected, cwd=src, env=env, capture_output=True).returncode == 0:
                break
    else:
        run("fetch", "-q", how, "--", url, new)
    run("rebase", "-q", "--onto", new, pin, ok=(0, 1))  # stops at patch 2's conflict
    run("log", "--format=%H %s", f"{pin}..{new}", "--", CONFLICTED)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--history", type=int, default=2000, help="commits before the pin")
    ap.add_argument("--range", type=int, default=88, help="commits between the two pins")
    ap.add_argument("--kb", type=int, default=4, help="kilobytes each history commit moves")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dgr-bench-rebase-transfer-"))
    try:
        up = make_upstream(tmp / "upstream")
        add_history(up, args.history, "models/vocab.txt", args.kb * 1024)
        base = make_series(tmp, up)
        pin = base.pin
        half = args.range // 2
        add_history(up, half - 1, "models/vocab.txt", args.kb * 1024)
        text = (up.path / CONFLICTED).read_text().replace("return 1;", "return 3; /* up */")
        up.commit({CONFLICTED: text}, "ggml: three backends")
        add_history(up, args.range - half, "models/vocab.txt", args.kb * 1024)
        new = up.head
        assert (base.root / ".dgr/src/llama.cpp/.git/shallow").exists()

        rows: list[tuple[str, float, PackLog]] = []
        for name, cmd in (
            ("dgr-forge rebase --dry-run", ("rebase", "--onto", new, "--dry-run")),
            ("dgr-forge rebase (conflict)", ("rebase", "--onto", new)),
            ("dgr-forge bump --dry-run", ("bump", "--to", new, "--dry-run")),
        ):
            run_root = tmp / f"run-{len(rows)}"
            shutil.copytree(base.root, run_root, symlinks=True)
            log = pack_log(tmp / f"log-{len(rows)}")
            seconds, _code = forge(run_root, log, *cmd)
            rows.append((name, seconds, log))
            shutil.rmtree(run_root)
        for name, how in (
            ("git --shallow-since=<pin>", "since"),
            ("git --deepen=64, 1024 (old forge)", "deepen"),
            ("git --unshallow", "--unshallow"),
        ):
            repo = tmp / f"raw-{len(rows)}"
            shutil.copytree(base.root / ".dgr/src/llama.cpp", repo, symlinks=True)
            log = pack_log(tmp / f"log-{len(rows)}")
            rows.append((name, raw(repo, log, up.url, pin, new, how), log))
            shutil.rmtree(repo)

        print(
            f"upstream: {args.history} commits before the pin ({args.kb} KiB each), "
            f"{args.range} in the range; series: 3 patches, patch 2 conflicts halfway"
        )
        print(f"the range's own objects: {range_objects(up, pin, new)}")
        print(f"{'':32} {'pack bytes':>12} {'objects':>8} {'time':>8}")
        for name, seconds, log in rows:
            print(f"{name:32} {log.bytes:12,d} {log.objects:8d} {seconds:7.2f}s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
